"""A scale's best per-rank batches, by predicted throughput, or by goodput once a gradient noise scale is known.

Statistical efficiency (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"): with the
gradient noise scale ``B_noise = tr(Sigma) / |G|^2`` (Sigma the per-sample gradient covariance, G the true
gradient), reaching a given loss at global batch ``B`` takes ``S_min (1 + B_noise / B)`` steps and
``E_min (1 + B / B_noise)`` samples. Each sample at ``B`` is therefore worth
``(B_noise + B0) / (B_noise + B)`` of one at the base batch ``B0``, and goodput (Pollux) is throughput times
that efficiency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from autotune.scale._model import Interval, ScaleError, ScaleModel

__all__ = ["BatchPlan", "Reach", "efficiency", "noise_scale", "plan_scale", "reach"]


def noise_scale(grad_sqr: float, grad_var: float, batch: int) -> float:
    """``B_noise`` in samples from a gradient's squared norm ``|G|^2`` and the variance ``grad_var`` of its
    estimate over micro-batches of ``batch`` samples (so ``tr(Sigma) = batch * grad_var``)."""
    if grad_sqr <= 0 or grad_var < 0 or batch < 1:
        raise ValueError(f"not gradient statistics: |G|^2 {grad_sqr}, variance {grad_var}, batch {batch}")
    return batch * grad_var / grad_sqr


def efficiency(global_batch: int, noise: float, base_batch: int) -> float:
    """The statistical efficiency of ``global_batch`` relative to ``base_batch`` (1 at the base batch, below 1
    above it) given the gradient noise scale ``noise`` in samples."""
    if global_batch < 1 or base_batch < 1 or noise < 0 or not math.isfinite(noise):
        raise ValueError(f"efficiency of batch {global_batch} (base {base_batch}) at noise scale {noise}")
    return (noise + base_batch) / (noise + global_batch)


@dataclass(frozen=True)
class Reach:
    """How far a prediction reaches past the readings: the scale asked and the largest measured."""

    nodes: int
    ranks: int
    measured_nodes: int
    measured_ranks: int

    @property
    def inside(self) -> bool:
        return self.nodes <= self.measured_nodes and self.ranks <= self.measured_ranks

    def describe(self) -> str:
        asked = f"{self.nodes} node(s), {self.ranks} rank(s)"
        measured = f"measured up to {self.measured_nodes} node(s), {self.measured_ranks} rank(s)"
        if self.inside:
            return f"{asked}: within the measured scales ({measured})"
        factors = []
        if self.ranks > self.measured_ranks:
            factors.append(f"{self.ranks / self.measured_ranks:.3g}x the ranks")
        if self.nodes > self.measured_nodes:
            factors.append(f"{self.nodes / self.measured_nodes:.3g}x the nodes")
        return f"{asked}: {' and '.join(factors)} measured ({measured})"


@dataclass(frozen=True)
class BatchPlan:
    """One way to run at a scale: the per-rank batch and accumulation, its predicted throughput (samples/s)
    and, with a noise scale, its statistical efficiency and goodput (samples/s at the base batch's worth)."""

    nodes: int
    ranks_per_node: int
    batch_size: int
    grad_accum: int
    throughput: Interval
    efficiency: float | None = None
    goodput: Interval | None = None

    @property
    def global_batch(self) -> int:
        return self.nodes * self.ranks_per_node * self.batch_size * self.grad_accum

    @property
    def score(self) -> float:
        return self.goodput.value if self.goodput is not None else self.throughput.value


def plan_scale(
    model: ScaleModel,
    nodes: int,
    ranks_per_node: int,
    batch_sizes: Iterable[int],
    grad_accums: Iterable[int] = (1,),
    *,
    noise: float | None = None,
    base_batch: int | None = None,
    global_batch: int | None = None,
) -> list[BatchPlan]:
    """Every (per-rank batch, grad_accum) candidate at ``nodes x ranks_per_node``, best first: by goodput
    when ``noise`` (and ``base_batch``) are given, else by throughput. With ``global_batch`` only the splits
    that keep it are candidates (any accumulation that makes it up from one of ``batch_sizes``)."""
    if nodes < 1 or ranks_per_node < 1:
        raise ScaleError(f"a scale needs at least 1 node and 1 rank per node (asked {nodes} x {ranks_per_node})")
    if noise is not None and base_batch is None:
        raise ScaleError("goodput needs the base batch the noise scale's efficiency is relative to")
    ranks = nodes * ranks_per_node
    batches = sorted(set(batch_sizes))
    if global_batch is not None:
        pairs = [(m, global_batch // (m * ranks)) for m in batches if global_batch % (m * ranks) == 0]
        if not pairs:
            raise ScaleError(
                f"no split of global batch {global_batch} over {ranks} ranks uses a measured per-rank "
                f"batch ({', '.join(map(str, batches))})"
            )
    else:
        pairs = [(m, a) for m in batches for a in sorted(set(grad_accums))]
    plans = []
    for m, a in pairs:
        speed = model.throughput(nodes, ranks, m, a)
        plan = BatchPlan(nodes, ranks_per_node, m, a, speed)
        if noise is not None and base_batch is not None:
            e = efficiency(plan.global_batch, noise, base_batch)
            plan = BatchPlan(nodes, ranks_per_node, m, a, speed, e, speed.scaled(e))
        plans.append(plan)
    return sorted(plans, key=lambda p: -p.score)


def reach(model: ScaleModel, nodes: int, ranks_per_node: int) -> Reach:
    """How far ``nodes x ranks_per_node`` is from the model's readings."""
    return Reach(nodes, nodes * ranks_per_node, model.measured_nodes(), model.measured_ranks())
