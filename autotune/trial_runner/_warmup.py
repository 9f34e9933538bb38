"""When a trial's warm-up ends: after a fixed count of steps, or once window throughput stopped rising.

``warmup: steady`` (the default) times probe windows after ``warmup_steps`` (each as many steps as a
reporting window, timed as one: the slowest rank's wall-clock time) and starts the measured part at the
first probe window that is not faster than the one before it by more than ``settle_tolerance``: the slow
first steps (allocation, first-touch page faults, DDP's bucket rebuild, DataLoader workers starting and
filling their prefetch) are behind it. The rule is one-sided on purpose: a slow start is what biases a short
trial against a long run, while a data pipeline's windows of a few steps scatter both ways around their mean
(batches arrive from the workers in bursts). Measured on the README quickstart (18 trials, 5-step windows
after 5 warm-up steps): the windows' coefficient of variation was 5-28%, and the first probe window read
0.48-1.57x of the later ones; the former rule (the last 3 windows within 10% of their median) held in 2 of
18 trials, so nearly every trial was called low-confidence, while this one held by the 2nd-4th probe window
in all 18. The scatter itself is carried by the trial's window interval (``throughput_spread``). A trial
whose every probe window was faster than the last until the cap (``warmup_max_steps``; by default half the
trial) is measured anyway and says so (``settled: false``, low confidence). ``warmup: fixed`` measures from
``warmup_steps`` on, as before. Every rank decides alike: the probe windows' times are all-reduced (the
slowest rank's) before they are offered here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.trial_runner._records import WarmupFacts

SETTLE_WINDOWS = 2  # probe windows compared: the newest against the one before it


def is_settled(throughputs: Sequence[float], tolerance: float) -> bool:
    """Whether the throughput stopped rising: the newest probe window is positive and not faster than the one
    before it by more than ``tolerance`` (0.1: at most 10% faster)."""
    if len(throughputs) < SETTLE_WINDOWS:
        return False
    before, newest = throughputs[-2], throughputs[-1]
    return newest > 0 and before > 0 and newest <= (1 + tolerance) * before


@dataclass
class Warmup:
    """One rank's warm-up: which steps end a probe window, and when the measured part begins.

    ``measure_from`` is the step after which steps are measured (None while warming up); ``settled`` is
    True when the throughput stopped rising (a fixed warm-up counts as settled: it was asked for)."""

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
        end, not timed). Ends the warm-up when the throughput stopped rising or the next probe would pass the cap."""
        if throughput is not None:
            self.throughputs.append(throughput)
        if is_settled(self.throughputs, self.tolerance):
            self.measure_from, self.settled = step, True
        elif step + self.probe_steps > self.cap_steps:
            self.measure_from, self.settled = step, False

    def record(self) -> WarmupFacts:
        """What applied.json keeps of the warm-up."""
        return WarmupFacts(
            mode="steady" if self.steady else "fixed",
            steps_used=self.measure_from,
            settled=self.settled,
            probe_steps=self.probe_steps,
            cap_steps=self.cap_steps,
            tolerance=self.tolerance,
            probe_throughputs=[round(t, 2) for t in self.throughputs],
        )
