"""The monitor's decisions, driven by an injected clock: no sleeping, no processes."""

from __future__ import annotations

import json
import os
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
