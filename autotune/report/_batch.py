"""Throughput and peak memory against the global batch, per sharding, with the memory budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import optuna

from autotune.knobs import KNOBS
from autotune.report._records import finite_float, trial_records
from autotune.spec import StudySpec


class BatchPoint(NamedTuple):
    number: int
    batch_size: int
    value: float
    outcome: str
    feasible: bool | None
    role: str


class BatchSeries(NamedTuple):
    """Trials of one AMP mode and world size."""

    amp: str
    world_size: int
    points: list[BatchPoint]

    @property
    def label(self) -> str:
        return f"amp {self.amp}, {self.world_size} rank{'s' if self.world_size != 1 else ''}"


class BatchData(NamedTuple):
    metric: str
    series: list[BatchSeries]
    budget: float | None  # the memory budget (MB) for the memory view


def _batch_data(study: optuna.Study, metric: str, budget: float | None) -> BatchData:
    groups: dict[tuple[str, int], list[BatchPoint]] = {}
    for r in trial_records(study):
        value = r.metric(metric)
        batch = r.knob("batch_size")
        if value is None or not isinstance(batch, int):
            continue
        amp = str(r.knob("amp") or KNOBS["amp"].default)
        world = r.knob("world_size")
        world = world if isinstance(world, int) else KNOBS["world_size"].default
        groups.setdefault((amp, world), []).append(BatchPoint(r.number, batch, value, r.outcome, r.feasible, r.role))
    series = [BatchSeries(amp, world, points) for (amp, world), points in sorted(groups.items())]
    return BatchData(metric, series, budget)


def throughput_vs_batch_data(study: optuna.Study) -> BatchData:
    """Measured throughput against per-rank batch size, grouped by AMP mode and world size.

    Every trial that measured a throughput is included, pruned and infeasible ones with their partial
    numbers (their ``outcome`` says so).
    """
    return _batch_data(study, "throughput_samples_s", None)


def memory_budget(study: optuna.Study, spec: StudySpec | None = None) -> float | None:
    """``constraints.max_memory_mb``: from the spec, else from the study file stored in the study."""
    if spec is not None:
        return spec.constraints.max_memory_mb
    stored = study.user_attrs.get("autotune")
    if isinstance(stored, Mapping):
        constraints = (stored.get("spec") or {}).get("constraints") or {}
        return finite_float(constraints.get("max_memory_mb"))
    return None


def memory_vs_batch_data(study: optuna.Study, spec: StudySpec | None = None) -> BatchData:
    """Peak memory against per-rank batch size, grouped like throughput, with the memory budget."""
    return _batch_data(study, "peak_memory_mb", memory_budget(study, spec))
