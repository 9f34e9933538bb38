"""The window accounting of one rank's training loop: which step ends a window, the window's time, its one
small reduction across ranks, the warm-up's probe windows, and rank 0's window record in metrics.jsonl.

A window's time is the wall-clock time since the previous boundary, the boundary's own reduction included:
DataLoader workers keep producing while the main loop is not stepping, so timing only the steps would hand a
loader-bound configuration free time and make short trials optimistic. The memory is read on a thread of its
own (MemorySampler), not at the boundaries: a reading in the loop (PSS of the rank's tree, tens of ms) either
costs the window or, left out of it, gives the DataLoader workers free time; with two ranks, a rank waited
inside its next window for the other's reading (the HF GPT-2's two-rank short trials read 8-13% below 10x
longer runs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from autotune.trial_result import GradientNoise, StepAnatomy, Window
from autotune.trial_runner._anatomy import StepLaps
from autotune.trial_runner._memory import MemorySampler
from autotune.trial_runner._noise import NoiseMeter, window_noise
from autotune.trial_runner._plan import METRICS_FILE, TrialPlan
from autotune.trial_runner._records import window_line
from autotune.trial_runner._warmup import Warmup

# On the CPU the memory of a rank's tree (PSS) is read at a window boundary at most this often (and at the last).
MEMORY_EVERY_S = 1.0


def trial_steps(limits: Any, global_batch: int) -> int:
    """The optimizer steps a trial runs: ``max_steps``, fewer when ``samples`` is reached first (never
    fewer than the warm-up and one measured step)."""
    if limits.samples is None:
        return int(limits.max_steps)
    return int(min(limits.max_steps, max(limits.warmup_steps + 1, math.ceil(limits.samples / global_batch))))


@dataclass(frozen=True)
class WindowEnd:
    """What a window's end decided: the loss was not finite (``diverged``), the window was a measured one, the
    measured part begins after this step (``measure_start``), a steady warm-up settled or hit its cap here
    (``warmup_ended``)."""

    diverged: bool = False
    measured: bool = False
    measure_start: bool = False
    warmup_ended: bool = False


class Reduced(NamedTuple):
    """A window reduced across ranks: the slowest rank's time, the largest memory, the mean loss (None: a rank's
    loss was not finite), the step anatomy of the slowest rank and the ranks' mean (None: not measured)."""

    slowest_s: float
    peak_mb: float
    loss: float | None
    anatomy: StepAnatomy | None
    anatomy_mean: StepAnatomy | None
    noise: GradientNoise | None = None


