"""A configuration pruned on one unlucky reading comes back: the loop gives the nearest pruned configuration a
second look, its pair of readings feeds the pruner's measured margin, and the GP's noise floor follows the
study's repeats. Through the real Tuner on a replayed landscape whose truth is known."""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna
import pytest
from optuna.samplers import GPSampler

from autotune.objectives import choose, reading_noise
from autotune.samplers import noise_floor
from autotune.samplers._gp_view import DEFAULT_MINIMUM_NOISE_VAR, MAX_NOISE_FLOOR
from autotune.search_space import TrialConfig
from autotune.tuner import SECOND_LOOK, Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 1}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}
BEST = {"batch_size": 64, "num_workers": 1}


def unlucky_once(config: TrialConfig, repeat: int) -> Measured:
    """The baseline's first reading is lucky (1.3x); the true best (1.2x the baseline) reads 0.9x of it the first
    time; everything else is clearly slower (0.75x)."""
    c = config.model_dump()
    if {k: c[k] for k in BEST} == BEST:
        return Measured(1200.0 * (0.9 if repeat == 0 else 1.0))
    if c["batch_size"] == 32 and c["num_workers"] == 0:  # the workload's default: the baseline
        return Measured(1000.0 * (1.3 if repeat == 0 else 1.0))
    return Measured(750.0)


def test_the_true_best_pruned_on_one_unlucky_reading_gets_a_second_look_and_is_chosen(
    study_dir: Callable[..., StudyDir],
) -> None:
    # the default sampler never proposes a configuration twice: each of the 6 once, and the second look
    sd = study_dir("second-look", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": 0},
                   budget={"n_trials": 7}, pruner={"name": "best", "second_looks": 1})
    lines: list[str] = []
    # unpaired (no anchor through the search): an anchor would read the baseline again at 1,000, and the true best
    # would not be pruned against the lucky 1,300 at all (tests/tuner/test_paired_search.py)
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(unlucky_once, paired=False))
    tuner.observer.note = lines.append  # type: ignore[method-assign]
    summary = tuner.run()
    trials = summary.study.get_trials(deepcopy=False)
    baseline = trials[0]
    assert baseline.user_attrs["config"]["batch_size"] == 32 and baseline.user_attrs["config"]["num_workers"] == 0
    first = [t for t in trials if {k: t.user_attrs["config"][k] for k in BEST} == BEST
             and t.user_attrs.get("role") == "search"]
    assert first and first[0].state == optuna.trial.TrialState.PRUNED  # 1080 < 0.9 x 1300: pruned on its reading
    looks = [t for t in trials if SECOND_LOOK in t.user_attrs]
    assert [t.user_attrs[SECOND_LOOK] for t in looks] == [first[0].number]  # once, for that configuration only
    assert looks[0].user_attrs["config_key"] == first[0].user_attrs["config_key"]
    assert looks[0].state == optuna.trial.TrialState.COMPLETE and looks[0].user_attrs["role"] == "search"
    assert sum(t.user_attrs.get("role") in ("baseline", "search") for t in trials) == 7  # it counts to the budget
    assert any(f"trial #{first[0].number} was pruned" in line and "second look" in line for line in lines)
    noise = reading_noise(trials, "throughput_samples_s")  # the pair is a measurement of the study's noise
    assert noise is not None and noise.df >= 1
    choice = choose(summary.study)
    assert choice.best is not None and {k: choice.best.config[k] for k in BEST} == BEST


def test_no_second_look_at_the_defaults(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("no-second-look", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": 0},
                   budget={"n_trials": 7})
    summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(unlucky_once)).run()
    assert not any(SECOND_LOOK in t.user_attrs for t in summary.study.get_trials(deepcopy=False))


def _fitted(values: dict[tuple[int, int], list[float]]) -> list[optuna.trial.FrozenTrial]:
    return [optuna.trial.create_trial(params={"a": a, "b": b}, distributions={
        "a": optuna.distributions.IntDistribution(0, 9), "b": optuna.distributions.IntDistribution(0, 9)}, value=v)
        for (a, b), vs in values.items() for v in vs]


def test_the_gp_fits_no_less_noise_than_the_study_measured() -> None:
    assert GPSampler()._minimum_noise == DEFAULT_MINIMUM_NOISE_VAR  # the Optuna attribute the floor is set through
    spread = {(0, 0): [1000.0], (1, 0): [1500.0], (2, 0): [500.0], (3, 0): [1200.0]}
    assert noise_floor(_fitted(spread)) == DEFAULT_MINIMUM_NOISE_VAR  # nothing read twice: Optuna's own floor
    repeats = {**spread, (0, 0): [1000.0, 900.0], (1, 0): [1500.0, 1400.0]}
    fitted = _fitted(repeats)
    values = [t.values[0] for t in fitted]
    sd = math.sqrt(((math.log(1000 / 900) / 2) ** 2 * 2 + (math.log(1500 / 1400) / 2) ** 2 * 2) / 2)
    expected = (sd * sum(values) / len(values) / float(__import__("numpy").std(values))) ** 2
    assert noise_floor(fitted) == pytest.approx(expected)
    wild = _fitted({(0, 0): [1000.0, 500.0], (1, 0): [1010.0, 2000.0], (2, 0): [990.0]})
    assert noise_floor(wild) == MAX_NOISE_FLOOR


def test_the_tuner_takes_an_optuna_sampler_and_pruner_instead_of_the_study_files(
    study_dir: Callable[..., StudyDir],
) -> None:
    # a benchmark's peers (random, grid, Optuna's TPE) run through the real loop: baseline, budget and choice stay
    sd = study_dir("given-decisions", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": 0},
                   budget={"n_trials": 5}, confirm={"top_k": 0})
    sampler, pruner = optuna.samplers.RandomSampler(seed=3), optuna.pruners.NopPruner()
    asked: list[int] = []
    original = sampler.sample_independent

    def counted(*args: object, **kwargs: object) -> object:
        asked.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    sampler.sample_independent = counted  # type: ignore[method-assign]
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(unlucky_once),
                  sampler=sampler, pruner=pruner)
    summary = tuner.run()
    assert summary.study.sampler is sampler and summary.study.pruner is pruner
    trials = summary.study.get_trials(deepcopy=False)
    assert trials[0].user_attrs["role"] == "baseline" and len(trials) == 5
    assert asked, "the given sampler proposed no search trial"
    # no pruner: the true best's unlucky first reading (0.9 x 1200 < 1300) is not pruned
    assert not [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
