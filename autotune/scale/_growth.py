"""A cluster's network profile: how the gradient sync across nodes grows past two nodes, as a ratio.

A workload calibrated on one or two nodes cannot show how its sync grows on more; the cluster can, from
other workloads' readings on 3+ nodes (:func:`autotune.scale.fit_sync_growth`) or from numbers an all-reduce
benchmark gave (nccl-tests' time at N nodes over its time at 2, at a message of the gradient's size). At
``N > 2`` nodes the sync across nodes is ``factor(N)`` times what the workload's own readings put at 2 nodes::

    factor(N) = step + per_doubling * log2(N / 2)        (1 at 1 or 2 nodes)

A ratio, not seconds: a ring all-reduce moves ``2 (K - 1) / K`` of the gradient through each link and its
latency grows with the hops, so the seconds scale with each workload's gradient size while the ratio to the
same workload's 2-node sync carries over. ``step`` is the change on leaving two nodes (on the Pollux traces'
cluster the sync on 4 nodes is 8-28% below the 2-node sync, by workload), ``per_doubling`` the growth per
doubling of the nodes (the latency of a tree, and of a ring's extra hops). The fitted profile keeps each workload's own
``factor`` too (``members``): their spread is the profile's uncertainty, which a model's interval carries.

How fast the ratio grows depends on what dominates the sync. A large gradient's all-reduce is bound by bandwidth,
which a ring holds nearly flat over the nodes; a small one's by latency, which grows with every hop. On the
Pollux traces the growth per doubling falls from 0.19-0.27 for the jobs whose sync adds 0.02-0.15 s to a step
across 2 nodes to 0.07-0.10 for those where it adds 0.28-1.39 s. So a fitted profile also keeps what each
member's sync adds at 2 nodes (``member_sync_s``), and :meth:`SyncGrowth.near` takes the growth per doubling
from the members nearest a workload's own sync: each weighs ``exp(-(ln(s_i / s))**2 / 2)`` (a factor of e
in seconds apart weighs 0.61, a factor of 7.4 weighs 0.14). ``step`` stays the members' mean: it follows no
such pattern there (0.56-0.85).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["SyncGrowth"]

FLOOR = 0.05  # a factor never below 1/20 of the 2-node sync, however the numbers extrapolate
TINY_S = 1e-6  # near(): a sync the overlap hides entirely counts as this many seconds


@dataclass(frozen=True)
class SyncGrowth:
    """The sync across ``N > 2`` nodes as ``step + per_doubling * log2(N / 2)`` times the 2-node sync (module
    docstring); ``members`` are the (step, per_doubling) of each workload it was fitted from (empty when
    given as numbers), ``member_sync_s`` the seconds each one's sync adds to a step across 2 nodes, and
    ``sync_s`` the workload's own, once :meth:`near` has weighed the members by it (``width`` apart in
    natural log of the seconds)."""

    step: float
    per_doubling: float
    members: tuple[tuple[float, float], ...] = ()
    member_sync_s: tuple[float, ...] = ()
    sync_s: float | None = None
    width: float = 1.0  # near(): the weights' width, in natural log of the sync's seconds

    def __post_init__(self) -> None:
        for name in ("step", "per_doubling", "width"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"SyncGrowth.{name} is {value}: give a finite number")
        if self.step <= 0:
            raise ValueError(f"SyncGrowth.step is {self.step}: the sync past 2 nodes as a ratio to 2 nodes' is > 0")
        if self.width <= 0:
            raise ValueError(f"SyncGrowth.width is {self.width}: give a width > 0")
        if self.member_sync_s and len(self.member_sync_s) != len(self.members):
            raise ValueError(
                f"SyncGrowth.member_sync_s has {len(self.member_sync_s)} values for {len(self.members)} members: "
                "give one a member, or none"
            )

    def near(self, sync_s: float) -> SyncGrowth:
        """This profile for a workload whose sync adds ``sync_s`` seconds to a step across 2 nodes: the growth
        per doubling weighed toward the members whose sync is nearest (module docstring); itself when it
        holds no members' seconds."""
        if not self.member_sync_s:
            return self
        own = math.log(max(sync_s, TINY_S))
        theirs = np.log(np.maximum(self.member_sync_s, TINY_S))
        distance = ((theirs - own) / self.width) ** 2
        weights = np.exp(-0.5 * (distance - distance.min()))  # the nearest weighs 1: never all 0
        per_doubling = float(np.dot(weights, [d for _, d in self.members]) / weights.sum())
        return replace(self, per_doubling=per_doubling, sync_s=float(sync_s))

    def factor(self, nodes: np.ndarray | float) -> np.ndarray:
        """The ratio of the sync across ``nodes`` to the sync across 2 (1 at 1-2 nodes)."""
        return _factor(self.step, self.per_doubling, np.asarray(nodes, dtype=float))

    def member_factors(self, nodes: np.ndarray | float) -> np.ndarray:
        """One row per member workload: its own ratio at ``nodes`` (no rows when given as numbers)."""
        n = np.asarray(nodes, dtype=float)
        return np.array([_factor(s, d, n) for s, d in self.members]).reshape(len(self.members), *n.shape)

    def describe(self) -> str:
        """The profile in words: the ratio at 4, 8 and 16 nodes and where it comes from."""
        at = ", ".join(f"x{float(self.factor(n)):.2f} at {n}" for n in (4, 8, 16))
        source = f"fitted on {len(self.members)} workload(s)" if self.members else "given"
        if self.sync_s is not None:
            source += f", the growth weighed toward those whose sync is nearest this one's {self.sync_s:.3g} s"
        return f"the sync across nodes grows past 2 nodes by the network profile ({source}): {at} nodes"


def _factor(step: float, per_doubling: float, nodes: np.ndarray) -> np.ndarray:
    past = np.maximum(step + per_doubling * np.log2(np.maximum(nodes, 2.0) / 2.0), FLOOR)
    return np.where(nodes > 2, past, 1.0)
