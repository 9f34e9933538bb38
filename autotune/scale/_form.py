"""The step-time form of :mod:`autotune.scale._model` (its docstring gives it in words), as numbers: the
step time of a placement from the seven fitted terms, and what the sync across two nodes adds to a step."""

from __future__ import annotations

import numpy as np

__all__ = ["exposed_sync_s", "step_time"]


def step_time(
    p: np.ndarray,
    nodes: np.ndarray,
    ranks: np.ndarray,
    batch: np.ndarray,
    accum: np.ndarray,
    growth: np.ndarray | float = 1.0,
) -> np.ndarray:
    """The step time of each placement; ``growth`` multiplies the sync across nodes (a profile's factor)."""
    grad = p[0] + p[1] * batch
    local = p[2] + p[3] * np.maximum(ranks - 2, 0)
    sync = np.where(nodes > 1, (p[4] + p[5] * np.maximum(nodes - 2, 0)) * growth, local)
    sync = np.where(ranks > 1, sync, 0.0)
    gamma = p[6]
    # (g^γ + s^γ)^(1/γ) computed as g * (1 + (s/g)^γ)^(1/γ): no overflow for large γ
    ratio = np.where(grad > 0, sync / np.maximum(grad, 1e-300), 0.0)
    overlapped = grad * (1.0 + ratio**gamma) ** (1.0 / gamma)
    return (accum - 1) * grad + overlapped


def exposed_sync_s(p: np.ndarray, batch: float) -> float:
    """Seconds the sync across 2 nodes adds to a step of ``batch`` samples a rank: the part the overlap does
    not hide (the cross-node sync is the same for any number of ranks on 2 nodes)."""
    one = np.array([1.0])
    step = float(step_time(p, 2 * one, 2 * one, batch * one, one)[0])
    return step - float(p[0] + p[1] * batch)
