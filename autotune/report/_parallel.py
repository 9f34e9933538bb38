"""The parallel-coordinates view: one axis per searched knob, one line per COMPLETE trial."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.report._records import METRIC_UNITS, metric_names, searched_knobs, trial_records, value_label


class ParallelAxis(NamedTuple):
    name: str
    categories: tuple[str, ...] | None  # categorical axis: labels bottom to top
    low: float  # numeric axis: the range shown (log10 of it when ``log``)
    high: float
    log: bool

    def position(self, value: Any) -> float | None:
        """Where a value sits on the axis, 0 (bottom) to 1 (top); None for a missing value."""
        if value is None:
            return None
        if self.categories is not None:
            label = value_label(value)
            if label not in self.categories:
                return None
            n = len(self.categories)
            return self.categories.index(label) / (n - 1) if n > 1 else 0.5
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        x = math.log10(value) if self.log else float(value)
        return (x - self.low) / (self.high - self.low) if self.high > self.low else 0.5


class ParallelLine(NamedTuple):
    number: int
    outcome: str
    raw: tuple[Any, ...]  # one value per axis
    positions: tuple[float | None, ...]
    color: float | None  # the first objective's measured metric


class ParallelData(NamedTuple):
    """Searched knobs and measured objective metrics of every trial that measured something."""

    axes: list[ParallelAxis]
    lines: list[ParallelLine]
    color_metric: str




def _axis(name: str, values: Sequence[Any], distribution: BaseDistribution | None = None) -> ParallelAxis:
    """An axis spanning the knob's search range (its Optuna distribution), else the values seen."""
    if isinstance(distribution, CategoricalDistribution):
        return ParallelAxis(name, tuple(value_label(c) for c in distribution.choices), 0.0, 1.0, False)
    if isinstance(distribution, (IntDistribution, FloatDistribution)):
        low, high = distribution.low, distribution.high
        seen = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        low, high = min([low, *seen]), max([high, *seen])  # a baseline may lie outside the range
        if distribution.log and low > 0:
            return ParallelAxis(name, None, math.log10(low), math.log10(high), True)
        return ParallelAxis(name, None, float(low), float(high), False)
    present = [v for v in values if v is not None]
    numeric = [v for v in present if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not present or len(numeric) != len(present):
        labels = sorted({value_label(v) for v in present})
        return ParallelAxis(name, tuple(labels), 0.0, 1.0, False)
    low, high = min(numeric), max(numeric)
    if low > 0 and high / low >= 16:
        return ParallelAxis(name, None, math.log10(low), math.log10(high), True)
    return ParallelAxis(name, None, float(low), float(high), False)


def parallel_data(study: optuna.Study) -> ParallelData:
    """One line per trial across the searched knobs and the objectives' measured metrics."""
    trials = study.get_trials(deepcopy=False)
    distributions: dict[str, BaseDistribution] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            distributions.setdefault(name, dist)
    all_records = trial_records(study)
    records = [r for r in all_records if any(r.metric(m) is not None for m in metric_names(study))]
    knobs = searched_knobs(all_records)
    metrics = [m for m in metric_names(study) if m in METRIC_UNITS]
    rows = [tuple([r.knob(k) for k in knobs] + [r.metric(m) for m in metrics]) for r in records]
    axes = [_axis(name, [row[i] for row in rows], distributions.get(name)) for i, name in enumerate(knobs)]
    axes += [_axis(name, [row[len(knobs) + i] for row in rows]) for i, name in enumerate(metrics)]
    color_metric = metrics[0] if metrics else ""
    lines = [
        ParallelLine(r.number, r.outcome, row, tuple(axis.position(v) for axis, v in zip(axes, row, strict=True)),
                     r.metric(color_metric) if color_metric else None)
        for r, row in zip(records, rows, strict=True)
    ]
    return ParallelData(axes, lines, color_metric)
