"""What a trial's measurements are worth: objective values, intermediate values and constraints."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.objectives._goodput import RunningGoodput, result_goodput
from autotune.objectives._time_to_loss import RunningTimeToLoss, result_time_to_loss
from autotune.spec import ObjectiveSpec
from autotune.trial_result import Outcome, TrialResult, Window

#: The constraint names set on every COMPLETE trial (``Trial.set_constraint``; feasible when <= 0).
CONSTRAINT_NAMES = ("memory", "diverged")


def metric_value(result: TrialResult, objective: ObjectiveSpec, study_noise: float | None = None) -> float | None:
    """The value of ``objective`` for a trial: its ``throughput_samples_s``, ``peak_memory_mb`` or ``loss``.

    None when the metric was not measured (the trial ended before its first window) or is not a finite
    number, which Optuna would refuse as an objective value. Goodput takes ``study_noise``, the study's
    noise scale, for a trial that measured none (_goodput.py).
    """
    if objective.metric == "time_to_loss":  # from the loss curve and the throughput (_time_to_loss.py)
        estimate = result_time_to_loss(result, float(objective.target or 0.0))
        value = estimate.seconds if estimate is not None else None
    elif objective.metric == "goodput":
        scored = result_goodput(result, study_noise)
        value = scored.value if scored is not None else None
    else:
        value = result.metrics()[objective.key]
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def objective_values(
    result: TrialResult, objectives: Sequence[ObjectiveSpec], study_noise: float | None = None
) -> list[float] | None:
    """The values of all ``objectives``, in order, or None when any of them is missing."""
    values = []
    for objective in objectives:
        value = metric_value(result, objective, study_noise)
        if value is None:
            return None
        values.append(value)
    return values


def window_value(window: Window, objective: ObjectiveSpec) -> float:
    """The intermediate value reported to Optuna for one window.

    throughput: the trial's throughput so far (``throughput_samples_s``, all measured steps, not the
    window's own); peak memory: the peak so far; loss: the window's loss; goodput: the throughput so far (the
    efficiency needs the trial's batches: :func:`running_value`).
    """
    if objective.metric in ("throughput", "goodput"):
        return window.throughput_samples_s
    if objective.metric == "peak_memory_mb":
        return window.peak_memory_mb
    return window.loss


def running_value(
    objective: ObjectiveSpec, warmup_steps: int | None = None, *, config: Mapping[str, Any] | None = None,
    study_noise: float | None = None,
) -> Callable[[Window], float]:
    """The per-window intermediate value of ``objective``, stateful for time_to_loss (the estimate from the
    windows so far) and goodput (the trial's ``config``: its global and base batch; the noise scale so far)."""
    if objective.metric == "time_to_loss":
        return RunningTimeToLoss(float(objective.target or 0.0), warmup_steps)
    if objective.metric == "goodput":
        return RunningGoodput(config, study_noise)
    return lambda window: window_value(window, objective)


def window_history(windows: Sequence[Window], objectives: Sequence[ObjectiveSpec]) -> list[tuple[int, list[float]]]:
    """A trial's ``(step, values)`` per window, the history :class:`autotune.pruners.DominancePruner` compares at
    a step."""
    return [(w.step, [window_value(w, o) for o in objectives]) for w in windows]


def constraint_values(result: TrialResult, max_memory_mb: float | None) -> dict[str, float]:
    """The constraints of a trial, by name (feasible when <= 0), as docs/storage.md defines them.

    ``memory``: with a budget and a known peak, ``peak_memory_mb - max_memory_mb``; otherwise +1 for an
    oom trial and -1 for any other. An oom trial is always infeasible: if its known peak is within the
    budget (a device that ran out below the budget) the value is +1. ``diverged``: 1 when the loss became
    NaN/inf (outcome ``diverged``), else 0.
    """
    oom = result.outcome is Outcome.OOM
    peak = result.peak_memory_mb
    if max_memory_mb is not None and peak is not None and math.isfinite(peak):
        memory = peak - max_memory_mb
        if oom and memory <= 0:
            memory = 1.0
    else:
        memory = 1.0 if oom else -1.0
    return {"memory": float(memory), "diverged": 1.0 if result.outcome is Outcome.DIVERGED else 0.0}
