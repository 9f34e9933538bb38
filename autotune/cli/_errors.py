"""How every command fails: one line on stderr and the exit status (2 bad input, 1 failure); ``--debug``
shows the traceback instead. A bad option, argument or command is one line too, not click's usage block."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from autotune.errors import AutotuneError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Turn AutotuneError into one line on stderr and the right exit status; any other exception into one
    line too (exit 1), with its traceback written to a file. ``--debug`` raises instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = ctx.find_root().params.get("debug")
        try:
            return func(*args, **kwargs)
        except AutotuneError as e:
            if debug:
                raise
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except Exception as e:
            if debug:
                raise
            from autotune.errors import describe_internal_error

            line = describe_internal_error(e, f"autotune {ctx.info_name}")
            click.echo(f"error: {line}", err=True)
            sys.exit(1)
        finally:  # the study's database is not held past the command (in-process callers: tests, notebooks)
            tuner = sys.modules.get("autotune.tuner")
            if tuner is not None:
                tuner.release_storages()

    return wrapper  # type: ignore[return-value]


class Group(click.Group):
    """click's group, except that a bad option, argument or command is one line on stderr (exit 2), like
    every other bad input, instead of click's usage block."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `autotune`: click's help is the message
                e.show()
                sys.exit(e.exit_code)
            where = e.ctx.command_path if e.ctx is not None else "autotune"
            message = " ".join(e.format_message().split())
            click.echo(f"error: {message} (see `{where} --help`)", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):  # Ctrl-C before anything of ours ran
                click.echo("interrupted: nothing was started or recorded", err=True)
                sys.exit(130)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def debugging() -> bool:
    """Whether the root command was given ``--debug``."""
    return bool(click.get_current_context().find_root().params.get("debug"))

