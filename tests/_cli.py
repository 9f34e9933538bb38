"""`autotune ...` run inside the test process: what a user's shell would see, without a Python start.

A subprocess costs a fresh interpreter and autotune's imports (torch, Optuna: seconds of CPU on 2 cores);
where the process boundary is not what a test checks, ``autotune(...)`` runs the click command here:
its exit status, stdout and stderr, with everything else a terminal would have shown added to stderr —
the traceback Python prints when ``--debug`` lets an exception through, Python warnings (pytest records
them instead of printing them) and log records of any logger (Optuna's does not propagate to the root).
Tests that check the process itself (``python -m autotune.cli``, signals, what a fresh import loads, a
workload printing to the real stderr) keep their subprocess.
"""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from autotune.cli import main


@dataclass(frozen=True)
class CliRun:
    """How one `autotune` command ended: what a shell would show."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}:{record.name}:{record.getMessage()}")


@contextlib.contextmanager
def _every_log_record() -> Iterator[_Records]:
    """Every record emitted meanwhile, at any level a handler could be set to print."""
    records = _Records()
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    attached = [lg for lg in loggers if lg is logging.getLogger() or not lg.propagate]
    for lg in attached:
        lg.addHandler(records)
    try:
        yield records
    finally:
        for lg in attached:
            lg.removeHandler(records)


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _columns(columns: str | None) -> Iterator[None]:
    """The CLI's consoles as wide as ``COLUMNS`` says: they read it once, when autotune.cli was imported here,
    where a process of its own would read this run's."""
    from autotune.cli import _commands

    consoles = (_commands.console, _commands.err_console)
    before = [c._width for c in consoles]
    if columns is not None and columns.isdigit():
        for c in consoles:
            c.width = int(columns)
    try:
        yield
    finally:
        for c, width in zip(consoles, before, strict=True):
            c._width = width


def autotune(*args: str, cwd: Path | str | None = None, env: Mapping[str, str | None] | None = None) -> CliRun:
    """Run ``autotune ARGS`` in this process, in ``cwd``, with ``env`` added to the environment (a None value
    removes that variable meanwhile; ``COLUMNS`` also sets the width of the command's output)."""
    runner = CliRunner()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(_inside(Path(cwd)))
        stack.enter_context(_columns((env or {}).get("COLUMNS")))
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.filterwarnings("ignore", category=quiet)  # as Python's default filters hide them
        records = stack.enter_context(_every_log_record())
        result = runner.invoke(main, list(args), env=dict(env or {}), prog_name="autotune")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))  # what Python prints on its way out
    stderr += "".join(f"{warnings.formatwarning(w.message, w.category, w.filename, w.lineno)}" for w in caught)
    stderr += "".join(f"{line}\n" for line in records.lines)
    return CliRun(result.exit_code, result.stdout, stderr)
