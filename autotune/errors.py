"""The exception tree. Everything autotune raises on purpose derives from :class:`AutotuneError`.

The CLI catches the base class, prints the message as one line and exits 2 for bad input
(:class:`UsageError` and its children) or 1 for a failure of a run.
"""

from __future__ import annotations


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
