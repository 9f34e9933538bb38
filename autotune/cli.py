"""The ``autotune`` command line: parse once, call the library, print with rich.

Every command catches :class:`~autotune.errors.AutotuneError` and prints it as one line: exit 2 for bad
input, 1 for a failed run. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from autotune.errors import AutotuneError

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
err_console = Console(stderr=True)


def _handle_errors(func: F) -> F:
    """Turn AutotuneError into one line on stderr and the right exit status."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return func(*args, **kwargs)
        except AutotuneError as e:
            if ctx.find_root().params.get("debug"):
                raise
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="autotune")
def main(debug: bool) -> None:
    """Calibrate distributed PyTorch training before it runs."""


@main.command()
@click.argument("study_file", type=click.Path())
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a study-file key.")
@_handle_errors
def validate(study_file: str, sets: tuple[str, ...]) -> None:
    """Check a study file (and import its workload); print the resolved study."""
    from autotune.spec import load_spec
    from autotune.summary import render_summary

    spec = load_spec(study_file, overrides=sets)
    render_summary(spec, console)


@main.command()
def schema() -> None:
    """Print the JSON schema of study files (for editors)."""
    from autotune.spec import StudySpec

    click.echo(json.dumps(StudySpec.model_json_schema(), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
