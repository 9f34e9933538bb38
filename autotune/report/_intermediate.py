"""The intermediate values: each trial's reported throughput window by window."""

from __future__ import annotations

from typing import Literal, NamedTuple

import optuna

from autotune.report._records import metric_names, trial_records


class Curve(NamedTuple):
    number: int
    outcome: str
    reason: str
    points: tuple[tuple[int, float], ...]  # (step, value)


class IntermediateData(NamedTuple):
    """What the pruner saw per trial: Optuna intermediate values, else the stored reporting windows."""

    metric: str
    source: Literal["intermediate values", "windows"]
    curves: list[Curve]


def intermediate_data(study: optuna.Study) -> IntermediateData:
    """Per-trial curves. Single-objective studies report intermediate values; multi-objective ones do
    not (Optuna's pruners cannot use them), so their windows' throughput is shown instead."""
    records = trial_records(study)
    if any(r.intermediate for r in records):
        curves = [Curve(r.number, r.outcome, r.reason, r.intermediate) for r in records if r.intermediate]
        return IntermediateData(metric_names(study)[0], "intermediate values", curves)
    curves = [
        Curve(r.number, r.outcome, r.reason,
              tuple((w.step, w.throughput_samples_s) for w in r.windows if w.throughput_samples_s is not None))
        for r in records
        if r.windows
    ]
    return IntermediateData("throughput_samples_s", "windows", [c for c in curves if c.points])
