"""The Pareto front of a multi-objective study: every COMPLETE trial in objective space."""

from __future__ import annotations

from typing import NamedTuple

import optuna
from optuna.trial import TrialState

from autotune.objectives import pareto_front
from autotune.report._records import metric_names, objective_directions, trial_records


class ParetoPoint(NamedTuple):
    number: int
    values: tuple[float, ...]
    feasible: bool
    on_front: bool
    role: str


class ParetoData(NamedTuple):
    """Every COMPLETE trial in objective space; ``on_front`` marks the feasible non-dominated ones."""

    metrics: list[str]
    directions: list[str]
    points: list[ParetoPoint]


def pareto_data(study: optuna.Study) -> ParetoData:
    """The Pareto front of a multi-objective study, over feasible COMPLETE trials."""
    directions = objective_directions(study)
    done = [(r, r.values) for r in trial_records(study) if r.state == TrialState.COMPLETE and r.values is not None]
    feasible = [r.number for r, _ in done if r.feasible]
    front = {feasible[i] for i in pareto_front([values for r, values in done if r.feasible], directions)}
    points = [ParetoPoint(r.number, values, bool(r.feasible), r.number in front, r.role) for r, values in done]
    return ParetoData(metric_names(study), directions, points)
