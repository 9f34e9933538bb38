"""The optimization history of a single-objective study: every trial's value and the best so far."""

from __future__ import annotations

from typing import Literal, NamedTuple

import optuna
from optuna.trial import TrialState

from autotune.report._records import metric_names, objective_directions, trial_records


class HistoryPoint(NamedTuple):
    number: int
    value: float
    kind: Literal["feasible", "infeasible", "pruned"]
    outcome: str
    reason: str


class HistoryData(NamedTuple):
    """Objective value per trial (single objective) and the best feasible value so far."""

    metric: str
    direction: str
    points: list[HistoryPoint]
    best_so_far: list[tuple[int, float]]  # (trial number, best feasible value up to it)


def history_data(study: optuna.Study) -> HistoryData:
    """The optimization history of a single-objective study (COMPLETE and PRUNED trials with a value)."""
    if len(study.directions) != 1:
        raise ValueError("history_data needs a single-objective study; use pareto_data")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    points: list[HistoryPoint] = []
    best: list[tuple[int, float]] = []
    current: float | None = None
    for r in trial_records(study):
        if r.values is None or r.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        value = r.values[0]
        kind: Literal["feasible", "infeasible", "pruned"]
        kind = "pruned" if r.state == TrialState.PRUNED else "feasible" if r.feasible else "infeasible"
        points.append(HistoryPoint(r.number, value, kind, r.outcome, r.reason))
        if kind == "feasible":
            current = value if current is None else (max if maximize else min)(current, value)
        if current is not None:
            best.append((r.number, current))
    return HistoryData(metric_names(study)[0], objective_directions(study)[0], points, best)
