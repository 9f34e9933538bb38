"""The rule that stops a study whose workload is broken, instead of spending its budget on one crash.

A trial's failure never stops a study (DESIGN.md), with one exception: when the baseline and the next
trials — different configurations — all crashed with the same error in the workload (its own code, or
autotune's check of what it returned), every further trial would crash the same way. The study then
stops after :data:`STOP_AFTER` trials with one line that says why and how to reproduce it in one
``autotune trial``; ``autotune run`` exits 1. Fix the workload and run again: the study resumes.

Not counted as the workload's fault: out of memory, timeouts, hangs, a rank killed by a signal, a peer
that went away, and a dataset too small for a configuration's batch — those depend on the machine or the
configuration, and the search goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError
from autotune.tracebacks import parse_lines, recorded_where

__all__ = ["STOP_AFTER", "BrokenWorkload", "BrokenWorkloadError", "check", "find_broken"]

STOP_AFTER = 3  # the baseline and the next two trials
_CRASHED = "crashed"
_COUNTED = ("complete", "pruned", "oom", "diverged", "crashed", "timeout", "hang")
# autotune's own checks of what the workload returned (raised in the rank, about the workload)
_CONTRACT = ("Workload.", "the workload's", "activation_checkpointing: no module of checkpoint_modules")
_NOT_THE_WORKLOAD = ("DatasetTooSmall", "connection closed by peer", "connection reset by peer", "broken pipe",
                     "connection refused", "socket closed", "timed out", "out of memory")
_RANK = re.compile(r"^rank \d+: ")


class BrokenWorkloadError(AutotuneError):
    """The study stopped early: its workload fails the same way in every configuration (exit status 1)."""


@dataclass(frozen=True)
class BrokenWorkload:
    trials: list[int]
    error: str  # "TypeError: ..." as the rank recorded it
    where: str | None  # the user's file:line, when the traceback reaches it

    def message(self, source: str) -> str:
        at = f" at {self.where}" if self.where else ""
        numbers = ", ".join(f"#{n}" for n in self.trials)
        return (
            f"{source}: stopped early: the baseline and the next {len(self.trials) - 1} trials ({numbers}), each a "
            f"different configuration, failed with the same error in the workload: {self.error}{at}; fix the "
            f"workload, check it with `autotune validate {source}`, reproduce one trial with `autotune trial "
            f"{source}`, then run again (the study resumes)"
        )


def signature(reason: str) -> str:
    """The error of a crashed trial, without the rank and with numbers masked (shapes, sizes, addresses)."""
    return re.sub(r"\d+", "N", _RANK.sub("", reason)).strip()


def find_broken(trials: list[Any], stop_after: int = STOP_AFTER) -> BrokenWorkload | None:
    """The verdict over a study's trials (``FrozenTrial``-like: ``number`` and ``user_attrs``), or None.

    Broken: no baseline/search trial ran without crashing, and the first ``stop_after`` of them, the
    baseline among them, crashed with one signature of the workload's making, in different configurations.
    """
    ran = sorted(
        (t for t in trials
         if t.user_attrs.get("role", "search") != "confirm" and t.user_attrs.get("outcome") in _COUNTED),
        key=lambda t: t.number,
    )
    if len(ran) < stop_after or any(t.user_attrs.get("outcome") != _CRASHED for t in ran):
        return None
    first = ran[:stop_after]
    if not any(t.user_attrs.get("role") == "baseline" for t in first):
        return None
    reasons = [str(t.user_attrs.get("reason", "")) for t in first]
    signatures = {signature(r) for r in reasons}
    if len(signatures) != 1 or not _RANK.match(reasons[0]):
        return None  # different errors, or no recorded exception (a signal, a launcher failure)
    error = _RANK.sub("", reasons[0])
    if any(s.lower() in error.lower() for s in _NOT_THE_WORKLOAD):
        return None
    configs = {str(t.user_attrs.get("config_key") or t.user_attrs.get("config")) for t in first}
    if len(configs) < 2:
        return None  # one configuration repeated: that says nothing about the others
    last = first[-1].user_attrs
    parsed = parse_lines(list(last.get("error_lines") or []))
    where = parsed.user.where() if parsed is not None and parsed.user is not None else None
    if where is None:  # the stored lines are the last few: the rank's record has the frame however deep
        where = recorded_where(last.get("trial_dir"))
    contract = error.split(": ", 1)[-1].startswith(_CONTRACT)
    if where is None and not contract:
        return None  # raised in a library or in autotune without passing through the workload's code
    return BrokenWorkload([t.number for t in first], error, where)


def check(study: Any, source: str) -> None:
    """Raise :class:`BrokenWorkloadError` when the study's trials so far show a broken workload.

    The tuner calls this after each baseline/search trial (a minimal hook: the rule lives here)."""
    verdict = find_broken(study.get_trials(deepcopy=False))
    if verdict is not None:
        raise BrokenWorkloadError(verdict.message(source))
