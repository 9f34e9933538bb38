"""The monitor's decisions, driven by an injected clock: no sleeping, no processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from autotune.spec import TrialLimits
from autotune.trial_runner import Monitor, Outcome, RunHandle, Window
from autotune.trial_runner._local import summarize_torchrun_failure


class ScriptedRun(RunHandle):
    """A run whose exit is scripted by the test (the monitor's logic is what is under test here)."""

    def __init__(self) -> None:
        self.exit: int | None = None
        self.rss_mb: dict[int, float] = {}

    def poll(self) -> int | None:
        return self.exit

    def processes(self) -> list[psutil.Process]:
        return []

    def rank_processes(self) -> dict[int, list[psutil.Process]]:
        return {rank: [_FakeProc(mb)] for rank, mb in self.rss_mb.items()}  # type: ignore[list-item]

    def terminate(self, grace_s: float) -> None:
        self.exit = -15


class _FakeProc:
    def __init__(self, mb: float) -> None:
        self.mb = mb

    def memory_info(self) -> object:
        return type("M", (), {"rss": int(self.mb * 2**20)})()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _window(step: int) -> dict[str, float]:
    return {"step": step, "samples": step * 8, "elapsed_s": 1.0, "window_throughput_samples_s": 100.0,
            "throughput_samples_s": 100.0, "loss": 1.0 / step, "peak_memory_mb": 10.0,
            "time_to_first_step_s": 0.5}


def _monitor(tmp_path: Path, run: ScriptedRun, clock: Clock, **kw: object) -> Monitor:
    limits = TrialLimits(warmup_steps=1, max_steps=10, max_seconds=30, hang_seconds=5)
    return Monitor(run, tmp_path, limits, clock=clock, sleep=clock.sleep, poll_s=0.5, **kw)  # type: ignore[arg-type]


def test_windows_reach_the_callback_and_prune(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(_window(s)) for s in (2, 4, 6)) + "\n{partial")
    seen: list[Window] = []
    verdict = _monitor(tmp_path, ScriptedRun(), Clock(), on_window=lambda w: seen.append(w) or w.step == 4).watch()
    assert [w.step for w in seen] == [2, 4]
    assert verdict.outcome is Outcome.PRUNED and verdict.reason == "pruned at step 4"


def test_timeout_after_max_seconds(tmp_path: Path) -> None:
    clock = Clock()
    verdict = _monitor(tmp_path, ScriptedRun(), clock).watch()
    assert verdict.outcome is Outcome.TIMEOUT
    assert "no training step" in verdict.reason
    assert 30 < clock.now <= 31


def test_silence_after_the_first_step_is_a_hang(tmp_path: Path) -> None:
    clock = Clock()
    beat = tmp_path / "heartbeat"
    beat.touch()
    run = ScriptedRun()
    monitor = _monitor(tmp_path, run, clock)
    original_sleep = clock.sleep

    def sleep(s: float) -> None:
        original_sleep(s)
        if clock.now <= 3:  # steps for 3 s, then nothing
            os.utime(beat, ns=(int(clock.now * 1e9) + 1, int(clock.now * 1e9) + 1))

    monitor.sleep = sleep
    verdict = monitor.watch()
    assert verdict.outcome is Outcome.HANG
    assert 8 <= clock.now <= 9.5  # last beat at 3 s + hang_seconds 5


def test_memory_budget_on_the_largest_rank(tmp_path: Path) -> None:
    run = ScriptedRun()
    run.rss_mb = {0: 900.0, 1: 1300.0}
    verdict = _monitor(tmp_path, run, Clock(), max_memory_mb=1000).watch()
    assert verdict.outcome is Outcome.OOM
    assert verdict.reason.startswith("rank 1 used 1300 MB")
    assert verdict.observed_peak_mb == 1300


class EndsBetweenPolls(ScriptedRun):
    """Writes its last window and exits after the monitor read the windows, before it looked for the exit."""

    def __init__(self, metrics: Path) -> None:
        super().__init__()
        self.metrics = metrics

    def poll(self) -> int | None:
        with self.metrics.open("a") as out:
            out.write(json.dumps(_window(10)) + "\n")
        self.exit = 0
        return self.exit


