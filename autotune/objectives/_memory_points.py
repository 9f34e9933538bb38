"""The memory measurements of a study's trials, as the memory prediction (``_memory_model.py``) reads them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemoryPoint:
    """One trial's peak memory per rank (MB) and its configuration (a ``TrialConfig`` as JSON).

    ``at_least``: the trial ran out of memory or was stopped over the budget, so its peak is a lower bound.
    """

    config: Mapping[str, Any]
    peak_mb: float
    at_least: bool = False


def memory_points(trials: Iterable[Any], max_memory_mb: float | None = None) -> list[MemoryPoint]:
    """The memory measurements of a study's finished trials (Optuna ``FrozenTrial`` s, docs/storage.md).

    Complete and pruned trials are points; an oom trial (out of memory, or stopped over the budget) is a
    lower bound of its peak, at least ``max_memory_mb``; a trial not launched (``launched`` false) or
    without a ``config`` or a measured peak is none.
    """
    points = []
    for t in trials:
        attrs = t.user_attrs
        config, outcome = attrs.get("config"), attrs.get("outcome")
        if not isinstance(config, Mapping) or attrs.get("launched") is False:
            continue
        peak = attrs.get("peak_memory_mb")
        if outcome == "oom":
            floor = max(float(peak or 0.0), float(max_memory_mb or 0.0))
            if floor > 0:
                points.append(MemoryPoint(config, floor, at_least=True))
        elif outcome in ("complete", "pruned", "diverged") and isinstance(peak, (int, float)) and peak > 0:
            points.append(MemoryPoint(config, float(peak)))
    return points