class WindowMeter:
    """One rank's windows. The loop calls :meth:`count` after each step and, where :meth:`at_boundary`,
    :meth:`window_end`; ``measured_s``/``measured_samples`` are the slowest rank's measured totals. ``laps``
    holds the step's timed parts since the last boundary (the step anatomy)."""

    def __init__(
        self, plan: TrialPlan, trial_dir: Path, rank: int, world_size: int, device: torch.device, laps: StepLaps,
        noise: NoiseMeter | None = None, holds_loss: bool = True,
    ) -> None:
        cfg, limits = plan.config, plan.limits
        self.plan, self.rank, self.world_size, self.device, self.laps = plan, rank, world_size, device, laps
        self.noise = noise  # the window's squared gradient norms (the gradient noise scale), when measured
        self.holds_loss = holds_loss  # False on a pipeline stage before the last: its loss is not the model's
        self.global_batch = cfg.global_batch
        self.window, self.max_steps = limits.window(), trial_steps(limits, cfg.global_batch)
        self.warmup = Warmup.for_limits(limits, self.max_steps)
        if plan.pace_steps:  # a paced run trains in blocks after its warm-up until the tuner ends it
            self.window, self.max_steps = plan.pace_steps, 1 << 40
        self.step_ends: list[float] | None = [] if plan.step_times else None
        self.reads: list[tuple[int, float]] | None = [] if plan.step_times else None
        self.memory = MemorySampler(device, MEMORY_EVERY_S, self.reads)
        self.metrics_path = trial_dir / METRICS_FILE
        self.step = self.boundary_step = 0
        self.window_loss = torch.zeros((), device=device)
        self.measured_s, self.measured_samples = 0.0, 0
        self.peak = 0.0  # this rank's memory, as last read
        self.last_loss: float | None = None
        self.first_step_s: float | None = None  # launch -> the first step's end
        self.mark = time.perf_counter()

    def count(self, loss: torch.Tensor) -> int:
        """A step finished with ``loss``; returns the step's number."""
        self.step += 1
        self.memory.step = self.step
        if self.step == 1:
            self.memory.start()  # after the first batch: the DataLoader's workers exist (and are forked)
        self.window_loss += loss
        return self.step

    def log_step_end(self) -> None:
        if self.step_ends is not None:
            self.step_ends.append(time.perf_counter())

    def restart_clock(self) -> None:
        """Leave what happened since the last boundary out of the next window (a paced run's stop at the gate)."""
        self.mark = time.perf_counter()
        self.laps.take()

    def at_boundary(self) -> bool:
        step, start = self.step, self.warmup.measure_from
        return (
            self.warmup.boundary(step)
            or (start is not None and step >= start and (step - start) % self.window == 0)
            or step == self.max_steps
        )

    def window_end(self) -> WindowEnd:
        """Close the window that ends at this step: time it, reduce it across ranks, feed the warm-up or
        (rank 0) append its record to metrics.jsonl."""
        step, warmup = self.step, self.warmup
        measuring = warmup.measure_from is not None and step > warmup.measure_from
        probing = warmup.warming and step > warmup.min_steps  # a probe window is timed like a measured one
        now = time.perf_counter()
        window_time, self.mark = (now - self.mark if measuring or probing else 0.0), now
        steps, self.boundary_step = step - self.boundary_step, step
        parts = self.laps.take()
        self._read_memory(last=step == self.max_steps)
        reduced = self._reduce(window_time, steps, parts)
        self.window_loss = torch.zeros((), device=self.device)
        if reduced.loss is None:
            return WindowEnd(diverged=True)
        self.last_loss, slowest = reduced.loss, reduced.slowest_s
        if warmup.warming:
            warmup.offer(step, steps * self.global_batch / slowest if probing and slowest > 0 else None)
            return WindowEnd(measure_start=step == warmup.measure_from, warmup_ended=not warmup.warming)
        if measuring:
            self.measured_s += slowest
            self.measured_samples += steps * self.global_batch
            if self.rank == 0:
                with self.metrics_path.open("a") as f:
                    f.write(window_line(self._record(steps * self.global_batch / slowest if slowest > 0 else 0.0,
                                                     reduced)))
            if self.plan.step_anatomy_alternate:  # benchmarks/step_anatomy.py: the next window the other way
                self.laps.on = not self.laps.on
        return WindowEnd(measured=measuring, measure_start=step == warmup.measure_from)

    def close(self) -> None:
        self.memory.stop()

    def _read_memory(self, last: bool) -> None:
        if self.device.type == "cuda" or last:  # CUDA: a counter; the last: the final figure
            if last:
                self.memory.stop()
            self.peak = self.memory.read()
            self.mark = time.perf_counter()
        else:
            self.peak = self.memory.peak

    def _reduce(self, window_time: float, steps: int, parts: list[float]) -> Reduced:
        """One small collective per window: every rank's time, memory, non-finite flag, loss, timed parts and
        gradient norms, gathered to every rank (the slowest rank is the one whose window took longest)."""
        local_loss = (self.window_loss / max(1, steps)).float()
        finite = bool(torch.isfinite(local_loss)) or not self.holds_loss
        norms = self.noise.take() if self.noise is not None else []  # the gradient noise scale's sums
        weight = 1.0 if self.holds_loss else 0.0  # the loss is the mean over the ranks that hold it
        row = torch.tensor([window_time, self.peak, 0.0 if finite else 1.0, local_loss.item() * weight if finite
                            else 0.0, weight, *parts, *norms], dtype=torch.float64, device=self.device)
        rows = [torch.empty_like(row) for _ in range(self.world_size)]
        dist.all_gather(rows, row)
        table = torch.stack(rows).tolist()
        slowest = max(table, key=lambda r: r[0])
        loss = None if any(r[2] for r in table) else sum(r[3] for r in table) / max(1.0, sum(r[4] for r in table))
        return Reduced(slowest[0], max(r[1] for r in table), loss, self._anatomy([slowest], steps),
                       self._anatomy(table, steps), window_noise(self.noise, table))

    def _anatomy(self, rows: list[list[float]], steps: int) -> StepAnatomy | None:
        """The step anatomy of ``rows`` (each part's mean over them), per step; None when not measured."""
        if not self.laps.on or steps <= 0 or rows[0][0] <= 0:
            return None
        n = len(rows) * steps
        data, compute, sync, optimizer, bubble, tp_comm = (sum(r[5 + i] for r in rows) / n for i in range(6))
        return StepAnatomy.of(sum(r[0] for r in rows) / n, data, compute,
                              sync if self.laps.sync is not None else None, optimizer,
                              bubble if self.laps.pipeline is not None else None, tp_comm if self.laps.tp else None)

    def _record(self, window_throughput: float, reduced: Reduced) -> Window:
        launched_at = self.plan.launched_at
        return Window(
            step=self.step,
            samples=self.step * self.global_batch,
            elapsed_s=round(time.time() - launched_at, 4) if launched_at else 0.0,
            window_throughput_samples_s=window_throughput,
            throughput_samples_s=self.measured_samples / self.measured_s if self.measured_s > 0 else 0.0,
            loss=reduced.loss if reduced.loss is not None else math.nan,
            peak_memory_mb=round(reduced.peak_mb, 2),
            time_to_first_step_s=round(self.first_step_s or 0.0, 4),
            warmup_steps=self.warmup.measure_from,
            settled=self.warmup.settled,
            step_anatomy=reduced.anatomy,
            step_anatomy_mean=reduced.anatomy_mean,
            gradient_noise=reduced.noise,
        )