def test_a_last_window_written_as_the_run_exits_is_judged_like_any_other(tmp_path: Path) -> None:
    # Under load the last window and the exit often fall between two polls: that window was kept in the result
    # but never handed to the callback, so Optuna's intermediate values missed it (and a pruner never saw it).
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps(_window(5)) + "\n")
    seen: list[int] = []
    verdict = _monitor(tmp_path, EndsBetweenPolls(metrics), Clock(), on_window=lambda w: seen.append(w.step)).watch()
    assert verdict.outcome is None and seen == [5, 10] == [w.step for w in verdict.windows]
    # and judged: a callback that prunes at it prunes the trial, as it would a poll earlier
    metrics.write_text(json.dumps(_window(5)) + "\n")
    pruned = _monitor(tmp_path, EndsBetweenPolls(metrics), Clock(), on_window=lambda w: w.step == 10).watch()
    assert pruned.outcome is Outcome.PRUNED and pruned.reason == "pruned at step 10"


def test_exit_ends_the_watch_with_no_verdict(tmp_path: Path) -> None:
    run = ScriptedRun()
    run.exit = 0
    (tmp_path / "metrics.jsonl").write_text(json.dumps(_window(3)) + "\n")
    verdict = _monitor(tmp_path, run, Clock()).watch()
    assert verdict.outcome is None and [w.step for w in verdict.windows] == [3]


def test_torchrun_failure_summary_names_the_signalled_rank_first() -> None:
    report = """
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 11671)  (SIGSEGV)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11670)
"""
    assert summarize_torchrun_failure(report) == "rank 1 killed by SIGSEGV; rank 0 exited with status 1"


def test_a_rank_stopped_by_torchrun_is_not_blamed_for_the_failure() -> None:
    # rank 1 raised (status 1); torchrun then stopped rank 0 with SIGTERM
    report = """
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11670)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 11671)
"""
    assert summarize_torchrun_failure(report) == "rank 1 exited with status 1; rank 0 killed by SIGTERM"


def test_a_rank_and_its_forked_workers_count_shared_pages_once() -> None:
    # A "rank" touches 300 MB, then forks two "DataLoader workers" that only sleep: their pages are the
    # rank's, copy-on-write. Summed RSS says ~900 MB; the memory autotune measures (PSS) about 300 MB, so
    # num_workers is not charged for memory it does not use.
    from autotune.trial_runner._memory import tree_memory_mb

    script = (
        "import os, sys, time\n"
        "block = bytearray(300 * 2**20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "for _ in range(2):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60); os._exit(0)\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
        assert len(tree) == 3
        rss = sum(p.memory_info().rss for p in tree) / 2**20
        measured = tree_memory_mb(tree)
        assert rss > 800
        assert 290 < measured < 420, (measured, rss)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_on_cuda_the_budget_checks_device_memory_not_host_memory(tmp_path: Path) -> None:
    # peak_memory_mb on CUDA is device memory (the windows' max_memory_allocated); the budget checks that
    # same number. Host memory (here 2000 MB of rank tree) is measured, and does not make the trial oom.
    over = {**_window(2), "peak_memory_mb": 900.0}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(_window(1)) + "\n" + json.dumps(over) + "\n")
    run = ScriptedRun()
    run.rss_mb = {0: 2000.0}
    verdict = _monitor(tmp_path, run, Clock(), max_memory_mb=500.0, device_memory=True).watch()
    assert verdict.outcome is Outcome.OOM
    assert verdict.reason.startswith("device memory 900 MB") and "budget of 500 MB" in verdict.reason

    (tmp_path / "metrics.jsonl").write_text(json.dumps(_window(1)) + "\n")
    verdict = _monitor(tmp_path, run, Clock(), max_memory_mb=500.0, device_memory=True).watch()
    assert verdict.outcome is Outcome.TIMEOUT  # 2000 MB of host memory is no device oom
    assert verdict.observed_peak_mb == 2000.0  # but it is measured: host_memory_mb
