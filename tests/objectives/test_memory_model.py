"""The memory model: peak memory per rank predicted from the trials measured so far (no torch)."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.objectives import MemoryModel, MemoryPoint, ModelSize, memory_points
from autotune.objectives._memory_model import analytic_memory_mb, setting_of

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def cfg(batch: int, amp: str = "off", world: int = 1, ckpt: bool = False, sharding: str = "ddp",
        device: str = "cuda", workers: int = 0) -> dict[str, Any]:
    return {"batch_size": batch, "amp": amp, "world_size": world, "activation_checkpointing": ckpt,
            "sharding": sharding, "device": device, "num_workers": workers}


def gpu_memory(c: dict[str, Any]) -> float:
    """A GPU-like truth: 2 GB of weights and optimizer state, 30 MB of activations per sample (half with amp,
    a quarter with checkpointing), FSDP shards the weights."""
    static = 2000.0 / (c["world_size"] if c["sharding"] != "ddp" else 1)
    per_sample = 30.0 * (0.5 if c["amp"] != "off" else 1.0) * (0.25 if c["activation_checkpointing"] else 1.0)
    return static + per_sample * c["batch_size"]


def test_a_setting_with_two_batch_sizes_is_fitted_by_its_own_line() -> None:
    model = MemoryModel([MemoryPoint(cfg(b), gpu_memory(cfg(b))) for b in (8, 16, 32)])
    p = model.predict(cfg(64))
    assert p is not None and p.basis == "setting fit" and p.n_trials == 3
    assert p.mb == pytest.approx(gpu_memory(cfg(64)), rel=1e-6)
    assert 0 < p.error_mb < 0.2 * p.mb  # exact data: a small error, growing outside the measured batches
    inside = model.predict(cfg(24))
    assert inside is not None and inside.error_mb < p.error_mb


def test_a_setting_seen_at_one_batch_borrows_the_slope_of_the_others() -> None:
    points = [MemoryPoint(cfg(b), gpu_memory(cfg(b))) for b in (8, 32)]
    points.append(MemoryPoint(cfg(16, world=2), gpu_memory(cfg(16, world=2))))
    p = MemoryModel(points).predict(cfg(64, world=2))
    assert p is not None and p.basis == "shared slope"
    assert p.mb == pytest.approx(gpu_memory(cfg(64, world=2)), rel=1e-6)
    assert p.error_mb >= 0.5 * 30 * 48  # the borrowed slope is trusted to +-50%


def test_with_one_measurement_the_error_reaches_to_all_memory_growing_with_the_batch() -> None:
    model = MemoryModel([MemoryPoint(cfg(16), 2480.0)])
    p = model.predict(cfg(64))
    assert p is not None and p.mb == 2480.0
    assert p.mb + p.error_mb >= 2480.0 * 4  # proportional growth is inside the error
    assert not p.over(2500.0)  # never skipped on one measurement's guess


def test_a_setting_never_measured_is_predicted_across_settings() -> None:
    seen = [cfg(b, amp=a, ckpt=k) for b in (8, 32) for a in ("off", "bf16") for k in (False, True)]
    model = MemoryModel([MemoryPoint(c, gpu_memory(c)) for c in seen])
    unseen = cfg(16, amp="bf16", world=2)
    p = model.predict(unseen)
    assert p is not None and p.basis == "across settings"
    assert abs(p.mb - gpu_memory(unseen)) <= max(p.error_mb, 0.1 * gpu_memory(unseen))


def test_an_oom_says_at_least_its_peak_for_every_batch_no_smaller() -> None:
    points = [MemoryPoint(cfg(8), gpu_memory(cfg(8))), MemoryPoint(cfg(64), 8000.0, at_least=True)]
    model = MemoryModel(points)
    big = model.predict(cfg(128))
    assert big is not None and big.certain and big.mb >= 8000.0 and big.over(8000.0)
    small = model.predict(cfg(16))
    assert small is not None and not small.certain and not small.over(8000.0)
    assert model.predict(cfg(128, amp="bf16")) is not None  # another setting: not bounded by that oom
    assert not model.predict(cfg(128, amp="bf16")).certain  # type: ignore[union-attr]


def test_the_analytic_guess_before_any_trial_is_params_grads_and_adam_moments() -> None:
    size = ModelSize(params=125_000_000)  # fp32: 4 + 4 + 8 bytes a parameter
    assert analytic_memory_mb(size, cfg(8)) == pytest.approx(125e6 * 16 / 2**20)
    assert analytic_memory_mb(size, cfg(8, world=4, sharding="fsdp")) == pytest.approx(125e6 * 4 / 2**20)
    p = MemoryModel([], size=size).predict(cfg(8))
    assert p is not None and p.basis == "analytic" and p.n_trials == 0
    assert p.mb - p.error_mb == pytest.approx(analytic_memory_mb(size, cfg(8)))  # a lower bound
    assert p.over(1000.0) and not p.over(3000.0)
    assert "from no trial" in p.describe(1000.0)
    assert MemoryModel([]).predict(cfg(8)) is None  # nothing known: no prediction


def test_describe_says_predicted_budget_and_trials() -> None:
    model = MemoryModel([MemoryPoint(cfg(b), gpu_memory(cfg(b))) for b in (8, 16, 32, 64)])
    p = model.predict(cfg(256))
    assert p is not None and p.over(8000.0)
    assert p.describe(8000.0).startswith("predicted 9.68 GB > 8 GB budget, from 4 trials")


def test_the_setting_on_the_cpu_includes_the_dataloader_workers() -> None:
    assert setting_of(cfg(8, device="cpu", workers=2)) != setting_of(cfg(8, device="cpu", workers=0))
    assert setting_of(cfg(8, workers=2)) == setting_of(cfg(8, workers=0))  # on CUDA they are host memory


@pytest.mark.parametrize("name", ["landscape.json", "landscape_repeat.json"])
def test_on_a_recorded_landscape_five_trials_predict_within_ten_percent(name: str) -> None:
    rows = [r for r in json.loads((BENCHMARKS / name).read_text())["results"]["configs"] if r["peak_memory_mb"]]
    errors, covered = [], []
    for seed in range(10):
        order = rows[:]
        random.Random(seed).shuffle(order)
        model = MemoryModel(MemoryPoint(r["config"], r["peak_memory_mb"]) for r in order[:5])
        for r in order[5:]:
            p = model.predict(r["config"])
            assert p is not None
            errors.append(abs(p.mb - r["peak_memory_mb"]) / r["peak_memory_mb"])
            covered.append(abs(p.mb - r["peak_memory_mb"]) <= p.error_mb)
    assert statistics.median(errors) <= 0.10
    assert sum(covered) / len(covered) >= 0.8  # its own error is honest most of the time


def test_memory_points_reads_measured_pruned_and_oom_trials() -> None:
    def trial(outcome: str, peak: float | None, **extra: Any) -> optuna.trial.FrozenTrial:
        attrs = {"config": cfg(8), "outcome": outcome, "peak_memory_mb": peak, **extra}
        return optuna.trial.create_trial(value=1.0, user_attrs=attrs)

    points = memory_points([
        trial("complete", 100.0), trial("pruned", 90.0), trial("oom", 700.0), trial("oom", None),
        trial("crashed", 50.0), trial("oom", None, launched=False), trial("complete", None),
    ], max_memory_mb=500.0)
    assert [(p.peak_mb, p.at_least) for p in points] == [(100.0, False), (90.0, False), (700.0, True), (500.0, True)]
