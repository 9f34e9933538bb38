"""How a parallel mesh divides one rank's memory, for the memory prediction (``_memory_model.py``).

A rank of a mesh ``pp x dp x tp`` holds:

- **training state** (parameters, gradients, optimizer state): its tensor-parallel shard (``1 / tp``) of its
  pipeline stage's layers (``1 / pp``), and under FSDP its data-parallel shard of that (``1 / dp``);
- **activations**: of its stage's layers (``1 / pp``), split by tensor parallelism (``1 / tp``), for the
  micro-batches in flight, each ``batch_size / pipeline_microbatches`` samples: GPipe runs every micro-batch's
  forward before any backward (all of them: the whole ``batch_size``), 1F1B keeps at most ``pp`` in flight
  (``min(pp, m) / m`` of the batch; interleaved 1F1B the same).

So a configuration's peak is about ``base + state x static_share + per_sample x activation_samples``, where the
shares come from the knobs alone (:func:`mesh_shares`) and ``base`` (the process, the library, the collectives'
buffers), ``state`` and ``per_sample`` are the model's. FSDP adds a term of its own: its gathered blocks and
copy buffers (and, on the CPU, an allocator that keeps what they freed) cost more than its shards save on a
small model: measured on the built-in transformer at 4 ranks (dim 512, 200 MB of training state, gloo), every
FSDP mesh peaked above the same mesh under ddp (658 against 619 MB replicated, 560 against 423 MB on 2 stages).
:class:`MeshFit` learns the four from the trials of any meshes and predicts a mesh never measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_POINTS = 3  # measurements a mesh fit needs (three coefficients, non-negative)
FIT_FLOOR = 0.05  # the least relative error of a prediction for a mesh never measured
FEW_ERROR = 0.25  # the error of a fit whose leave-one-out miss could not be read (too few points)


def degrees(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(pp, dp, tp)`` of a configuration (a config from before the mesh: ``(1, world_size, 1)``)."""
    tp = int(config.get("tensor_parallel") or 1)
    pp = int(config.get("pipeline_parallel") or 1)
    world = int(config.get("world_size") or 1)
    return pp, max(1, world // (tp * pp)), tp


def on_mesh(config: Mapping[str, Any]) -> bool:
    """Whether a configuration is tensor- or pipeline-parallel."""
    pp, _, tp = degrees(config)
    return tp > 1 or pp > 1


def mesh_shares(config: Mapping[str, Any]) -> tuple[float, float]:
    """``(static_share, activation_samples)``: the share of the model's training state one rank holds, and the
    samples' worth of the whole model's activations it holds at its peak (see the module's docstring)."""
    pp, dp, tp = degrees(config)
    sharded = str(config.get("sharding", "ddp")) != "ddp"
    static = 1.0 / (tp * pp * (dp if sharded else 1))
    batch = float(config.get("batch_size", 1))
    if pp > 1:
        micro = max(1, int(config.get("pipeline_microbatches") or 1))
        schedule = str(config.get("pipeline_schedule") or "1f1b")
        in_flight = micro if schedule == "gpipe" else min(pp, micro)
        batch = batch * in_flight / micro
    return static, batch / (tp * pp)


def group_of(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """The knobs a mesh fit holds fixed (amp, activation checkpointing, the CPU's DataLoader workers): the
    mesh, the sharding and the batch vary within it."""
    workers = int(config.get("num_workers") or 0) if config.get("device", "cpu") == "cpu" else 0
    return str(config.get("amp", "off")), bool(config.get("activation_checkpointing", False)), workers


@dataclass(frozen=True)
class MeshFit:
    """``peak = base + state x static_share + per_sample x activation_samples + fsdp x sharded`` (non-negative
    coefficients) over one group's measurements, with its relative error (the worst leave-one-out miss, at least
    :data:`FIT_FLOOR`)."""

    coef: tuple[float, ...]
    error: float
    n: int

    @classmethod
    def fit(cls, points: Sequence[tuple[Mapping[str, Any], float]], state_mb: float | None) -> MeshFit | None:
        """The fit of ``(config, peak)`` points, None with fewer than :data:`MIN_POINTS` or too few distinct
        meshes and batches to tell the terms apart. ``state_mb``: the model's whole training state (MB), where
        known, to fall back on when the measurements cannot tell it."""
        rows = [(features(c), y) for c, y in points]
        if len(rows) < MIN_POINTS or len({r for r, _ in rows}) < 2:
            return None
        coef = _nnls(rows, state_mb)
        misses = []
        if len(rows) >= MIN_POINTS + 1:
            for i in range(len(rows)):
                rest = rows[:i] + rows[i + 1:]
                if len({r for r, _ in rest}) < 2:
                    continue
                c = _nnls(rest, state_mb)
                f, y = rows[i]
                misses.append(abs(c[0] + sum(k * v for k, v in zip(c[1:], f, strict=True)) - y) / y)
        error = max(FIT_FLOOR, float(np.median(misses)) * 2) if len(misses) >= 3 else FEW_ERROR
        return cls(coef, error, len(rows))

    def predict(self, config: Mapping[str, Any]) -> float:
        return self.coef[0] + sum(k * v for k, v in zip(self.coef[1:], features(config), strict=True))


def features(config: Mapping[str, Any]) -> tuple[float, float, float]:
    """A fit's features: the state's share, the activation samples, and FSDP (its gathered blocks and buffers)."""
    static, act = mesh_shares(config)
    return static, act, float(str(config.get("sharding", "ddp")) != "ddp")


def _nnls(rows: Sequence[tuple[tuple[float, ...], float]], state_mb: float | None) -> tuple[float, ...]:
    """Least squares of ``[1, static, act, fsdp] -> peak``, coefficients >= 0 (the active sets tried in turn);
    where the static share does not vary, the state is the model's ``state_mb`` (or 0); a feature that does not
    vary is left out (0)."""
    import itertools

    x = np.array([[1.0, *f] for f, _ in rows])
    y = np.array([p for _, p in rows])
    k = x.shape[1]
    fixed_state = len({f[0] for f, _ in rows}) < 2
    varying = [j for j in range(1, k) if len({row[j] for row in x}) > 1]
    best: tuple[float, tuple[float, ...]] | None = None
    for size in range(len(varying), -1, -1):
        for subset in itertools.combinations(varying, size):
            keep = (0, *subset)
            if fixed_state and 1 in keep:
                continue
            base = x[:, 1] * (state_mb or 0.0) if fixed_state else 0.0
            sol, *_ = np.linalg.lstsq(x[:, keep], y - base, rcond=None)
            if any(v < 0 for v in sol[1:]):
                continue
            full = [0.0] * k
            if fixed_state:
                full[1] = state_mb or 0.0
            for j, v in zip(keep, sol, strict=True):
                full[j] = float(v)
            residual = float(np.sum((x @ np.array(full) - y) ** 2))
            if best is None or residual < best[0] - 1e-9 * max(1.0, math.fabs(best[0])):
                best = (residual, tuple(full))
    assert best is not None  # the intercept alone always solves
    return best[1]


def mesh_floors(config: Mapping[str, Any], bounds: Sequence[tuple[Mapping[str, Any], float]]) -> list[float]:
    """The peaks of out-of-memory trials (``bounds``: their configs and peaks, of other settings) on another mesh
    (a tensor- or pipeline-parallel one on either side) whose ranks held no more of the training state and no
    more activation samples than ``config``'s would: each a floor of its peak."""
    static, act = mesh_shares(config)
    return [
        peak for c, peak in bounds
        if group_of(c) == group_of(config) and (on_mesh(c) or on_mesh(config))
        and mesh_shares(c)[0] <= static and mesh_shares(c)[1] <= act
    ]


def mesh_lower_bound(
    config: Mapping[str, Any], group: Sequence[tuple[Mapping[str, Any], float]], state_mb: float | None,
) -> float | None:
    """Too few trials for a :class:`MeshFit`, but the model's training state known (MB): a trial of the group on a
    mesh of no fewer ranks (whose processes share no more of the library's pages) with no more activation
    samples than ``config`` bounds it from below by its peak plus the state ``config``'s ranks would hold beyond
    its own. None without such a trial."""
    if state_mb is None:
        return None
    static, act = mesh_shares(config)
    world = int(config.get("world_size") or 1)
    bounds = [
        peak + state_mb * (static - mesh_shares(c)[0]) for c, peak in group
        if mesh_shares(c)[1] <= act and int(c.get("world_size") or 1) >= world
    ]
    return max(bounds) if bounds and max(bounds) > 0 else None
