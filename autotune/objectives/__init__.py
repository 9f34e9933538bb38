"""Objectives: what a trial's measurements are worth — objective values (goodput included) and constraints, the
memory model, Pareto fronts, reading noise and the pruning margin, step anatomy, confirmation statistics, configuration
keys, a plan for another scale, the one choice of a study (:func:`choose`). No torch; Optuna's plug-ins: pruners/."""

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
from autotune.objectives._dominance import check_directions, check_length, dominates, pareto_front
from autotune.objectives._goodput import GOODPUT, NOT_SCORED, goodput_attrs, noise_scale_attr, result_goodput
from autotune.objectives._margin import MARGIN_RANGE, MIN_NOISE_DF, PRIOR_MARGIN, Paired, measured_margin, reading_noise
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
from autotune.objectives._race import MIN_ROUNDS, Contrast, Fit, Standing, contrast, fit, lighter, standing
from autotune.objectives._scale_plan import (
    NOISE_SCALE_ATTR,
    ScaleOption,
    ScalePlan,
    held_global_batch,
    noise_scale_of,
    scale_plan,
    scale_plans,
    study_readings,
    study_scale_plan,
)
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
    "CONSTRAINT_NAMES", "FIRST_TRIAL_FAR_OFF", "GOODPUT", "KNOB_BOTTLENECKS", "MARGIN_RANGE", "MIN_NOISE_DF",
    "MIN_ROUNDS", "NOISE_SCALE_ATTR", "NOT_SCORED", "PRIOR_MARGIN", "RACE_ATTR", "Choice", "CompilePayback", "Contrast",
    "Diagnosis", "Fit", "Group", "Measurement", "MemoryModel", "MemoryPoint", "MemoryPrediction", "ModelSize", "Paired",
    "Pooled", "RunningTimeToLoss", "ScaleOption", "ScalePlan", "Separation", "Standing", "TimeToLoss", "TimeToLossRow",
    "binding", "bottleneck_shares", "busy_trials", "busy_warning", "check_directions", "check_length", "choose",
    "choose_best", "choose_from_race", "compile_payback", "complete_trials", "config_key", "constraint_values",
    "contrast", "could_separate", "diagnose", "dominates", "estimate_time_to_loss", "explain_choice", "fit",
    "goodput_attrs", "group_anatomy", "group_measurements", "half_width", "held_global_batch", "is_reference",
    "lighter", "loss_noise_floor", "measured_groups", "measured_margin", "median_anatomy", "memory_points",
    "metric_value", "noise_scale_attr", "noise_scale_of", "objective_values", "pareto_front", "pooled_sd",
    "reading_noise", "result_goodput", "running_value", "scale_plan", "scale_plans", "standing", "stored_anatomy",
    "study_diagnosis", "study_readings", "study_scale_plan", "time_to_loss_attrs", "window_extras", "window_history",
    "window_value",
]
