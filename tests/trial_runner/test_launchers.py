"""The suite every launcher passes: local (cold torchrun and warm fork) and SLURM (srun job steps).

A complete trial with its metrics at world size 2, a crashing rank's outcome, a pruned trial and a
tuner killed with SIGKILL leaving nothing in the process table (nor a step in squeue).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.errors import LaunchError
from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Launcher, LocalLauncher, Outcome, TrialPlan, WarmLauncher, run_trial
from tests._processes import leftovers, wait_no_leftovers

from .conftest import HERE

KINDS = ["torchrun", "warm", pytest.param("slurm", marks=pytest.mark.real("slurm"))]


def make(kind: str) -> Launcher:
    if kind == "torchrun":
        return LocalLauncher()
    if kind == "warm":
        return WarmLauncher()
    from autotune.trial_runner._slurm import SlurmLauncher

    return SlurmLauncher()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")  # skipped, with the reason, when SLURM is not installed
    return str(request.param)


@pytest.fixture
def launcher(kind: str, request: pytest.FixtureRequest) -> Iterator[Launcher]:
    if kind == "warm":  # the session's zygote, as one study's trials share theirs: after crashes and kills too
        yield request.getfixturevalue("warm_launcher")
        return
    made = make(kind)
    yield made
    made.close()


def plan(fault: str = "none", world_size: int = 1, limits: dict[str, Any] | None = None, **args: Any) -> TrialPlan:
    config = TrialConfig.create(base_lr=1e-2, base_batch_size=32, batch_size=32, world_size=world_size)
    return TrialPlan(
        config=config,
        entrypoint="faulty.py:build",
        args={"fault": fault, **args},
        base_dir=str(HERE),
        limits=TrialLimits(**{"warmup": "fixed", "warmup_steps": 1, "max_steps": 6, "max_seconds": 60,
                              "hang_seconds": 10, "report_every": 1, **(limits or {})}),
    )


def nothing_left(trial_dir: Path, kind: str, within_s: float = 1.0) -> list[str]:
    """What of the trial still runs ``within_s`` after it ended: processes on this machine, and for SLURM
    its job steps. run_trial returns once nothing is left, so the default allows only for slow exits."""
    left = wait_no_leftovers(trial_dir, within_s=within_s)
    if kind == "slurm":
        left += _steps_of(trial_dir)
    return left


def _steps_of(trial_dir: Path) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-s", "-o", "%i %j"], capture_output=True, text=True, timeout=30,
                         check=False)
    return [line for line in out.stdout.splitlines() if f"autotune-{trial_dir.name}-" in line]


@pytest.mark.slow
def test_complete_trial_at_world_size_2_reports_its_metrics(launcher: Launcher, kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "complete"
    result = run_trial(plan(world_size=2), trial_dir, launcher)
    assert result.outcome is Outcome.COMPLETE, (result.reason, result.error_lines)
    windows = [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]
    assert [w["step"] for w in windows] == [2, 3, 4, 5, 6]
    assert all(w["samples"] == w["step"] * 64 for w in windows)  # 32 per rank, two ranks
    assert result.steps == 6 and result.samples == 6 * 64
    assert result.throughput_samples_s and result.throughput_samples_s > 0
    assert result.loss is not None and math.isfinite(result.loss)
    assert result.peak_memory_mb and 50 < result.peak_memory_mb < 4000
    assert sorted(trial_dir.glob("rank*.log")) == [trial_dir / "rank0.log", trial_dir / "rank1.log"]
    assert json.loads((trial_dir / "done.json").read_text())["steps"] == 6
    if kind == "slurm":
        assert (trial_dir / "slurm.step").read_text().strip()  # it ran as a job step
    assert not nothing_left(trial_dir, kind)


@pytest.mark.slow
def test_a_crashing_rank_is_named_and_ends_the_trial(launcher: Launcher, kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "crash"
    result = run_trial(plan("raise", world_size=2, rank=1, at_step=2), trial_dir, launcher)
    assert result.outcome is Outcome.CRASHED
    assert result.reason.startswith("rank 1: RuntimeError: injected failure on rank 1"), result.reason
    assert any("injected failure" in line for line in result.error_lines)
    assert not nothing_left(trial_dir, kind)


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_reported(launcher: Launcher, kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "segv"
    result = run_trial(plan("segfault", world_size=2, rank=1, limits={"max_steps": 400}), trial_dir, launcher)
    assert result.outcome is Outcome.CRASHED
    assert result.reason == "rank 1 killed by SIGSEGV", (result.reason, result.error_lines)
    assert not nothing_left(trial_dir, kind)


@pytest.mark.slow
def test_a_pruned_trial_keeps_its_metrics_and_leaves_nothing(launcher: Launcher, kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "pruned"
    seen: list[object] = []

    def prune_second(window: object) -> bool:
        seen.append(window)
        return len(seen) == 2

    result = run_trial(plan("slow", world_size=2, at_step=1, limits={"max_steps": 100000}), trial_dir, launcher,
                       on_window=prune_second)
    assert result.outcome is Outcome.PRUNED
    assert result.reason.startswith("pruned at step")
    assert result.throughput_samples_s and result.throughput_samples_s > 0 and result.loss is not None
    assert not nothing_left(trial_dir, kind)


@pytest.mark.slow
def test_a_hanging_trial_is_ended_at_max_seconds(launcher: Launcher, kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "timeout"
    started = time.monotonic()
    # 5 s: a cold launcher may still be starting its ranks then, and a timeout must end those as well
    result = run_trial(plan("slow", at_step=1, limits={"max_steps": 100000, "max_seconds": 5}), trial_dir, launcher)
    assert result.outcome is Outcome.TIMEOUT
    assert time.monotonic() - started < 22
    assert not nothing_left(trial_dir, kind)


TUNER = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.trial_runner.test_launchers import make, plan
from autotune.trial_runner import run_trial
run_trial(plan("slow", world_size=2, at_step=1, limits={{"max_steps": 100000}}), Path(sys.argv[1]), make(sys.argv[2]))
"""


