"""The wrapper every study-file sampler runs in (autotune/samplers/_unrepeated.py): it lists a small space's
configurations (conditional knobs as the space suggests them), and steers a proposal that would repeat a measured
configuration, on a small space and on one too large to list. The whole study is tests/tuner/test_no_repeats.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial

from autotune.samplers import Unrepeated, space_points
from autotune.search_space import SearchSpace, study_space
from autotune.spec import parse_spec


def _space(tmp_path: Path, search_space: dict[str, Any], **extra: Any) -> SearchSpace:
    document = {"name": "s", "workload": {"entrypoint": "autotune.workloads.mlp:build"}, "search_space": search_space,
                **extra}
    return study_space(parse_spec(document, source="s.yaml", base_dir=tmp_path))


class Stubborn(BaseSampler):
    """A sampler that proposes the same configuration every time: the smallest value of every knob, jointly
    (``joint``) or one knob at a time."""

    def __init__(self, joint: bool) -> None:
        self.joint = joint

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return optuna.search_space.intersection_search_space(study.get_trials(deepcopy=False)) if self.joint else {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {name: _first(dist) for name, dist in search_space.items()}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return _first(param_distribution)


def _first(dist: BaseDistribution) -> Any:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return dist.choices[0]
    return dist.low  # type: ignore[attr-defined]


def test_a_small_space_is_listed_as_it_is_suggested(tmp_path: Path) -> None:
    space = _space(tmp_path, {"batch_size": {"choices": [16, 32]}, "num_workers": {"low": 0, "high": 2},
                              "prefetch_factor": {"choices": [2, 4]}})
    points = space_points(space)
    assert points is not None
    # prefetch_factor only where num_workers > 0: 2 x (1 + 2 x 2) configurations, not 2 x 3 x 2
    assert len(points) == 10 and len({json.dumps(p, sort_keys=True) for p in points}) == 10
    assert {"batch_size": 16, "num_workers": 0} in points and {"batch_size": 16, "num_workers": 1,
                                                              "prefetch_factor": 4} in points
    assert space_points(_space(tmp_path, {"batch_size": {"low": 1, "high": 100_000}})) is None  # too many
    continuous = _space(tmp_path, {"batch_size": {"choices": [16, 32]}},
                        hyperparameters={"base_lr": {"low": 1e-4, "high": 1e-2}})
    assert space_points(continuous) is None


@pytest.mark.parametrize("joint", [True, False])
def test_a_stubborn_sampler_covers_a_small_space_before_any_repeat(tmp_path: Path, joint: bool) -> None:
    space = _space(tmp_path, {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 1},
                              "prefetch_factor": {"choices": [2, 4]}})
    points = space_points(space)
    assert points is not None and len(points) == 9
    sampler = Unrepeated(Stubborn(joint), space, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seen = []
    for _ in range(len(points)):
        assert not sampler.exhausted(study)
        trial = study.ask()
        space.suggest(trial)
        seen.append(json.dumps(trial.params, sort_keys=True))
        study.tell(trial, 1.0)
    assert len(set(seen)) == len(points), seen
    assert sampler.exhausted(study)


def test_a_stubborn_sampler_repeats_nothing_on_a_space_too_large_to_list(tmp_path: Path) -> None:
    space = _space(tmp_path, {"batch_size": {"low": 1, "high": 100_000}, "num_workers": {"low": 0, "high": 1}})
    for joint in (True, False):
        sampler = Unrepeated(Stubborn(joint), space, seed=0)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        seen = []
        for _ in range(12):
            trial = study.ask()
            space.suggest(trial)
            seen.append(json.dumps(trial.params, sort_keys=True))
            study.tell(trial, 1.0)
        assert len(set(seen)) == len(seen), seen


def test_pruned_running_and_recurring_failures_count_as_measured_an_interrupted_one_does_not(tmp_path: Path) -> None:
    space = _space(tmp_path, {"batch_size": {"choices": [16, 32, 64, 128, 256]}})
    sampler = Unrepeated(Stubborn(False), space, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for batch, state, outcome in ((16, "PRUNED", "pruned"), (32, "FAIL", "crashed"), (64, "FAIL", "interrupted"),
                                  (128, "RUNNING", None)):
        study.enqueue_trial({"batch_size": batch})
        trial = study.ask()
        space.suggest(trial)
        if outcome:
            trial.set_user_attr("outcome", outcome)
        if state == "PRUNED":
            trial.report(1.0, 1)
        if state != "RUNNING":
            study.tell(trial, state=getattr(optuna.trial.TrialState, state))
    assert not sampler.exhausted(study)  # 64 (interrupted: it is retried) and 256 are not measured
    trial = study.ask()
    space.suggest(trial)
    assert trial.params["batch_size"] == 64  # the stubborn 16 moved to the nearest value not measured
