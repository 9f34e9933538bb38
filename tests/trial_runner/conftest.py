from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Launcher, LocalLauncher, TrialPlan, TrialResult, WarmLauncher, run_trial

HERE = Path(__file__).parent


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
        step_times: bool = False,
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
            limits=TrialLimits(**{"warmup": "fixed", "warmup_steps": 2, "max_steps": 20, "max_seconds": 40,
                                  "hang_seconds": 5, **(limits or {})}),
            trace=trace,
            step_times=step_times,
        )
        trial_dir = tmp_path / f"trial{next(counter)}"
        launcher: Launcher = warm_launcher if kind == "warm" else LocalLauncher()
        result = run_trial(plan, trial_dir, launcher, max_memory_mb=max_memory_mb, on_window=on_window)
        return result, trial_dir

    return run
