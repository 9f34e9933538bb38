"""The ``autotune`` command line: the click commands, and what they print.

``autotune.cli:main`` is the console script; ``python -m autotune.cli`` runs it too. The modules: the
commands (_commands), one-line errors and exit statuses (_errors), `autotune trial` (_trial_view), the live
view of `autotune run` (_run_view) and its final table (_run_summary), `best` and `status` (_results), and
the resolved study `validate` prints (_validate).

Only ``main`` is named here: the views import the tuner, the runner and Optuna, which each command imports
when it runs, so that ``autotune --help``, ``schema`` and ``validate`` start without them. Import a view
from its module (``from autotune.cli._run_summary import print_summary``).
"""

from autotune.cli._commands import main

__all__ = ["main"]