@pytest.mark.slow
def test_a_tuner_killed_with_sigkill_takes_its_trial_along(kind: str, tmp_path: Path) -> None:
    trial_dir = tmp_path / "orphaned"
    script = tmp_path / "tuner.py"
    script.write_text(TUNER.format(root=str(HERE.parent.parent)))
    tuner = subprocess.Popen([sys.executable, str(script), str(trial_dir), kind],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not (trial_dir / "metrics.jsonl").exists():  # training for real
            assert tuner.poll() is None, "the tuner exited early"
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.2)
        assert len(leftovers(trial_dir)) >= 2  # at least the two ranks
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=10)
        # torchrun gets SIGTERM from the kernel, srun too (SLURM then cancels the step); the ranks watch both
        deadline = time.monotonic() + 15
        while (left := nothing_left(trial_dir, kind)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait(timeout=10)


@pytest.mark.own_zygote  # the launcher's own zygote, as it starts and ends
def test_a_launcher_closed_before_its_first_launch_ends_the_importing_zygote_at_once() -> None:
    # A study that fails to open (a refused storage) closes the launcher while its zygote still imports
    # torch: it is killed, not waited for (closing its stdin would wait out the imports), and leaves nothing.
    plan = TrialPlan(
        config=TrialConfig.create(base_lr=1e-3, base_batch_size=8, batch_size=8), entrypoint="faulty.py:build",
        base_dir=str(HERE), limits=TrialLimits(warmup_steps=1, max_steps=4, max_seconds=60),
    )
    launcher = WarmLauncher()
    launcher.prepare(plan)
    zygote = launcher._zygote
    assert zygote is not None and not launcher._ready
    launcher.close()
    assert zygote.returncode == -signal.SIGKILL  # ended, not left to finish its imports and exit 0
    assert not psutil.pid_exists(zygote.pid) or psutil.Process(zygote.pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.own_zygote  # the launcher's own zygote, as it starts and ends
def test_prepare_starts_the_zygote_without_waiting_for_it(tmp_path: Path) -> None:
    # prepare() returns while the zygote still imports torch (seconds); the first launch waits for it.
    plan = TrialPlan(
        config=TrialConfig.create(base_lr=1e-3, base_batch_size=8, batch_size=8), entrypoint="faulty.py:build",
        base_dir=str(HERE), limits=TrialLimits(warmup_steps=1, max_steps=4, max_seconds=60),
    )
    launcher = WarmLauncher()
    try:
        started = time.monotonic()
        launcher.prepare(plan)
        assert time.monotonic() - started < 0.5
        assert launcher._zygote is not None and not launcher._ready
        result = run_trial(plan, tmp_path / "first", launcher)
        assert result.outcome.value == "complete", result.reason
        assert launcher._ready
    finally:
        launcher.close()


def test_a_zygote_killed_from_outside_is_named_with_its_signal_and_the_next_launch_starts_a_new_one(
    tmp_path: Path,
) -> None:
    # No file is promised that does not exist: the zygote's stderr is the tuner's, and the trial's
    # launcher.err belongs to a leader that never started.
    plan = TrialPlan(
        config=TrialConfig.create(base_lr=1e-3, base_batch_size=8, batch_size=8), entrypoint="faulty.py:build",
        base_dir=str(HERE), limits=TrialLimits(warmup_steps=1, max_steps=4, max_seconds=60),
    )
    launcher = WarmLauncher()
    try:
        launcher.prepare(plan)
        zygote = launcher._zygote
        assert zygote is not None
        os.kill(zygote.pid, signal.SIGKILL)
        zygote.wait(timeout=10)
        with pytest.raises(LaunchError) as caught:
            launcher._read(zygote, timeout=5)
        message = str(caught.value)
        assert f"(pid {zygote.pid}) was killed by SIGKILL" in message and "launcher.err" not in message
        result = run_trial(plan, tmp_path / "after", launcher)  # the next launch starts a fresh zygote
        assert result.outcome.value == "complete", result.reason
    finally:
        launcher.close()
