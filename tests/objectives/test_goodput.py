"""goodput: samples/s x statistical efficiency at the trial's global batch, from the noise scale measured in it."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.errors import StudyFileError
from autotune.objectives import NOT_SCORED, metric_value, running_value
from autotune.scale import efficiency
from autotune.search_space import study_space
from autotune.spec import ObjectiveSpec, parse_spec
from autotune.trial_result import GradientNoise, NoiseScale, Outcome, TrialResult, Window
from autotune.tuner import Tuner
from autotune.tuner._telling import tell
from autotune.workload_check import load_spec
from tests._cli import autotune

WORKLOAD = Path(__file__).parents[1] / "trial_runner" / "noise_workload.py"


def _result(speed: float, batch: int, noise: float | None, base: int = 16) -> TrialResult:
    scale = None if noise is None else NoiseScale(value=noise, low=noise / 2, high=noise * 2, batch_small=batch // 2,
                                                  batch_big=batch, steps=10, windows=5, source="ddp", interval="")
    return TrialResult(Outcome.COMPLETE, throughput_samples_s=speed, global_batch=batch, base_batch_size=base,
                       gradient_noise_scale=scale)


def test_goodput_is_throughput_times_the_efficiency_of_the_trials_own_noise_scale() -> None:
    goodput = ObjectiveSpec(metric="goodput")
    assert goodput.direction == "maximize" and goodput.key == "goodput_samples_s"
    assert metric_value(_result(1000.0, 512, 8.0), goodput) == pytest.approx(1000.0 * efficiency(512, 8.0, 16))
    assert metric_value(_result(1000.0, 512, 8.0), goodput) == pytest.approx(1000.0 * 24 / 520)
    # the base batch needs no noise scale (its efficiency is 1); another batch without one: the study's, else none
    assert metric_value(_result(700.0, 16, None), goodput) == pytest.approx(700.0)
    assert metric_value(_result(700.0, 64, None), goodput) is None
    assert metric_value(_result(700.0, 64, None), goodput, study_noise=16.0) == pytest.approx(700.0 * 32 / 80)


STUDY = """\
name: {name}
workload: {{entrypoint: noise_workload.py:build, args: {{noise_scale: 1.0, latency_s: 0.005, cost: 1024}}}}
search_space:
  batch_size: {{choices: [8, 256]}}
  world_size: {world_size}
  lr_scaling: none
