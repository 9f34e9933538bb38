"""Real trials at world sizes 1 and 2, through the warm launcher and cold torchrun: knobs applied,
metrics measured, faults contained."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Launcher, LocalLauncher, Outcome, TrialPlan, WarmLauncher, run_trial
from tests._processes import wait_no_leftovers

from .conftest import RunFaulty


@pytest.mark.slow
def test_complete_trial_reports_windows_and_metrics(run_faulty: RunFaulty) -> None:
    # the warm launcher's (the default); a cold torchrun trial's windows and metrics: test_launchers.py
    result, trial_dir = run_faulty(limits={"report_every": 3})
    assert result.outcome is Outcome.COMPLETE, result.reason
    lines = [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]
    # warm-up 2, 18 measured steps in windows of 3
    assert [w["step"] for w in lines] == [5, 8, 11, 14, 17, 20]
    assert all(w["samples"] == w["step"] * 32 for w in lines)
    assert result.steps == 20 and result.samples == 640
    assert result.throughput_samples_s and result.throughput_samples_s > 0
    # the job's throughput is measured samples over measured (post-warm-up) time
    assert result.throughput_samples_s == pytest.approx(18 * 32 / result.training_s, rel=1e-6)
    assert result.loss is not None and math.isfinite(result.loss)
    assert lines[0]["loss"] > lines[-1]["loss"]  # it trains
    assert result.peak_memory_mb and 50 < result.peak_memory_mb < 4000
    assert result.time_to_first_step_s and 0 < result.time_to_first_step_s < result.wall_s
    assert for_each_key(lines, "throughput_samples_s")
    assert result.overhead_s is not None and 0 < result.overhead_s < result.wall_s
    for name in ("config.json", "rank0.log", "launcher.err", "result.json", "done.json"):
        assert (trial_dir / name).exists(), name
    # start-up's objects (torch's modules alone are over 100,000) are kept out of the collector's full scans,
    # which otherwise stall a step for 0.3-0.6 s inside the measurement
    assert json.loads((trial_dir / "applied.json").read_text())["gc_frozen"] > 50_000
    assert not wait_no_leftovers(trial_dir)


def for_each_key(lines: list[dict[str, float]], key: str) -> bool:
    return all(key in line and line[key] > 0 for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["warm", "torchrun"])
def test_every_knob_is_applied_at_world_size_2(run_faulty: RunFaulty, kind: str) -> None:
    knobs = {"num_workers": 2, "prefetch_factor": 4, "bucket_cap_mb": 1, "amp": "bf16",
             "activation_checkpointing": True, "grad_accum": 2, "lr_scaling": "linear", "batch_size": 16}
    result, trial_dir = run_faulty(kind=kind, world_size=2, knobs=knobs, trace=True, limits={"max_steps": 8})
    assert result.outcome is Outcome.COMPLETE, result.reason
    applied = json.loads((trial_dir / "applied.json").read_text())
    assert applied["dataloader"] == {"batch_size": 16, "num_workers": 2, "prefetch_factor": 4,
                                     "pin_memory": False, "persistent_workers": True,
                                     "sampler": "DistributedSampler", "split": None}  # split: a stream's
    assert applied["ddp_bucket_bytes_cap"] == 1 * 2**20
    assert applied["autocast_enabled"] is True and applied["autocast_dtype"] == "bfloat16"
    assert applied["checkpoint_wrappers"] == 2  # the two Blocks of faulty.Net
    assert applied["torch_threads"] == 1  # 2 cores / 2 ranks, less 2 DataLoader workers, at least 1
    # global batch 16 * 2 accum * 2 ranks = 64 = 2x base 32 -> linear lr = 2 * 1e-2
    assert applied["optimizer_lr"] == [pytest.approx(2e-2)]
    # the bucket all-reduces only on the last micro-batch of each step
    assert applied["allreduce_calls_first_step"] == 1
    assert applied["allreduce_calls_total"] == applied["steps"] == 8
    assert not wait_no_leftovers(trial_dir)
    # the DataLoader workers, re-parented to this process when their rank left, were reaped: no zombie
    zombies = [c.pid for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    assert not zombies


def test_defaults_apply_no_knob(run_faulty: RunFaulty) -> None:
    _, trial_dir = run_faulty(limits={"max_steps": 4})
    applied = json.loads((trial_dir / "applied.json").read_text())
    assert applied["autocast_enabled"] is False
    assert "checkpoint_wrappers" not in applied and "ddp_bucket_bytes_cap" not in applied
    assert applied["dataloader"]["num_workers"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize(
    ("fault", "args", "expected", "needle"),
    [
        ("raise", {"rank": -1}, Outcome.CRASHED, "injected failure"),
        ("nan", {}, Outcome.DIVERGED, "NaN"),
        ("hang", {}, Outcome.HANG, ""),
        ("memory", {"grow_mb": 64}, Outcome.OOM, "budget"),
        ("segfault", {}, Outcome.CRASHED, "SIGSEGV"),
        ("worker_dies", {}, Outcome.CRASHED, "DataLoader worker"),
    ],
)
def test_faults_get_their_outcome_and_leave_nothing(
    run_faulty: RunFaulty, world_size: int, fault: str, args: dict[str, int], expected: Outcome, needle: str
) -> None:
    last_rank = world_size - 1  # with two ranks, the fault hits rank 1 only
    knobs = {"num_workers": 1} if fault == "worker_dies" else {}
    if fault not in ("nan", "raise"):
        args = {"rank": last_rank, **args}
    started = time.monotonic()
    result, trial_dir = run_faulty(fault, world_size=world_size, max_memory_mb=1200, knobs=knobs,
                                   limits={"max_steps": 400}, **args)
    took = time.monotonic() - started
    assert result.outcome is expected, (result.reason, result.error_lines)
    assert needle in result.reason + "\n".join(result.error_lines)
    assert took < 30  # bounded: hang_seconds is 5, max_seconds 40
    assert not wait_no_leftovers(trial_dir), "processes outlived the trial"
    if fault == "raise":
        assert any("injected failure" in line for line in result.error_lines)
    if fault == "memory":
        assert result.peak_memory_mb and result.peak_memory_mb > 1200


def test_pruned_trial_keeps_partial_metrics(run_faulty: RunFaulty) -> None:
    seen = []

    def prune_second(window: object) -> bool:
        seen.append(window)
        return len(seen) == 2

    result, trial_dir = run_faulty("slow", limits={"max_steps": 200, "report_every": 2}, on_window=prune_second)
    assert result.outcome is Outcome.PRUNED
    assert result.reason.startswith("pruned at step")
    assert result.throughput_samples_s and result.throughput_samples_s > 0
    assert result.loss is not None and result.peak_memory_mb
    assert result.steps < 200
    assert not wait_no_leftovers(trial_dir)


@pytest.mark.slow
def test_timeout_keeps_metrics(run_faulty: RunFaulty) -> None:
    result, trial_dir = run_faulty("slow", at_step=1, limits={"max_steps": 100000, "max_seconds": 8,
                                                             "report_every": 2})
    assert result.outcome is Outcome.TIMEOUT
    assert result.throughput_samples_s and result.throughput_samples_s > 0
    assert result.wall_s < 20
    assert not wait_no_leftovers(trial_dir)


def test_dataset_smaller_than_a_batch_is_a_clear_crash(run_faulty: RunFaulty) -> None:
    result, _ = run_faulty(samples=10)
    assert result.outcome is Outcome.CRASHED
    assert "fewer than one batch" in result.reason


@pytest.mark.slow
def test_cold_torchrun_contains_a_hanging_rank_too(run_faulty: RunFaulty) -> None:
    # (a segfaulting rank under torchrun: test_launchers.py's test_a_rank_killed_by_a_signal_is_reported)
    result, trial_dir = run_faulty("hang", kind="torchrun", world_size=2, rank=1, limits={"max_steps": 400})
    assert result.outcome is Outcome.HANG, (result.reason, result.error_lines)
    assert not wait_no_leftovers(trial_dir)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["warm", "torchrun"])
def test_dataloader_workers_leave_no_scratch_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    request: pytest.FixtureRequest, kind: str) -> None:
    """multiprocessing's /tmp/pymp-* folders of the ranks and their DataLoader workers go with the trial, also
    when it is pruned (the workers are killed mid-epoch); before, every such trial left some behind."""
    # a short folder: the workers' sockets live inside it, and a Unix socket's path holds at most 107 bytes (under
    # pytest-xdist tmp_path/tmp/pymp-*/listener-* is longer, and the workers cannot share a batch)
    scratch = Path(tempfile.mkdtemp(prefix="at-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(scratch))  # the launcher's processes, and so the ranks, inherit it
    launcher: Launcher = WarmLauncher() if kind == "warm" else LocalLauncher()
    # a complete trial and a pruned one (its DataLoader workers killed mid-epoch); a cold torchrun trial's ranks
    # end the same way in both, so it runs the pruned one alone
    endings: list[Callable[[Any], bool] | None] = [None, lambda window: True] if kind == "warm" else [lambda _: True]
    try:
        for index, on_window in enumerate(endings):
            config = TrialConfig.create(base_lr=1e-2, base_batch_size=32, batch_size=32, world_size=2,
                                        num_workers=2, prefetch_factor=2)
            plan = TrialPlan(config=config, entrypoint="faulty.py:build", args={"fault": "none"},
                             base_dir=str(Path(__file__).parent),
                             limits=TrialLimits(warmup="fixed", warmup_steps=2, max_steps=12, max_seconds=40,
                                                report_every=2))
            trial_dir = tmp_path / f"trial{index}"
            result = run_trial(plan, trial_dir, launcher, on_window=on_window)
            assert result.outcome is (Outcome.COMPLETE if on_window is None else Outcome.PRUNED), result.reason
            assert not wait_no_leftovers(trial_dir)
            assert not list(scratch.glob("pymp-*")), f"left behind by trial {index}"
    finally:
        if isinstance(launcher, WarmLauncher):
            launcher.close()
