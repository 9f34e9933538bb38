"""The report's "throughput over scale" view: the study's best predicted throughput at more ranks per node
than it measured (``autotune plan`` at each scale), with its interval, beside the best it measured."""

from __future__ import annotations

from typing import NamedTuple

import optuna

from autotune.objectives import measured_groups, scale_plans
from autotune.scale import ScaleError
from autotune.spec import StudySpec

__all__ = ["ScaleData", "ScalePoint", "scale_data"]

BOOTSTRAP = 30  # fewer refits than `autotune plan`: a view, and a study of hundreds of trials
REACH = 4  # predict up to 4x the largest measured ranks per node


class ScalePoint(NamedTuple):
    """The best option at ``world_size`` ranks (``nodes`` x ranks per node): predicted samples/s and interval."""

    world_size: int
    value: float
    low: float
    high: float
    batch_size: int
    grad_accum: int
    config: str


class ScaleData(NamedTuple):
    nodes: int
    predicted: list[ScalePoint]
    measured: list[tuple[int, float]]  # (world size, the best measured samples/s there)
    note: str | None  # why nothing is predicted, or what the fit assumed


def _per_node_sizes(largest: int) -> list[int]:
    sizes, k = [], 1
    while k <= REACH * largest:
        sizes.append(k)
        k *= 2
    return sorted({*sizes, largest})


def scale_data(study: optuna.Study, spec: StudySpec | None = None) -> ScaleData:
    """The view's data; ``spec`` says the nodes a trial ran on (else 1)."""
    nodes = spec.launcher.nodes if spec is not None else 1
    best: dict[int, float] = {}
    for g in measured_groups(study, "throughput_samples_s"):
        size = int(g.config["world_size"])
        best[size] = max(best.get(size, 0.0), g.median)
    measured = sorted(best.items())
    if not measured:
        return ScaleData(nodes, [], [], "no trial has completed with a throughput yet")
    points: list[ScalePoint] = []
    notes: set[str] = set()
    sizes = _per_node_sizes(max(max(best) // nodes, 1))
    try:
        plans = scale_plans(study, nodes=nodes, ranks_per_node=sizes, nodes_per_trial=nodes, top=1, bootstrap=BOOTSTRAP)
    except ScaleError as e:
        return ScaleData(nodes, [], measured, str(e))
    for plan in plans:
        option = plan.options[0]
        t = option.plan.throughput
        points.append(
            ScalePoint(
                plan.ranks,
                t.value,
                t.low,
                t.high,
                option.plan.batch_size,
                option.plan.grad_accum,
                option.config.short(),
            )
        )
        notes.update(option.assumptions)
    return ScaleData(nodes, points, measured, "; ".join(sorted(notes)) or None)
