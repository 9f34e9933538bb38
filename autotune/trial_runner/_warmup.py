"""When a trial's warm-up ends: after a fixed count of steps, or once window throughput has settled.

``warmup: steady`` (the default) starts the measured part of a trial only when the throughput of the last
:data:`SETTLE_WINDOWS` probe windows (each as many steps as a reporting window, timed as one: the slowest
rank's wall-clock time) lies within ``settle_tolerance`` of their median, and at the latest at the cap
(``warmup_max_steps``; by default half the trial). A trial that reaches the cap unsettled is measured
anyway and says so (``settled: false``). ``warmup: fixed`` measures from ``warmup_steps`` on, as before.
Every rank decides alike: the probe windows' times are all-reduced (the slowest rank's) before they are
offered here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SETTLE_WINDOWS = 3  # probe windows that must agree before the measured part starts


def is_settled(throughputs: Sequence[float], tolerance: float, windows: int = SETTLE_WINDOWS) -> bool:
    """Whether the last ``windows`` throughputs agree: their range is at most ``tolerance`` of their median."""
    if len(throughputs) < windows:
        return False
    last = throughputs[-windows:]
    middle = statistics.median(last)
    return middle > 0 and (max(last) - min(last)) <= tolerance * middle


@dataclass
class Warmup:
    """One rank's warm-up: which steps end a probe window, and when the measured part begins.

    ``measure_from`` is the step after which steps are measured (None while warming up); ``settled`` is
    True when the probe windows agreed (a fixed warm-up counts as settled: it was asked for)."""

    steady: bool
    min_steps: int
    probe_steps: int
    cap_steps: int
    tolerance: float
    throughputs: list[float] = field(default_factory=list)
    measure_from: int | None = None
    settled: bool = False

    @classmethod
    def for_limits(cls, limits: Any, max_steps: int) -> Warmup:
        """From a TrialLimits, for a trial of ``max_steps`` steps (``trial.samples`` may have shortened it)."""
        steady = limits.warmup == "steady"
        window = limits.window()
        cap = limits.warmup_cap(max_steps)
        warmup = cls(steady, limits.warmup_steps, window, cap, limits.settle_tolerance)
        if not steady or cap <= limits.warmup_steps:
            warmup.measure_from, warmup.settled = limits.warmup_steps, not steady
        return warmup

    @property
    def warming(self) -> bool:
        return self.measure_from is None

    def boundary(self, step: int) -> bool:
        """Whether ``step`` ends the minimum warm-up or a probe window (only while warming up)."""
        if not self.warming or step < self.min_steps:
            return False
        return (step - self.min_steps) % self.probe_steps == 0

    def offer(self, step: int, throughput: float | None) -> None:
        """A warm-up boundary at ``step``; ``throughput`` is the probe window's (None: the minimum warm-up's
        end, not timed). Ends the warm-up when the probe windows settled or the next probe would pass the cap."""
        if throughput is not None:
            self.throughputs.append(throughput)
        if is_settled(self.throughputs, self.tolerance):
            self.measure_from, self.settled = step, True
        elif step + self.probe_steps > self.cap_steps:
            self.measure_from, self.settled = step, False

    def record(self) -> dict[str, Any]:
        """What applied.json keeps of the warm-up."""
        return {
            "mode": "steady" if self.steady else "fixed",
            "steps_used": self.measure_from,
            "settled": self.settled,
            "probe_steps": self.probe_steps,
            "cap_steps": self.cap_steps,
            "tolerance": self.tolerance,
            "probe_throughputs": [round(t, 2) for t in self.throughputs],
        }
