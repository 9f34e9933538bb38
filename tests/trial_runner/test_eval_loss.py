"""The held-out loss at a trial's end: every rank's share of eval_dataset, averaged over all samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import TrialPlan, WarmLauncher, run_trial

HERE = Path(__file__).parent


def _run(tmp_path: Path, launcher: WarmLauncher, world_size: int, eval_samples: int, batch: int = 4):  # type: ignore[no-untyped-def]
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=4, batch_size=batch, world_size=world_size)
    plan = TrialPlan(
        config=config, entrypoint="eval_workload.py:build", args={"eval_samples": eval_samples}, base_dir=str(HERE),
        limits=TrialLimits(warmup_steps=1, max_steps=6, max_seconds=40, hang_seconds=10),
    )
    return run_trial(plan, tmp_path / f"w{world_size}-{eval_samples}", launcher)


@pytest.mark.parametrize("world_size", [1, 2])
def test_eval_loss_is_the_mean_over_every_ranks_share(
    tmp_path: Path, warm_launcher: WarmLauncher, world_size: int
) -> None:
    result = _run(tmp_path, warm_launcher, world_size, eval_samples=10, batch=3)
    assert result.outcome.value == "complete", result.reason
    # values 0..9 split over the ranks, in batches of 3 (the last one short): their mean, exactly
    assert result.eval_loss == pytest.approx(4.5)
    assert result.metrics()["eval_loss"] == result.eval_loss


def test_no_eval_dataset_no_eval_loss(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, 1, eval_samples=0)
    assert result.outcome.value == "complete" and result.eval_loss is None
