"""machine_load: other processes' CPU time on a trial's cores, measured on real trials beside a real CPU hog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from autotune.trial_runner import Outcome
from autotune.trial_runner._load import BUSY_LOAD, Load, LoadMeter
from tests.trial_runner.conftest import RunFaulty

HOG = "while True: pass"


@contextmanager
def cpu_hog() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two busy-loop processes per core this process may use (the cores a trial leases), ended after: two,
    so that on a machine others already keep busy the hog still takes a visible share."""
    procs = [
        subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True)
        for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=10)


def test_a_meter_counts_others_busy_time_on_the_held_cores_only() -> None:
    # Core 0 and 2 held; core 1 (not held) is busy too and must not count. Over 2 s, others kept core 0
    # busy for 1 s and core 2 for 0.5 s: 1.5 s of 4 core-seconds.
    times = iter([[10.0, 50.0, 20.0], [11.0, 52.0, 20.5]])
    clock = iter([100.0, 102.0])
    meter = LoadMeter((0, 2), cpu_times=lambda: next(times), clock=lambda: next(clock))
    meter.start()
    load = meter.finish()
    assert load.machine_load == pytest.approx(0.375, abs=0.02)  # less the test process's own few ms
    assert load.busy is True and load.gpu_other_processes is None


def test_the_runs_own_cpu_time_is_not_load() -> None:
    # The held cores were busy 3 s over 2 s; 2.5 s of it was the run's own processes (sampled).
    times = iter([[0.0, 0.0], [1.5, 1.5]])
    clock = iter([0.0, 2.0])
    meter = LoadMeter((0, 1), cpu_times=lambda: next(times), clock=lambda: next(clock))
    meter.start()
    meter._own = {1: 1.5, 2: 1.0}  # what sample() keeps: each process at the most CPU time seen
    load = meter.finish()
    assert load.machine_load == pytest.approx(0.125, abs=0.02) and load.busy is False


def test_another_process_on_a_held_gpu_makes_the_trial_busy() -> None:
    meter = LoadMeter((0,), ("0",), cpu_times=lambda: [0.0], clock=iter([0.0, 1.0]).__next__,
                      gpu_pids=lambda gpus: {999_999})
    meter.start()
    load = meter.finish()
    assert load.gpu_other_processes == 1 and load.busy is True
    assert Load(None).busy is None  # nothing measured: no verdict


@pytest.mark.slow
@pytest.mark.xdist_group("timing")  # two loads compared: niced beside a timed block the hog barely moved it
def test_a_cpu_hog_beside_a_real_trial_raises_its_machine_load(run_faulty: RunFaulty) -> None:
    # Real ranks (the warm launcher, the default), a real busy loop on every core they lease. Whatever else
    # runs on this shared machine runs in both; the hog only in the second.
    args = {"limits": {"max_steps": 40, "warmup_steps": 2}, "work": 10}
    quiet, _ = run_faulty(**args)
    with cpu_hog() as hogs:
        hogged, _ = run_faulty(**args)
        hog_pids = [h.pid for h in hogs]
    assert quiet.outcome is Outcome.COMPLETE  # the hogged one may time out: its load is measured either way
    print(f"machine_load quiet {quiet.machine_load}, beside the hog {hogged.machine_load}")
    assert quiet.machine_load is not None and hogged.machine_load is not None
    assert hogged.machine_load > quiet.machine_load  # the direction, not a number
    assert hogged.busy is True and hogged.machine_load > BUSY_LOAD
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in hog_pids)
