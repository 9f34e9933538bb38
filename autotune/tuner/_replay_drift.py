"""A replayed machine whose speed drifts over the study's own (simulated) seconds: what the replay seam
(autotune/tuner/_replay.py) reads a trial's windows and a paced run's blocks from when given a :class:`Drift`."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from autotune.trial_runner import TrialPlan, Window


class Reading(Protocol):
    """What a replayed trial reads of its configuration (``autotune.tuner.Measured``)."""

    @property
    def throughput_samples_s(self) -> float: ...
    @property
    def overhead_s(self) -> float: ...
    @property
    def loss(self) -> float: ...
    @property
    def peak_memory_mb(self) -> float: ...
    @property
    def memory_growth_mb(self) -> float: ...


@dataclass(frozen=True)
class Drift:
    """The replayed machine's speed over the study's (simulated) seconds: at second ``t`` every configuration
    runs at ``speed(t)`` times what the landscape measures, and each window is one reading of it with lognormal
    ``noise`` (seeded by ``seed``). A paced run's block (the anchor's, a race's) reads with ``block_noise`` for a
    block of one second, scaled by its length to the power -1/4 as measured live (None: ``noise``, as a window):
    on the 2-core VM the quickstart's MLP scattered 11-15% in a 0.25 s block, 9.4-12.5% in 0.5 s, 8.4-10.3% in
    1 s and 7-8.6% in 2 s (benchmarks/README.md, the confirmation race), where a running trial's windows agree
    within 2-4%: a block follows a thaw. The clock runs as the replayed trials run: a trial's launch and teardown
    (``Measured.overhead_s``), its warm-up and windows at the speed they read, a paced run's start and blocks."""

    speed: Callable[[float], float]
    noise: float = 0.0
    seed: int = 0
    block_noise: float | None = None


class Machine:
    """A replay's clock (``now``, seconds) and the drifting machine on it (:class:`Drift`)."""

    def __init__(self, drift: Drift) -> None:
        self.drift = drift
        self.now = 0.0
        self._rng = random.Random(drift.seed)

    def reading(self, nominal: float) -> float:
        """One reading (a window, a block) of a configuration whose landscape speed is ``nominal``, now."""
        return nominal * self.drift.speed(self.now) * math.exp(self._rng.gauss(0.0, self.drift.noise))

    def block_reading(self, nominal: float, samples: float) -> float:
        """One paced block of ``samples`` samples of a configuration whose landscape speed is ``nominal``, now
        (:class:`Drift`'s ``block_noise``)."""
        if self.drift.block_noise is None:
            return self.reading(nominal)
        now = nominal * self.drift.speed(self.now)
        seconds = max(samples / now, 0.01) if now > 0 else 1.0
        return now * math.exp(self._rng.gauss(0.0, self.drift.block_noise * seconds ** -0.25))


def drifting_windows(plan: TrialPlan, m: Reading, steps: list[int], machine: Machine) -> list[Window]:
    """The windows at ``steps`` of a trial launched now on ``machine``, each read at the time it runs (after
    the launch, half of ``m.overhead_s``, and the warm-up); the running throughput is all measured samples over
    all measured seconds, as a rank reports it. The machine's clock is left where it was: the replay moves it
    by what the trial ran before it was ended."""
    config, limits = plan.config, plan.limits
    began = machine.now
    clock = m.overhead_s / 2 + limits.warmup_steps * config.global_batch / machine.reading(m.throughput_samples_s)
    windows: list[Window] = []
    previous, samples, measured_s = limits.warmup_steps, 0, 0.0
    for i, step in enumerate(steps):
        machine.now = began + clock
        speed = machine.reading(m.throughput_samples_s)
        took = (step - previous) * config.global_batch / speed
        clock, measured_s = clock + took, measured_s + took
        samples += (step - previous) * config.global_batch
        previous = step
        windows.append(Window(step=step, samples=step * config.global_batch, elapsed_s=clock,
                              window_throughput_samples_s=speed, throughput_samples_s=samples / measured_s,
                              loss=m.loss, peak_memory_mb=m.peak_memory_mb + m.memory_growth_mb * i,
                              time_to_first_step_s=m.overhead_s / 2))
    machine.now = began
    return windows
