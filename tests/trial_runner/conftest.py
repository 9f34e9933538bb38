from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Launcher, LocalLauncher, TrialPlan, TrialResult, WarmLauncher, run_trial

HERE = Path(__file__).parent


def _fd_targets(pid: int) -> list[str]:
    folder = f"/proc/{pid}/fd"
    targets = []
    try:
        names = os.listdir(folder)
    except OSError:
        return targets
    for name in names:
        try:
            targets.append(os.readlink(f"{folder}/{name}"))
        except OSError:
            continue
    return targets


def leftovers(trial_dir: Path) -> list[str]:
    """Live processes of a trial: its folder in their command line (torchrun, cold ranks) or among their
    open files (ranks forked by the warm launcher and their DataLoader workers hold rank<N>.log)."""
    found = []
    needle = str(trial_dir)
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            if needle in cmdline or any(t.startswith(needle) for t in _fd_targets(proc.pid)):
                found.append(f"{proc.pid} {cmdline}")
        except psutil.Error:
            continue
    return found


def wait_no_leftovers(trial_dir: Path, within_s: float = 5.0) -> list[str]:
    deadline = time.monotonic() + within_s
    while True:
        left = leftovers(trial_dir)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


RunFaulty = Callable[..., tuple[TrialResult, Path]]


@pytest.fixture(scope="session")
def warm_launcher() -> Iterator[WarmLauncher]:
    """One warm launcher for the session: its zygote starts once."""
    launcher = WarmLauncher()
    yield launcher
    launcher.close()


@pytest.fixture
def run_faulty(tmp_path: Path, warm_launcher: WarmLauncher) -> RunFaulty:
    """Run one real trial of tests/trial_runner/faulty.py and return (result, trial_dir).

    ``kind``: ``warm`` (ranks forked from the warm zygote, the default launcher) or ``torchrun`` (cold).
    """
    counter = iter(range(1000))

    def run(
        fault: str = "none",
        *,
        kind: str = "warm",
        world_size: int = 1,
        limits: dict[str, Any] | None = None,
        max_memory_mb: float | None = None,
        on_window: Any = None,
        trace: bool = False,
        knobs: dict[str, Any] | None = None,
        **args: Any,
    ) -> tuple[TrialResult, Path]:
        config = TrialConfig.create(**{"base_lr": 1e-2, "base_batch_size": 32, "batch_size": 32,
                                       "world_size": world_size, **(knobs or {})})
        plan = TrialPlan(
            config=config,
            entrypoint="faulty.py:build",
            args={"fault": fault, **args},
            base_dir=str(HERE),
            limits=TrialLimits(**{"warmup_steps": 2, "max_steps": 20, "max_seconds": 40, "hang_seconds": 5,
                                  **(limits or {})}),
            trace=trace,
        )
        trial_dir = tmp_path / f"trial{next(counter)}"
        launcher: Launcher = warm_launcher if kind == "warm" else LocalLauncher()
        result = run_trial(plan, trial_dir, launcher, max_memory_mb=max_memory_mb, on_window=on_window)
        return result, trial_dir

    return run
