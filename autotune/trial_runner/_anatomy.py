"""Step anatomy inside a rank: where each step's time goes, at the cost of a few clock readings a step.

Each step is cut into laps: waiting for the next batch (the loader's ``next()`` and the copy to the device),
forward and backward, and the optimizer step (with ``zero_grad``). On the CPU a lap is two
``time.perf_counter()`` readings; on CUDA two events on the current stream, resolved only at the window's
end (the loop synchronises there), so a lap is the time the device's stream spent in it.

Gradient synchronisation not hidden behind computation (``sync_exposed_s``) under DDP: DDP launches a
bucket's all-reduce (through the comm hook :func:`timing_hook` registers, the same all-reduce as DDP's own)
as soon as the bucket's gradients are computed, and ``loss.backward()`` returns once every all-reduce is done
(DDP's reducer queues a callback at the backward's end that waits on every bucket's work, earlier buckets'
included, whichever thread runs them). Exposed is then (1) what ``backward()`` takes after the last bucket's
hook returned: the backward's computation has ended there, and what follows is waiting on every bucket's
all-reduce still under way, plus DDP's copy of the result back into the gradients; and (2) each hook's own
time (the division by the world size and the launch), which runs on the backward's thread and holds its
computation up. An earlier bucket's all-reduce that finished while the backward still computed costs
nothing there, as it costs the step nothing, unless it ran on a core the backward needed: (3) on the CPU
the all-reduces run on the process group's own threads (gloo's), and where every core is busy they take their
CPU from computation. While the backward computes between bucket launches (from one hook's end to the next
hook's start, the step's first launch to its last: a hook's own time is exposed whole, a wait for a core inside
it is not counted twice), the time the backward's thread waited for a core (its run delay,
/proc/thread-self/schedstat) up to the CPU time the gloo threads took (their thread CPU clocks) is exposed too:
on spare cores the thread waits for none and nothing is added; on two cores shared by two ranks, each rank's
all-reduces displace about their own CPU time of computation. This needs a few clock readings per bucket
(about a microsecond each) and no extra step:
the alternative, timing a step under ``no_sync()`` and subtracting it, would run a different step and read
two noisy times for one difference. Not separated: DDP's copy of a gradient into
its bucket, inside the C++ autograd hook, stays in ``forward_backward_s`` (with ``gradient_as_bucket_view``
off, and on too: the loop's ``zero_grad(set_to_none=True)`` leaves fresh gradients that DDP copies in).
FSDP's collectives run inside its own hooks: under FSDP ``sync_exposed_s`` is not separated (None) and is
part of ``forward_backward_s``. One rank without DDP has no synchronisation: 0.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from autotune.trial_runner._noise import NoiseMeter

PARTS = ("data_wait_s", "forward_backward_s", "sync_exposed_s", "optimizer_s", "pipeline_bubble_s", "tp_comm_exposed_s")
DATA, FORWARD_BACKWARD, SYNC, OPTIMIZER, BUBBLE, TP_COMM = range(len(PARTS))
COMM_THREADS = ("gloo", "pt_gloo")  # the names of gloo's threads (its TCP loop and run loops) start with these


class Displacement:
    """On the CPU: how long this thread has waited for a core (its run delay) and how much CPU the process
    group's threads have taken, in seconds, read in about a microsecond each. Made on the thread that runs the
    backward; ``None`` from :meth:`open` where /proc has neither (another OS)."""

    def __init__(self, schedstat: int, clocks: list[int]) -> None:
        self._schedstat = schedstat
        self._clocks = clocks

    @classmethod
    def open(cls) -> Displacement | None:
        try:
            schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            clocks = []
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/comm") as comm:
                    if comm.read().startswith(COMM_THREADS):
                        clocks.append(((~int(tid)) << 3) | 6)  # the thread's CPU clock (Linux's clockid)
        except (OSError, ValueError):
            return None
        return cls(schedstat, clocks)

    def reading(self) -> tuple[float, float]:
        """(this thread's run delay, the comm threads' CPU time); a thread that ended counts no more."""
        delay = int(os.pread(self._schedstat, 64, 0).split()[1]) / 1e9
        cpu = 0.0
        for clock in list(self._clocks):
            try:
                cpu += time.clock_gettime(clock)
            except OSError:
                self._clocks.remove(clock)
        return delay, cpu


class StepLaps:
    """One rank's laps since the last window boundary, summed by part (seconds). Off (``on`` False: the
    plan's internal ``step_anatomy`` switch, for benchmarks/step_anatomy.py) it reads no clock."""

    def __init__(self, device: torch.device, sync: bool | None, on: bool = True, pipeline: Any = None,
                 tp: bool = False) -> None:
        """``sync``: True under DDP (exposed sync measured), False without synchronisation, None under FSDP.
        ``pipeline``: the pipeline's chunk timer (_pipeline.ChunkTimer: its stages' computing time; the rest of
        the forward/backward laps is the bubble); ``tp``: tensor-parallel collectives are lapped (_tp_comm.py)."""
        self.on = on
        self.pipeline, self.tp = pipeline, tp
        self.cuda = device.type == "cuda"
        self.sync = sync
        self.allreduce_calls = 0  # buckets launched, all steps (applied.json under plan.trace)
        self._last_launch: Any = None  # the last hook's end, the backward's computation's end
        self._hook_start: Any = None
        self._displacement: Displacement | None = None  # CPU under DDP: opened at the first bucket
        self._opened = False
        # (3): this step's run delay and comm threads' CPU summed over the computation between hooks (a hook's own
        # time is exposed whole: a wait for a core inside it is not counted twice), and the reading as the last
        # hook ended
        self._computing = (0.0, 0.0)
        self._gap: tuple[float, float] | None = None
        self._pending: list[tuple[int, Any, Any]] = []  # CUDA: (part, start event, end event)
        self.totals = [0.0] * len(PARTS)

    def mark(self) -> Any:
        """Now: a perf_counter reading, or (CUDA) an event recorded on the current stream (off: 0.0)."""
        if not self.on:
            return 0.0
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def lap(self, part: int, start: Any) -> Any:
        """Add the time from ``start`` to now to ``part``; returns now (the next lap's start)."""
        if not self.on:
            return 0.0
        now = self.mark()
        if self.cuda:
            self._pending.append((part, start, now))
        else:
            self.totals[part] += now - start
        return now

    def lap_sync(self, start: Any) -> Any:
        """A synchronisation the step waits for whole (the mesh's dp average): a forward/backward lap that is all
        exposed sync (taken out of the forward/backward again by :meth:`take`)."""
        now = self.lap(FORWARD_BACKWARD, start)
        if self.on:
            if self.cuda:
                self._pending.append((SYNC, start, now))
            else:
                self.totals[SYNC] += now - start
        return now

    def bucket_launched(self) -> None:
        """Called by the comm hook as DDP hands it a bucket, before the hook's own work."""
        self.allreduce_calls += 1
        self._hook_start = self.mark()
        if not self.on or self.cuda:
            return
        if not self._opened:  # the first bucket of the first step
            self._displacement, self._opened = Displacement.open(), True
        if self._displacement is not None and self._gap is not None:  # the computation since the last hook ended
            (delay0, cpu0), (delay1, cpu1) = self._gap, self._displacement.reading()
            self._computing = (self._computing[0] + delay1 - delay0, self._computing[1] + cpu1 - cpu0)
            self._gap = None

    def bucket_hooked(self) -> None:
        """Called by the comm hook once it launched the bucket's all-reduce: the hook's time is exposed sync
        (it holds the backward's computation up)."""
        if not self.on:
            return
        end = self.mark()
        if self.cuda:
            self._pending.append((SYNC, self._hook_start, end))
        else:
            self.totals[SYNC] += end - self._hook_start
            if self._displacement is not None:
                self._gap = self._displacement.reading()
        self._last_launch = end

    def backward_done(self, end: Any) -> None:
        """The synchronising backward returned at ``end``: the time since the last hook's end is exposed."""
        if self._last_launch is not None and self.on:
            if self.cuda:
                self._pending.append((SYNC, self._last_launch, end))
            else:
                self.totals[SYNC] += end - self._last_launch
            self._last_launch = None
        delay, cpu = self._computing
        self.totals[SYNC] += max(0.0, min(delay, cpu))  # (3) in the module's text
        self._computing, self._gap = (0.0, 0.0), None

    def take(self) -> list[float]:
        """The sums since the last call (CUDA: the stream is synchronised first), and start anew. The exposed
        sync is inside the forward/backward lap: it is taken out of it here."""
        if self._pending:
            torch.cuda.synchronize()
            for part, start, end in self._pending:
                self.totals[part] += start.elapsed_time(end) / 1000.0
            self._pending.clear()
        totals, self.totals = self.totals, [0.0] * len(PARTS)
        if self.pipeline is not None:  # what the stages did not compute of the schedule's time: the bubble
            computing = self.pipeline.take()
            totals[BUBBLE] = max(0.0, totals[FORWARD_BACKWARD] - totals[SYNC] - computing) if self.on else 0.0
        # Each part is taken out of what the forward/backward laps leave, never more: a busy machine can stretch a
        # tp collective's lap past the stages' timed chunks, and the parts must not add up to more than the laps.
        left = totals[FORWARD_BACKWARD]
        for part in (SYNC, BUBBLE, TP_COMM):
            totals[part] = min(totals[part], left)
            left -= totals[part]
        totals[FORWARD_BACKWARD] = left
        return totals


def timing_hook(laps: StepLaps, noise: NoiseMeter | None = None) -> Any:
    """A DDP comm hook that all-reduces as DDP's default does (divide by the world size, sum), tells ``laps``
    when it starts and when it has launched each bucket's all-reduce, and hands ``noise`` (the gradient noise
    scale: _noise.py) the bucket's gradient before the all-reduce (this rank's) and after it (the global
    batch's: only the buckets this rank owns). The noise's norm is taken before the hook's timed part: it is
    the measurement's own cost, not the synchronisation's."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    # No annotations: DDP inspects them, and postponed (string) annotations fail its check.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        if noise is not None:
            noise.add_small(bucket.buffer())
        laps.bucket_launched()
        future = default_hooks.allreduce_hook(state, bucket)
        laps.bucket_hooked()
        if noise is None or not noise.owns(bucket.index()):
            return future

        def reduced(done):  # type: ignore[no-untyped-def]
            tensor = done.value()
            noise.add_big(tensor)
            return tensor

        return future.then(reduced)

    return hook
