"""Confirmation statistics: repeated measurements of the same configuration, grouped and compared."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from autotune.objectives._dominance import DIRECTIONS
from autotune.objectives._noise import Pooled, half_width, pooled_sd


class Measurement(NamedTuple):
    """One feasible complete measurement of a configuration (a trial): the record ``group_measurements`` takes."""

    trial_number: int
    config_key: str
    config: Mapping[str, Any]  # the TrialConfig as JSON
    value: float  # the confirmed metric (e.g. throughput_samples_s)
    peak_memory_mb: float | None
    loss: float | None
    within: float | None = None  # the trial's own window-to-window interval (throughput_spread), if known


Record = tuple[Any, ...]  # a Measurement's fields in order (``within`` may be left out)


@dataclass(frozen=True)
class Group:
    """The measurements of one configuration: the ``Group`` of docs/storage.md.

    ``spread`` is (max - min) / |median| of ``values`` (0 for a single value); ``peak_memory_mb`` and
    ``loss`` are the medians of the known ones (None when none is known); ``half_width`` is the relative
    half-width of the ~95% interval of ``median`` (:func:`autotune.objectives._noise.half_width`, with the
    deviation pooled over the groups measured together, a group measured once included; None when it cannot be
    told: measured once, without a window interval, and no group measured twice).
    """

    config_key: str
    config: Mapping[str, Any]
    trials: tuple[int, ...]
    values: tuple[float, ...]
    median: float
    spread: float
    peak_memory_mb: float | None
    loss: float | None
    half_width: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The Group JSON stored in the ``autotune_confirmation`` study attribute."""
        return {
            "config_key": self.config_key,
            "config": dict(self.config),
            "trials": list(self.trials),
            "values": list(self.values),
            "median": self.median,
            "spread": self.spread,
            "peak_memory_mb": self.peak_memory_mb,
            "loss": self.loss,
            "half_width": self.half_width,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Group:
        """Read back what :meth:`to_json` wrote."""
        return cls(
            config_key=str(data["config_key"]),
            config=dict(data["config"]),
            trials=tuple(int(t) for t in data["trials"]),
            values=tuple(float(v) for v in data["values"]),
            median=float(data["median"]),
            spread=float(data["spread"]),
            peak_memory_mb=None if data["peak_memory_mb"] is None else float(data["peak_memory_mb"]),
            loss=None if data["loss"] is None else float(data["loss"]),
            half_width=None if data.get("half_width") is None else float(data["half_width"]),
        )


def group_measurements(records: Iterable[Record]) -> list[Group]:
    """Group measurements by ``config_key``, in the order each configuration was first measured.

    Within a group, trials and values are in trial-number order and ``config`` is the first trial's.
    ValueError for a value that is not a finite number (records are feasible complete measurements).
    """
    by_key: dict[str, list[Measurement]] = {}
    for record in sorted((Measurement(*r) for r in records), key=lambda m: m.trial_number):
        if not math.isfinite(record.value):
            raise ValueError(
                f"trial {record.trial_number}: value {record.value!r} is not a finite number; "
                "give only feasible complete measurements"
            )
        by_key.setdefault(record.config_key, []).append(record)
    pooled = pooled_sd([float(m.value) for m in members] for members in by_key.values())
    return [_group(key, members, pooled) for key, members in by_key.items()]


def _group(key: str, members: Sequence[Measurement], pooled: Pooled | None = None) -> Group:
    values = tuple(float(m.value) for m in members)
    median = statistics.median(values)
    return Group(
        config_key=key,
        config=dict(members[0].config),
        trials=tuple(m.trial_number for m in members),
        values=values,
        median=median,
        spread=_spread(values, median),
        peak_memory_mb=_median_of_known(m.peak_memory_mb for m in members),
        loss=_median_of_known(m.loss for m in members),
        half_width=half_width(values, (m.within for m in members), pooled),
    )


def _spread(values: Sequence[float], median: float) -> float:
    width = max(values) - min(values)
    if width == 0:
        return 0.0
    return width / abs(median) if median != 0 else math.inf


def _median_of_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(known) if known else None


def choose_best(groups: Sequence[Group], direction: str) -> Group:
    """The group with the best median; ties go to the lower spread, then to more measurements, then first."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not valid; use 'maximize' or 'minimize'")
    if not groups:
        raise ValueError("no groups to choose from; confirm at least one configuration")
    sign = -1.0 if direction == "maximize" else 1.0
    return min(groups, key=lambda g: (sign * g.median, g.spread, -len(g.values)))
