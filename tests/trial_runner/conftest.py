from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import LocalLauncher, TrialPlan, TrialResult, run_trial

HERE = Path(__file__).parent


def leftovers(trial_dir: Path) -> list[str]:
    """Processes whose command line names the trial folder (torchrun, ranks, DataLoader workers)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(str(trial_dir) in part for part in proc.info["cmdline"] or ()):
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'])}")
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


@pytest.fixture
def run_faulty(tmp_path: Path) -> RunFaulty:
    """Run one real torchrun trial of tests/trial_runner/faulty.py and return (result, trial_dir)."""
    counter = iter(range(1000))

    def run(
        fault: str = "none",
        *,
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
        result = run_trial(plan, trial_dir, LocalLauncher(), max_memory_mb=max_memory_mb, on_window=on_window)
        return result, trial_dir

    return run
