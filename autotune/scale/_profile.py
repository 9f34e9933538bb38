"""A cluster's network profile (:class:`SyncGrowth`) fitted from workloads measured on 3+ nodes there.

Each workload's readings on at most 2 nodes fit its own :class:`ScaleModel` (what a workload calibrated on
two nodes knows); its readings on 3+ nodes then tell by how much its sync across nodes grew past that, with
every other term held: its own ``step + per_doubling * log2(N / 2)``, a member of the profile. The profile is
the members' mean, each workload weighing the same however many readings it has (on the Pollux traces,
leave-one-workload-out, this mean predicted 4-16 nodes better than one fit over all workloads' readings or
the members' median: benchmarks/pollux_traces.py). Each member also brings the seconds its sync adds to a step
across 2 nodes (at its median per-rank batch), by which a model fitted with the profile weighs the members'
growth per doubling (:meth:`SyncGrowth.near`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotune.scale._form import exposed_sync_s, step_time
from autotune.scale._growth import SyncGrowth
from autotune.scale._model import ScaleError, ScaleModel, StepReading, median_batch

__all__ = ["fit_sync_growth"]


def fit_sync_growth(workloads: Sequence[Sequence[StepReading]]) -> SyncGrowth:
    """The network profile of the cluster the ``workloads`` (one sequence of readings each) were measured on.

    Each workload needs readings on 1-2 nodes that :meth:`ScaleModel.fit` accepts, some of them on 2 nodes,
    and readings on 3 or more nodes; otherwise :class:`ScaleError` names the workload and what it lacks."""
    if not workloads:
        raise ScaleError("a network profile needs the readings of one or more workloads measured on 3+ nodes")
    terms = [_workload_terms(i, readings) for i, readings in enumerate(workloads)]
    members = tuple(_fit_growth(params, columns, log_step) for params, columns, log_step, _ in terms)
    step, per_doubling = np.mean(members, axis=0)
    return SyncGrowth(float(step), float(per_doubling), members, tuple(sync_s for *_, sync_s in terms))


def _workload_terms(
    index: int, readings: Sequence[StepReading]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The workload's fitted parameters on 1-2 nodes, its placements on 3+ nodes (nodes, ranks, batch,
    accumulation: one row each), their log step times, and the seconds its sync adds at 2 nodes."""
    near = [r for r in readings if r.nodes <= 2]
    far = [r for r in readings if r.nodes > 2]
    if not far or not any(r.nodes == 2 for r in near):
        raise ScaleError(
            f"workload {index} of the network profile needs readings on 2 nodes and on 3+ nodes "
            f"(it has nodes {sorted({r.nodes for r in readings})})"
        )
    try:
        model = ScaleModel.fit(near, bootstrap=0)
    except ScaleError as error:
        raise ScaleError(f"workload {index} of the network profile, on 1-2 nodes: {error}") from None
    columns = np.array([[r.nodes, r.ranks, r.batch_size, r.grad_accum] for r in far], dtype=float).T
    params = model.params.as_array()
    return params, columns, np.log([r.step_s for r in far]), exposed_sync_s(params, median_batch(near))


def _fit_growth(params: np.ndarray, columns: np.ndarray, log_step: np.ndarray) -> tuple[float, float]:
    """The (step, per_doubling) that fit a workload's 3+-node step times, every other term held at its fit on
    1-2 nodes; the growth per doubling is held at 0 when the readings hold one node count past 2."""
    free_doubling = len(set(columns[0])) >= 2

    def residuals(x: np.ndarray) -> np.ndarray:
        growth = SyncGrowth(float(x[0]), float(x[1]) if free_doubling else 0.0)
        nodes, ranks, batch, accum = columns
        return np.log(np.maximum(step_time(params, nodes, ranks, batch, accum, growth.factor(nodes)), 1e-12)) - log_step

    from scipy.optimize import least_squares  # here, not at import (as in _model)

    x0 = np.array([1.0, 0.0]) if free_doubling else np.array([1.0])
    lower = [1e-3, -np.inf] if free_doubling else [1e-3]
    result = least_squares(residuals, x0, bounds=(lower, np.inf), method="trf", x_scale="jac")
    return float(result.x[0]), float(result.x[1]) if free_doubling else 0.0
