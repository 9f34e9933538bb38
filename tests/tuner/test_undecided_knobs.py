"""A knob the objectives cannot see (lr_scaling under a throughput objective) does not split the confirmation:
one configuration at two lr_scalings is one configuration to a throughput study, re-measured once, not twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {"batch_size": {"choices": [16, 32, 64]}, "lr_scaling": {"choices": ["none", "sqrt"]}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def _landscape(config: TrialConfig, repeat: int) -> Measured:
    """Throughput by batch size alone: 64 fastest, then 32; the lr_scaling twins differ by 0.1% (noise). The
    loss is lowest at 64, and lower with sqrt than with none there."""
    centre = {16: 600.0, 32: 1000.0, 64: 1500.0}[config.batch_size]
    twin = 1.001 if config.lr_scaling == "sqrt" else 1.0
    loss = {16: 3.0, 32: 2.0, 64: 1.0}[config.batch_size] + (0.0 if config.lr_scaling == "sqrt" else 0.01)
    return Measured(centre * twin * (1.01 if repeat % 2 else 0.99), loss=loss)


def _confirmed(study_dir: Callable[..., StudyDir], objectives: list[dict[str, str]]) -> Counter[tuple[int, str]]:
    sd = study_dir("twins", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"}, pruner={"name": "none"},
                   objectives=objectives, confirm={"top_k": 2, "repeats": 1, "max_repeats": 1})
    summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(_landscape)).run(n_trials=7)
    assert summary.best_config is not None and summary.best_config.batch_size == 64
    assert summary.best_config.lr_scaling == "sqrt"
    return Counter((t.user_attrs["config"]["batch_size"], t.user_attrs["config"]["lr_scaling"])
                   for t in summary.study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "confirm")


def test_a_throughput_study_confirms_one_of_two_configurations_that_differ_only_in_lr_scaling(
    study_dir: Callable[..., StudyDir],
) -> None:
    runs = _confirmed(study_dir, [{"metric": "throughput"}])
    # the top two by throughput are 64 at sqrt and at none: one stands for both, and 32 takes the other place
    assert runs[(64, "sqrt")] == 1 and runs[(64, "none")] == 0
    assert sum(n for (batch, _), n in runs.items() if batch == 32) >= 1


def test_a_loss_objective_sees_lr_scaling_and_confirms_both(study_dir: Callable[..., StudyDir]) -> None:
    # by loss, 64 at sqrt and 64 at none are the top two, and they are two configurations to this study
    runs = _confirmed(study_dir, [{"metric": "loss", "direction": "minimize"}])
    assert runs[(64, "sqrt")] >= 1 and runs[(64, "none")] >= 1

