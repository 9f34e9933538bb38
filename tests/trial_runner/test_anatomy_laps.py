"""StepLaps' exposed synchronisation on the CPU, with the clock's waits standing in for the hook's work and for
the all-reduces still under way: each comm hook's own time counts, and so does what the backward takes after
the last hook returned; the computation between hooks does not."""

from __future__ import annotations

import time

import torch

from autotune.trial_runner._anatomy import FORWARD_BACKWARD, SYNC, StepLaps


def _backward(laps: StepLaps) -> None:
    """Two buckets: 20 ms of computation, a hook taking 10 ms, 30 ms of computation, a hook taking 10 ms, then
    40 ms waiting for the all-reduces."""
    start = laps.mark()
    for _ in range(2):
        time.sleep(0.02)  # computation (the second time: 30 ms in all, below)
        laps.bucket_launched()
        time.sleep(0.01)  # the hook's division and launch
        laps.bucket_hooked()
    time.sleep(0.04)  # waiting on every bucket's all-reduce
    end = laps.lap(FORWARD_BACKWARD, start)
    laps.backward_done(end)


def test_the_hooks_and_the_wait_after_the_last_are_exposed() -> None:
    laps = StepLaps(torch.device("cpu"), sync=True)
    _backward(laps)
    parts = laps.take()
    # exposed: 2 x 10 ms of hooks + 40 ms of waiting; the 40 ms of computation stays in forward/backward
    assert parts[SYNC] >= 0.06
    assert parts[FORWARD_BACKWARD] >= 0.04
    assert parts[SYNC] + parts[FORWARD_BACKWARD] >= 0.10  # the whole backward, each part once
    assert laps.allreduce_calls == 2


def test_off_it_reads_no_clock_but_still_counts_the_buckets() -> None:
    laps = StepLaps(torch.device("cpu"), sync=True, on=False)
    _backward(laps)
    assert laps.take() == [0.0, 0.0, 0.0, 0.0] and laps.allreduce_calls == 2
