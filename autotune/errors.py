"""The exception tree. Everything autotune raises on purpose derives from :class:`AutotuneError`.

The CLI catches the base class, prints the message as one line and exits 2 for bad input
(:class:`UsageError` and its children) or 1 for a failure of a run.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import traceback


class AutotuneError(Exception):
    """Base class of every error autotune raises deliberately."""

    exit_code = 1


class UsageError(AutotuneError):
    """Bad input from the user: a study file, a command-line value, a workload. Exit status 2."""

    exit_code = 2


class StudyFileError(UsageError):
    """The study file cannot be read or is invalid. The message names the file, the field and the fix."""


class WorkloadError(UsageError):
    """The workload entrypoint cannot be imported, raises, or returns something that is not a Workload."""


class LaunchError(AutotuneError):
    """A trial could not be started (torchrun missing, trial folder unwritable, SLURM refusing the job)."""


def first_line(error: BaseException, empty: str | None = None) -> str:
    """The first line of ``error``'s message; for an error without a message, ``empty`` (by default the
    error's type name)."""
    text = str(error).strip()
    if text:
        return text.splitlines()[0]
    return type(error).__name__ if empty is None else empty


def describe_internal_error(error: BaseException, what: str) -> str:
    """One line for an exception autotune did not raise on purpose: what failed, in words, and the path of a
    file holding the full traceback (written to the temporary folder; ``--debug`` shows it instead)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = "".join(traceback.format_exception(error))
    where: str | None
    try:
        fd, where = tempfile.mkstemp(prefix=f"autotune-traceback-{stamp}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"{what}\n\n{text}")
    except OSError:
        where = None
    message = " ".join(str(error).split()) or "(no message)"
    if isinstance(error, ModuleNotFoundError) and error.name:
        cause = (f"the Python module {error.name!r} is not installed ({message}); install the package that "
                 f"provides it (pip install {error.name.split('.')[0]}) or reinstall autotune")
    elif isinstance(error, OSError) and error.filename is not None:
        cause = f"{error.strerror or message}: {error.filename}"
    else:
        cause = f"{type(error).__name__}: {message}"
    if len(cause) > 300:
        cause = cause[:297] + "..."
    tail = f"the traceback is in {where}" if where else "the traceback could not be written to a file"
    return f"{what} failed: {cause} ({tail}; --debug shows it)"

