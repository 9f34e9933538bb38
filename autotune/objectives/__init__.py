"""Objectives: what a trial's measurements are worth.

Objective and intermediate values, constraints, autotune's multi-objective pruning rule
(:class:`DominancePruner`), Pareto fronts, confirmation statistics and configuration keys. Pure Python
over plain data (no torch; Optuna only for the single-objective pruner).
"""

from autotune.objectives._config_key import config_key
from autotune.objectives._confirmation import Group, Measurement, choose_best, group_measurements
from autotune.objectives._dominance import dominates, pareto_front
from autotune.objectives._metrics import (
    CONSTRAINT_NAMES,
    constraint_values,
    metric_value,
    objective_values,
    window_history,
    window_value,
)
from autotune.objectives._noise_pruner import NoiseAwarePruner
from autotune.objectives._pruning import DominancePruner, History, PruningDecision

__all__ = [
    "CONSTRAINT_NAMES",
    "DominancePruner",
    "Group",
    "History",
    "Measurement",
    "NoiseAwarePruner",
    "PruningDecision",
    "choose_best",
    "config_key",
    "constraint_values",
    "dominates",
    "group_measurements",
    "metric_value",
    "objective_values",
    "pareto_front",
    "window_history",
    "window_value",
]
