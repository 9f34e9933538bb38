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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SyncGrowth"]

FLOOR = 0.05  # a factor never below 1/20 of the 2-node sync, however the numbers extrapolate


@dataclass(frozen=True)
class SyncGrowth:
    """The sync across ``N > 2`` nodes as ``step + per_doubling * log2(N / 2)`` times the 2-node sync (module
    docstring); ``members`` are the (step, per_doubling) of each workload it was fitted from (empty when
    given as numbers)."""

    step: float
    per_doubling: float
    members: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("step", "per_doubling"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"SyncGrowth.{name} is {value}: give a finite number")
        if self.step <= 0:
            raise ValueError(f"SyncGrowth.step is {self.step}: the sync past 2 nodes as a ratio to 2 nodes' is > 0")

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
        return f"the sync across nodes grows past 2 nodes by the network profile ({source}): {at} nodes"


def _factor(step: float, per_doubling: float, nodes: np.ndarray) -> np.ndarray:
    past = np.maximum(step + per_doubling * np.log2(np.maximum(nodes, 2.0) / 2.0), FLOOR)
    return np.where(nodes > 2, past, 1.0)
