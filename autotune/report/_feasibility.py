"""The constraints of every COMPLETE trial, which optuna-dashboard hides."""

from __future__ import annotations

from typing import NamedTuple

import optuna
from optuna.trial import TrialState

from autotune.report._batch import memory_budget
from autotune.report._records import trial_records
from autotune.spec import StudySpec


class FeasibilityRow(NamedTuple):
    number: int
    outcome: str
    constraints: dict[str, float]  # name -> value; feasible when <= 0
    feasible: bool
    peak_memory_mb: float | None


class FeasibilityData(NamedTuple):
    """The constraints of every COMPLETE trial (``memory``, ``diverged``), which optuna-dashboard hides."""

    names: list[str]
    rows: list[FeasibilityRow]
    budget: float | None


def feasibility_data(study: optuna.Study, spec: StudySpec | None = None) -> FeasibilityData:
    """Constraint values per COMPLETE trial; ``memory`` and ``diverged`` first, any others after."""
    rows = []
    names: list[str] = []
    for r in trial_records(study):
        if r.state != TrialState.COMPLETE:
            continue
        for name in r.constraints:
            if name not in names:
                names.append(name)
        rows.append(FeasibilityRow(r.number, r.outcome, dict(r.constraints), bool(r.feasible), r.peak_memory_mb))
    known = [n for n in ("memory", "diverged") if n in names]
    return FeasibilityData(known + [n for n in names if n not in known], rows, memory_budget(study, spec))
