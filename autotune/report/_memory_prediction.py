"""Peak memory predicted before launch against the peak measured, and the configurations never launched."""

from __future__ import annotations

import statistics
from typing import NamedTuple

import optuna

from autotune.report._batch import memory_budget
from autotune.report._records import trial_records
from autotune.spec import StudySpec


class PredictedPoint(NamedTuple):
    """A launched trial with both numbers (MB): ``error_mb`` is the prediction's own error."""

    number: int
    predicted_mb: float
    error_mb: float
    measured_mb: float
    outcome: str
    batch_size: int | None


class NotLaunched(NamedTuple):
    number: int
    predicted_mb: float | None
    reason: str


class MemoryPredictionData(NamedTuple):
    """Every launched trial with a prediction and a measured peak, the trials not launched (predicted over
    ``budget``), and the median relative miss of the prediction (None without a point)."""

    points: list[PredictedPoint]
    not_launched: list[NotLaunched]
    budget: float | None
    median_error: float | None


def memory_prediction_data(study: optuna.Study, spec: StudySpec | None = None) -> MemoryPredictionData:
    """Predicted against measured peak memory per trial (docs/storage.md: ``predicted_memory_mb``)."""
    points, skipped = [], []
    for r in trial_records(study):
        if not r.launched:
            skipped.append(NotLaunched(r.number, r.predicted_memory_mb, r.reason))
        elif r.predicted_memory_mb is not None and r.peak_memory_mb is not None and r.peak_memory_mb > 0:
            batch = r.config.get("batch_size")
            points.append(PredictedPoint(
                r.number, r.predicted_memory_mb, r.predicted_memory_error_mb or 0.0, r.peak_memory_mb, r.outcome,
                batch if isinstance(batch, int) else None,
            ))
    # an oom trial's measured peak is where it was stopped, not its peak: no miss of the prediction
    misses = [abs(p.predicted_mb - p.measured_mb) / p.measured_mb for p in points if p.outcome != "oom"]
    return MemoryPredictionData(points, skipped, memory_budget(study, spec),
                                statistics.median(misses) if misses else None)
