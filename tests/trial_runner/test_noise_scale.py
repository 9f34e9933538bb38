"""The gradient noise scale measured in real trials: per-rank gradients against the all-reduced one under DDP,
micro-batches against the accumulated gradient at one rank, nothing at one rank without accumulation."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autotune.cli._trial_view import print_trial_result
from autotune.objectives import GOODPUT, metric_value, result_goodput
from autotune.search_space import TrialConfig
from autotune.spec import ObjectiveSpec, TrialLimits
from autotune.trial_runner import TrialPlan, TrialResult, WarmLauncher, run_trial
from tests.trial_runner.noise_workload import true_noise_scale

HERE = Path(__file__).parent
TRUE = true_noise_scale(32.0)


def _run(tmp_path: Path, launcher: WarmLauncher, name: str, max_steps: int = 40, **knobs: Any) -> TrialResult:
    config = TrialConfig.create(**{"base_lr": 1e-3, "base_batch_size": 16, "batch_size": 8, "lr_scaling": "none",
                                   **knobs})
    plan = TrialPlan(
        config=config, entrypoint="noise_workload.py:build", args=dict(knobs.pop("args", {})), base_dir=str(HERE),
        limits=TrialLimits(warmup="fixed", warmup_steps=2, max_steps=max_steps, max_seconds=120, hang_seconds=30,
                           report_every=4),
    )
    return run_trial(plan, tmp_path / name, launcher)


@pytest.mark.slow
def test_two_rank_ddp_trial_stores_the_known_noise_scale_with_an_interval(
    tmp_path: Path, warm_launcher: WarmLauncher
) -> None:
    result = _run(tmp_path, warm_launcher, "ddp", world_size=2)
    assert result.outcome.value == "complete", result.reason
    noise = result.gradient_noise_scale
    assert noise is not None and noise.source == "ddp"
    assert (noise.batch_small, noise.batch_big) == (8, 16) and noise.windows == 10 and noise.steps == 40 - 2 * 1
    assert noise.value is not None and noise.low is not None and noise.high is not None
    assert 0 < noise.low <= noise.value <= noise.high
    assert noise.low <= TRUE <= noise.high and TRUE / 2 < noise.value < TRUE * 2
    # every measured window record carries the ranks' norms; trial --json's payload (result.json) holds the scale
    windows = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert all(w["gradient_noise"]["batch_small"] == 8 and w["gradient_noise"]["steps"] > 0 for w in windows)
    stored = json.loads((tmp_path / "ddp" / "result.json").read_text())["gradient_noise_scale"]
    assert stored["value"] == noise.value and stored["interval"].startswith("95% jackknife over windows")
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=16, batch_size=8, world_size=2, lr_scaling="none")
    row = f"gradient noise scale {noise.value:.3g} samples ({noise.low:.3g}-{noise.high:.3g}; ddp: batch 8 against 16)"
    assert row in _printed(config, result)


@pytest.mark.slow
def test_one_rank_with_grad_accum_measures_it_from_its_micro_batches(
    tmp_path: Path, warm_launcher: WarmLauncher
) -> None:
    result = _run(tmp_path, warm_launcher, "accum", grad_accum=4)
    assert result.outcome.value == "complete", result.reason
    noise = result.gradient_noise_scale
    assert noise is not None and noise.source == "grad_accum" and (noise.batch_small, noise.batch_big) == (8, 32)
    assert noise.value is not None and noise.low is not None and noise.high is not None
    assert noise.low <= TRUE <= noise.high


def test_one_rank_without_accumulation_measures_none(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, "one", max_steps=6)
    assert result.outcome.value == "complete", result.reason
    assert result.gradient_noise_scale is None
    assert all(w.gradient_noise is None for w in result.windows)
    # a trial at another batch than the base one, with no noise scale of its own or of a study: not scored
    assert result.global_batch == 8 and result.base_batch_size == 16
    assert metric_value(result, ObjectiveSpec(metric="goodput")) is None
    scored = result_goodput(result, study_noise=4.0)  # the study's noise scale stands in
    assert scored is not None and scored.source == "study"
    assert scored.value == pytest.approx(result.throughput_samples_s * (4 + 16) / (4 + 8))
    assert GOODPUT == "goodput_samples_s"
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=16, batch_size=8, lr_scaling="none")
    assert "not measured at one rank without grad_accum" in _printed(config, result)
    fsdp = TrialConfig.create(base_lr=1e-3, base_batch_size=16, batch_size=8, world_size=2, sharding="fsdp")
    assert "not measured under fsdp" in _printed(fsdp, result)


def _printed(config: TrialConfig, result: TrialResult) -> str:
    """What `autotune trial` prints of the trial."""
    out = io.StringIO()
    print_trial_result(Console(file=out, width=200), config, result)
    return " ".join(out.getvalue().split())
