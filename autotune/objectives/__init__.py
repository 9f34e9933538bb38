"""Objectives: what a trial's measurements are worth.

Objective and intermediate values, constraints, peak memory predicted before launch
(:class:`MemoryModel`), autotune's multi-objective pruning rule (:class:`DominancePruner`), Pareto fronts,
confirmation statistics, configuration keys, and the one choice of a study (:func:`choose`). No torch;
Optuna for the single-objective pruner and for reading a study's trials.
"""

from autotune.objectives._anatomy import (
    KNOB_BOTTLENECKS,
    Diagnosis,
    binding,
    bottleneck_shares,
    diagnose,
    group_anatomy,
    median_anatomy,
    stored_anatomy,
    study_diagnosis,
)
from autotune.objectives._choice import RACE_ATTR, Choice, choose, choose_from_race, is_reference, measured_groups
from autotune.objectives._compile_payback import CompilePayback, compile_payback, complete_trials
from autotune.objectives._config_key import config_key
from autotune.objectives._confirmation import Group, Measurement, choose_best, group_measurements
from autotune.objectives._dominance import dominates, pareto_front
from autotune.objectives._memory_model import MemoryModel, MemoryPoint, MemoryPrediction, ModelSize, memory_points
from autotune.objectives._metrics import (
    CONSTRAINT_NAMES,
    constraint_values,
    metric_value,
    objective_values,
    running_value,
    window_history,
    window_value,
)
from autotune.objectives._noise import (
    FIRST_TRIAL_FAR_OFF,
    Pooled,
    Separation,
    busy_trials,
    busy_warning,
    could_separate,
    half_width,
    pooled_sd,
)
from autotune.objectives._noise_pruner import MIN_NOISE_DF, NoiseAwarePruner, measured_margin, reading_noise
from autotune.objectives._pruning import DominancePruner, History, PruningDecision
from autotune.objectives._race import MIN_ROUNDS, Contrast, Fit, Standing, contrast, fit, standing
from autotune.objectives._time_to_loss import (
    RunningTimeToLoss,
    TimeToLoss,
    TimeToLossRow,
    estimate_time_to_loss,
    explain_choice,
    loss_noise_floor,
    time_to_loss_attrs,
    window_extras,
)

__all__ = [
    "CONSTRAINT_NAMES", "FIRST_TRIAL_FAR_OFF", "KNOB_BOTTLENECKS", "MIN_NOISE_DF", "MIN_ROUNDS", "RACE_ATTR", "Choice",
    "CompilePayback", "Contrast", "Diagnosis",
    "DominancePruner", "Fit", "Group", "History", "Measurement", "MemoryModel", "MemoryPoint", "MemoryPrediction",
    "ModelSize", "NoiseAwarePruner", "Pooled", "PruningDecision", "RunningTimeToLoss", "Separation", "Standing",
    "TimeToLoss", "TimeToLossRow", "binding", "bottleneck_shares", "busy_trials", "busy_warning", "choose",
    "choose_best", "choose_from_race",
    "compile_payback", "complete_trials", "config_key", "constraint_values", "contrast", "could_separate",
    "diagnose", "dominates", "estimate_time_to_loss", "explain_choice", "fit", "group_anatomy", "group_measurements",
    "half_width", "is_reference", "loss_noise_floor", "measured_groups", "measured_margin", "median_anatomy",
    "memory_points", "metric_value", "objective_values", "pareto_front", "pooled_sd", "reading_noise",
    "running_value", "standing", "stored_anatomy", "study_diagnosis",
    "time_to_loss_attrs", "window_extras", "window_history", "window_value",
]
