"""Step time over scale: fitted from measured (nodes, ranks, per-rank batch, grad_accum, step time) readings.

The form is Pollux's (Qiao et al., OSDI 2021). One micro-batch of ``m`` samples computes in
``T_grad = alpha_grad + beta_grad * m``; the gradient all-reduce of ``K`` ranks takes ``T_sync = 0`` on one
rank, ``alpha_local + beta_local * (K - 2)`` within one node, ``alpha_node + beta_node * (N - 2)`` across
``N`` nodes; the last micro-batch's backward overlaps the sync to a degree ``gamma`` (1: none, 10: nearly all),
and the ``grad_accum - 1`` micro-batches before it do not sync::

    T_step = (grad_accum - 1) * T_grad + (T_grad ** gamma + T_sync ** gamma) ** (1 / gamma)

The sync across nodes grows with the nodes, not with the ranks as Pollux has it: a ring all-reduce moves
``2 (K - 1) / K`` of the gradient through each node's network link, nearly the same for any ``K``, and on
the Pollux traces a per-rank growth fitted on two nodes put the 4-16-node step times 41-101% too slow
(benchmarks/pollux_traces.py).

The fit minimises the squared log error of the step time (every reading weighs by its relative error).
A term the readings cannot inform is not guessed: without single-node multi-rank readings the local
sync is unknown, without multi-node readings the node sync is; a prediction that needs an unknown term
raises :class:`ScaleError` naming the readings it needs. Without readings of more than two ranks on one
node, or on more than two nodes, that growth is held at 0 (the optimistic choice, stated by
:meth:`ScaleModel.assumptions`). A cluster's network profile (:class:`SyncGrowth`, optional) multiplies the
sync across ``N`` nodes by its ratio ``factor(N)`` (1 at 1-2 nodes): how the sync grows past two nodes,
learned from other workloads on the cluster, its growth weighed toward those whose sync adds about as many
seconds at 2 nodes as this workload's own (:meth:`SyncGrowth.near`); without one every term is as above.

Intervals come from a bootstrap: the readings are resampled with replacement and refitted, and each
refit's prediction is multiplied by a resampled residual of the original fit, so an interval covers both
the parameters' uncertainty and one reading's noise; never narrower than +-2% (:data:`NOISE_FLOOR`), which
readings that happen to fit exactly would otherwise claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.scale._form import exposed_sync_s, step_time
from autotune.scale._growth import SyncGrowth

__all__ = ["Interval", "ScaleError", "ScaleModel", "ScaleParams", "StepReading"]

GAMMA_MAX = 10.0  # an overlap of 10 is as good as max(T_grad, T_sync)
BOOTSTRAP = 100  # refits behind an interval
LEVEL = 0.9  # the interval's coverage: 5th to 95th percentile
NOISE_FLOOR = 0.02  # no interval narrower than +-2%: readings that fit exactly still carry a machine's noise


class ScaleError(ValueError):
    """The readings cannot inform what was asked: too few distinct scales, or a term never measured."""


@dataclass(frozen=True)
class StepReading:
    """One measured configuration: ``ranks`` in all over ``nodes``, ``batch_size`` samples per rank per
    micro-batch, ``grad_accum`` micro-batches per optimizer step, ``step_s`` seconds per optimizer step."""

    nodes: int
    ranks: int
    batch_size: int
    grad_accum: int
    step_s: float

    @property
    def throughput_samples_s(self) -> float:
        return self.ranks * self.batch_size * self.grad_accum / self.step_s


@dataclass(frozen=True)
class ScaleParams:
    """The fitted terms (seconds; ``gamma`` unitless), as the module docstring defines them."""

    alpha_grad: float
    beta_grad: float
    alpha_local: float
    beta_local: float
    alpha_node: float
    beta_node: float
    gamma: float

    def as_array(self) -> np.ndarray:
        return np.array(
            [
                self.alpha_grad,
                self.beta_grad,
                self.alpha_local,
                self.beta_local,
                self.alpha_node,
                self.beta_node,
                self.gamma,
            ]
        )


@dataclass(frozen=True)
class Interval:
    """A prediction and its interval (``low``..``high`` at the model's :data:`LEVEL`)."""

    value: float
    low: float
    high: float

    def scaled(self, factor: float) -> Interval:
        return Interval(self.value * factor, self.low * factor, self.high * factor)


@dataclass(frozen=True)
class _Columns:
    nodes: np.ndarray
    ranks: np.ndarray
    batch: np.ndarray
    accum: np.ndarray
    step: np.ndarray
    growth: np.ndarray  # the profile's factor at each reading's nodes (1 without a profile)

    @classmethod
    def of(cls, readings: Sequence[StepReading], profile: SyncGrowth | None = None) -> _Columns:
        def col(name: str) -> np.ndarray:
            return np.array([float(getattr(r, name)) for r in readings])

        nodes = col("nodes")
        growth = np.ones_like(nodes) if profile is None else profile.factor(nodes)
        return cls(nodes, col("ranks"), col("batch_size"), col("grad_accum"), col("step_s"), growth)

    def take(self, index: np.ndarray) -> _Columns:
        return _Columns(
            self.nodes[index],
            self.ranks[index],
            self.batch[index],
            self.accum[index],
            self.step[index],
            self.growth[index],
        )


def _free(cols: _Columns) -> np.ndarray:
    """Which of the seven terms the readings inform (the others are held at 0)."""
    local = (cols.nodes == 1) & (cols.ranks > 1)
    node = cols.nodes > 1
    return np.array(
        [
            True,
            True,
            bool(local.any()),
            bool((local & (cols.ranks > 2)).any()),
            bool(node.any()),
            bool((cols.nodes > 2).any()),
            bool((cols.ranks > 1).any()),
        ]
    )


def _fit(cols: _Columns, free: np.ndarray, refit: np.ndarray | None = None) -> np.ndarray:
    """Least squares on log step time over the free terms, from a start derived from the readings (or, for a
    bootstrap refit, from the first fit ``refit``)."""
    start = _start(cols) if refit is None else refit
    lower = np.array([0.0] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [GAMMA_MAX])
    fixed = start.copy()
    fixed[~free] = np.where(np.arange(7)[~free] == 6, 1.0, 0.0)
    log_step = np.log(cols.step)

    def residuals(x: np.ndarray) -> np.ndarray:
        p = fixed.copy()
        p[free] = x
        fitted = step_time(p, cols.nodes, cols.ranks, cols.batch, cols.accum, cols.growth)
        return np.log(np.maximum(fitted, 1e-12)) - log_step

    from scipy.optimize import least_squares  # here, not at import: every rank and CLI start imports this module

    best: np.ndarray | None = None
    best_cost = math.inf
    # the overlap's fit has local minima: a first fit starts from three degrees of it, a refit from the fit
    for gamma in (1.0, 2.0, 5.0) if refit is None else (float(refit[6]),):
        x0 = fixed.copy()
        x0[6] = gamma if free[6] else 1.0
        x0 = np.clip(x0, lower + 1e-12, upper - 1e-9)[free]
        result = least_squares(residuals, x0, bounds=(lower[free], upper[free]), method="trf", x_scale="jac")
        if result.cost < best_cost:
            best_cost, best = result.cost, result.x
    p = fixed.copy()
    assert best is not None
    p[free] = best
    return p


def _start(cols: _Columns) -> np.ndarray:
    """A starting point: the compute line from one-rank readings (or all), the sync from the rest."""
    one = cols.ranks == 1
    pick = one if one.sum() >= 2 and len(set(cols.batch[one])) >= 2 else np.ones_like(one)
    per_micro = cols.step[pick] / cols.accum[pick]
    if len(set(cols.batch[pick])) >= 2:
        beta, alpha = np.polyfit(cols.batch[pick], per_micro, 1)
    else:
        beta, alpha = float(np.mean(per_micro / cols.batch[pick])) / 2, float(np.mean(per_micro)) / 2
    beta, alpha = max(float(beta), 1e-9), max(float(alpha), 1e-9)
    sync = max(float(np.median(cols.step)) * 0.1, 1e-9)
    return np.array([alpha, beta, sync, sync / 10, sync, sync / 10, 1.0])


@dataclass
class ScaleModel:
    """The step-time model fitted to ``readings``; :meth:`fit` builds it."""

    readings: tuple[StepReading, ...]
    params: ScaleParams
    free: tuple[bool, ...]
    residuals: np.ndarray = field(repr=False)  # log(measured / fitted) of each reading
    boot: np.ndarray = field(repr=False)  # one refitted parameter vector a row
    growth: SyncGrowth | None = None  # the cluster's network profile, when one was given

    @classmethod
    def fit(
        cls,
        readings: Sequence[StepReading],
        *,
        bootstrap: int = BOOTSTRAP,
        seed: int = 0,
        growth: SyncGrowth | None = None,
    ) -> ScaleModel:
        """Fit the readings; raises :class:`ScaleError` when they hold fewer than two per-rank batch sizes or
        fewer than two rank counts (the compute line and the sync cannot be told apart without both). With
        ``growth`` (a cluster's network profile) the sync across nodes grows by its factor."""
        readings = tuple(readings)
        bad = [r for r in readings if not (r.step_s > 0 and r.ranks >= r.nodes >= 1 and r.batch_size >= 1)]
        if bad:
            raise ScaleError(f"a reading is not a measurement: {bad[0]}")
        check_enough(readings)
        cols = _Columns.of(readings, growth)
        free = _free(cols)
        p = _fit(cols, free)
        if growth is not None and growth.member_sync_s and free[4]:
            # the profile weighed by this workload's own sync at 2 nodes (its factor is 1 there, so p holds)
            growth = growth.near(exposed_sync_s(p, median_batch(readings)))
            if cols.nodes.max() > 2:
                cols = _Columns.of(readings, growth)
                p = _fit(cols, free)
        fitted = step_time(p, cols.nodes, cols.ranks, cols.batch, cols.accum, cols.growth)
        residuals = np.log(cols.step) - np.log(fitted)
        rng = np.random.default_rng(seed)
        boot = []
        for _ in range(bootstrap):
            index = rng.integers(0, len(readings), len(readings))
            sample = cols.take(index)
            boot.append(_fit(sample, free & _free(sample), refit=p))
        params = ScaleParams(*(float(v) for v in p))
        boots = np.array(boot).reshape(-1, 7)
        return cls(readings, params, tuple(bool(f) for f in free), residuals, boots, growth)

    # -- what it knows -------------------------------------------------------------------------------------

    def measured_nodes(self) -> int:
        return max(r.nodes for r in self.readings)

    def measured_ranks(self) -> int:
        return max(r.ranks for r in self.readings)

    def needs(self, nodes: int, ranks: int) -> str | None:
        """None when the model can predict ``ranks`` over ``nodes``; else what readings it lacks."""
        if ranks > 1 and nodes == 1 and not self.free[2]:
            return "readings of more than one rank on one node (world_size 2 or more on a single node)"
        if nodes > 1 and not self.free[4]:
            return (
                f"readings on more than one node to predict {nodes} nodes (trials on 2 or more nodes: "
                "launcher.kind slurm with launcher.nodes 2 or more)"
            )
        return None

    def assumptions(self) -> list[str]:
        """The terms held at 0 for want of readings, in words."""
        notes = []
        if self.free[2] and not self.free[3]:
            notes.append("the sync within a node does not grow past 2 ranks (no single-node readings of 3+ ranks)")
        if self.growth is not None:
            notes.append(self.growth.describe())
        elif self.free[4] and not self.free[5]:
            notes.append("the sync across nodes does not grow past 2 nodes (no readings on 3+ nodes)")
        return notes

    # -- predictions ---------------------------------------------------------------------------------------

    def step_s(self, nodes: int, ranks: int, batch_size: int, grad_accum: int = 1) -> Interval:
        """The predicted seconds per optimizer step, with its interval."""
        if ranks < nodes or nodes < 1 or batch_size < 1 or grad_accum < 1:
            raise ScaleError(f"not a placement: {ranks} ranks on {nodes} nodes, batch {batch_size} x {grad_accum}")
        if (lack := self.needs(nodes, ranks)) is not None:
            raise ScaleError(f"the model needs {lack}")
        n, k, b, a = (np.array([float(v)]) for v in (nodes, ranks, batch_size, grad_accum))
        factor = 1.0 if self.growth is None else float(self.growth.factor(nodes))
        value = float(step_time(self.params.as_array(), n, k, b, a, factor)[0])
        if not len(self.boot):
            return Interval(value, value * (1 - NOISE_FLOOR), value * (1 + NOISE_FLOOR))
        at = step_time(self.boot.T, n, k, b, a, self._boot_factors(nodes, len(self.boot)))  # (7, refits) broadcasts
        noise = np.exp(np.resize(self.residuals, len(at)))  # one residual per refit, cycled over the residuals
        rng = np.random.default_rng(len(at))
        spread = at * rng.permutation(noise)
        tail = (1 - LEVEL) / 2 * 100
        low, high = np.percentile(spread, [tail, 100 - tail])
        low, high = min(low, value * (1 - NOISE_FLOOR)), max(high, value * (1 + NOISE_FLOOR))
        return Interval(value, float(low), float(high))

    def _boot_factors(self, nodes: int, refits: int) -> np.ndarray | float:
        """The profile's factor for each refit: its members' in turn (a profile fitted on several workloads
        carries their spread into the interval), else its own, else 1."""
        if self.growth is None:
            return 1.0
        members = self.growth.member_factors(nodes)
        return np.resize(members, refits) if len(members) else float(self.growth.factor(nodes))

    def throughput(self, nodes: int, ranks: int, batch_size: int, grad_accum: int = 1) -> Interval:
        """Predicted samples/s (global batch over step time); its low end from the step time's high end."""
        step = self.step_s(nodes, ranks, batch_size, grad_accum)
        samples = ranks * batch_size * grad_accum
        return Interval(samples / step.value, samples / step.high, samples / step.low)


def check_enough(readings: Sequence[StepReading]) -> None:
    """Raise :class:`ScaleError` unless the readings hold two or more per-rank batch sizes and two or more
    rank counts: what the model needs to tell compute from sync."""
    batches = sorted({r.batch_size for r in readings})
    ranks = sorted({r.ranks for r in readings})
    lacking = []
    if len(batches) < 2:
        lacking.append(f"2 or more per-rank batch sizes (measured: {_listed(batches)})")
    if len(ranks) < 2:
        lacking.append(f"2 or more world sizes (measured: {_listed(ranks)})")
    if lacking:
        raise ScaleError(f"the throughput model needs completed trials at {' and '.join(lacking)}")


def median_batch(readings: Sequence[StepReading]) -> float:
    """The readings' median per-rank batch (the batch a profile's :meth:`SyncGrowth.near` is weighed at)."""
    return float(np.median([r.batch_size for r in readings]))


def _listed(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none"