trial: {{warmup: fixed, warmup_steps: 2, max_steps: 20, max_seconds: 120, report_every: 3}}
objectives: [{{metric: {metric}}}]
sampler: {{name: grid, seed: 0}}
pruner: {{name: none}}
budget: {{n_trials: 3}}
confirm: {{top_k: 0}}
"""


def _study(folder: Path, name: str, metric: str, world_size: object = 2) -> Path:
    (folder / "noise_workload.py").write_text(WORKLOAD.read_text())
    path = folder / f"{name}.yaml"
    path.write_text(STUDY.format(name=name, metric=metric, world_size=world_size))
    return path


@pytest.mark.slow
def test_goodput_ranks_a_batch_far_past_the_noise_scale_lower_than_throughput_does(tmp_path: Path) -> None:
    fastest = Tuner(load_spec(_study(tmp_path, "fastest", "throughput"))).run()
    soonest_path = _study(tmp_path, "soonest", "goodput")
    soonest = Tuner(load_spec(soonest_path)).run()
    assert fastest.best_config is not None and soonest.best_config is not None
    assert fastest.best_config.global_batch == 512  # 512 samples a step run faster than 16
    # but B_noise ~1: each of them is worth ~1/30 of one at 16 (the baseline's one rank or two ranks of 8)
    assert soonest.best_config.global_batch == 16
    for t in soonest.study.get_trials():
        a = t.user_attrs
        assert a["outcome"] == "complete", a["reason"]
        batch = a["config"]["global_batch"]
        e = efficiency(batch, a["goodput_noise_scale"], 16) if batch != 16 else 1.0
        assert t.values[0] == pytest.approx(a["throughput_samples_s"] * e) == pytest.approx(a["goodput_samples_s"])
        assert a["statistical_efficiency"] == pytest.approx(e, rel=1e-5)
        if a["config"]["world_size"] == 2:  # per-rank gradients against the all-reduced ones
            noise = a["gradient_noise_scale"]
            assert noise["source"] == "ddp" and (noise["batch_small"], noise["batch_big"]) == (batch // 2, batch)
            assert noise["low"] <= noise["value"] <= noise["high"] and 0.5 < noise["value"] < 2.0  # true: 1.01
        else:  # the baseline: one rank, no accumulation, at the base batch: efficiency 1, no noise scale needed
            assert a["gradient_noise_scale"] is None and a["goodput_noise_from"] == "base batch"
    best = json.loads(autotune("best", str(soonest_path), "--format", "json").stdout)
    # Either configuration at the base batch may be the faster here (one rank of 16 or two of 8: a timing).
    assert best["derived"]["global_batch"] == 16 and best["statistical_efficiency"] == 1.0
    if best["config"]["world_size"] == 2:
        assert best["gradient_noise_scale"]["source"] == "ddp"
    else:
        assert best["gradient_noise_scale"] is None and best["goodput_noise_from"] == "base batch"
    assert "goodput_samples_s_median" in best["metrics"]


def test_validate_refuses_goodput_where_no_configuration_can_measure_a_noise_scale(tmp_path: Path) -> None:
    path = _study(tmp_path, "one", "goodput", world_size=1)
    with pytest.raises(StudyFileError, match=r"objectives: goodput needs the gradient noise scale.*grad_accum"):
        study_space(load_spec(path))
    result = autotune("validate", str(path))
    assert result.exit_code == 2 and "search world_size: {choices: [1, 2]}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    study_space(load_spec(_study(tmp_path, "accum", "goodput", world_size="1\n  grad_accum: {choices: [1, 2]}")))


def _window(step: int, speed: float, sqr_small: float | None = None) -> Window:
    noise = None if sqr_small is None else GradientNoise(batch_small=8, batch_big=16, steps=4, sqr_small=sqr_small,
                                                         sqr_big=6.0)
    return Window(step=step, samples=step * 16, elapsed_s=1.0, window_throughput_samples_s=speed,
                  throughput_samples_s=speed, loss=1.0, peak_memory_mb=1.0, time_to_first_step_s=1.0,
                  gradient_noise=noise)


def test_each_window_reports_goodput_from_the_noise_scale_so_far() -> None:
    goodput = ObjectiveSpec(metric="goodput")
    config = {"global_batch": 16, "base_batch_size": 4}
    running = running_value(goodput, config=config, study_noise=None)
    assert running(_window(4, 100.0)) == pytest.approx(100.0)  # no noise scale yet: efficiency 1, never pruned on it
    # |g_8|^2 10, |g_16|^2 6: |G|^2 2, tr(Sigma) 64, B_noise 32
    assert running(_window(8, 100.0, 10.0)) == pytest.approx(100.0 * efficiency(16, 32.0, 4))
    study_only = running_value(goodput, config=config, study_noise=8.0)
    assert study_only(_window(4, 100.0)) == pytest.approx(100.0 * efficiency(16, 8.0, 4))


def test_a_trial_with_no_noise_scale_to_use_is_told_failed_with_why() -> None:
    spec = parse_spec({"name": "g", "workload": {"entrypoint": "a:b"}, "objectives": [{"metric": "goodput"}]})
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    tell(spec, study, trial, _result(700.0, 64, None), attach=lambda *_: None)
    stored = study.get_trials()[0]
    assert stored.state is TrialState.FAIL and stored.user_attrs["goodput_samples_s"] is None
    assert stored.user_attrs["reason"].endswith(NOT_SCORED) and NOT_SCORED.startswith("goodput not scored: ")
    trial = study.ask()  # a trial with its own noise scale is scored, and then lends it to the others
    tell(spec, study, trial, _result(700.0, 64, 16.0), attach=lambda *_: None)
    trial = study.ask()
    tell(spec, study, trial, _result(700.0, 64, None), attach=lambda *_: None)
    last = study.get_trials()[2]
    assert last.state is TrialState.COMPLETE and last.user_attrs["goodput_noise_from"] == "study"
    assert last.values[0] == pytest.approx(700.0 * efficiency(64, 16.0, 16))
