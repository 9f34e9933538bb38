"""``python -m autotune.cli``: the same command line as the ``autotune`` console script."""

from autotune.cli._commands import main

main(prog_name="autotune")
