"""Failed and infeasible trials are data: the study runs to its budget, records why, and never recommends them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from .conftest import StudyDir, assert_nothing_left, budget_trials

WORLD_1_OR_2 = {
    "search_space": {"world_size": {"choices": [1, 2]}, "batch_size": {"choices": [16, 32]}},
    "sampler": {"name": "tpe", "seed": 0},
    "pruner": {"name": "none"},
    "confirm": {"top_k": 0},
}


@pytest.mark.slow
def test_crashing_configurations_are_recorded_and_the_study_goes_on(study_dir: Callable[..., StudyDir]) -> None:
    # rank 1 raises at its third step: every two-rank trial crashes, every one-rank trial completes. (The warm
    # launcher's trials; a torchrun trial's crash, and which rank it blames, is tests/trial_runner/test_launchers.py's
    # test_a_crashing_rank_is_named_and_ends_the_trial, for every launcher: the tuner reads the same result.)
    sd = study_dir("crashes", workload_args={"fault": "raise", "rank": 1, "at_step": 3}, **WORLD_1_OR_2)
    out = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    assert len(budget_trials(study)) == 3  # crashes count toward the budget
    assert all(t.state.is_finished() for t in trials)
    crashed = [t for t in trials if t.user_attrs["config"]["world_size"] == 2]
    fine = [t for t in trials if t.user_attrs["config"]["world_size"] == 1]
    assert crashed and fine, "the sampler should have tried both world sizes"
    for t in crashed:
        assert t.state == TrialState.FAIL
        assert t.user_attrs["outcome"] == "crashed"
        assert t.user_attrs["steps"] < 3 and t.user_attrs["throughput_samples_s"] is None
        recorded = json.loads((Path(t.user_attrs["trial_dir"]) / "errors" / "rank1.json").read_text())
        assert recorded["message"] == "injected failure on rank 1"  # it did fail there, for real
        # rank 1's error is the cause, not rank 0 being stopped by torchrun afterwards
        assert t.user_attrs["reason"] == "rank 1: RuntimeError: injected failure on rank 1"
        assert any("injected failure on rank 1" in line for line in t.user_attrs["error_lines"])
    for t in fine:
        assert t.state == TrialState.COMPLETE and t.user_attrs["outcome"] == "complete"
        assert t.user_attrs["error_lines"] == []

    best = sd.cli("best", "study.yaml", "--format", "json")
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["config"]["world_size"] == 1
    assert payload["trial"] in {t.number for t in fine}
    assert_nothing_left(study, sd)


@pytest.mark.slow
def test_a_configuration_over_the_memory_budget_is_infeasible_not_best(study_dir: Callable[..., StudyDir]) -> None:
    # rank 1 hoards 64 MB a step from its second step on: a two-rank trial goes far over 700 MB, a
    # one-rank trial (about 320 MB) stays under it
    sd = study_dir(
        "infeasible",
        workload_args={"fault": "memory", "rank": 1, "at_step": 2, "grow_mb": 64},
        trial={"max_steps": 60, "report_every": 4},
        constraints={"max_memory_mb": 700},
        **WORLD_1_OR_2,
    )
    out = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    over = [t for t in trials if t.user_attrs["config"]["world_size"] == 2]
    under = [t for t in trials if t.user_attrs["config"]["world_size"] == 1]
    assert over and under, "the sampler should have tried both world sizes"
    for t in over:
        assert t.state == TrialState.COMPLETE, (t.number, t.state, t.user_attrs["reason"])
        assert t.user_attrs["outcome"] == "oom", t.user_attrs["reason"]
        assert "over the budget of 700 MB" in t.user_attrs["reason"]
        assert t.constraints["memory"] > 0
        assert t.user_attrs["peak_memory_mb"] > 700
    for t in under:
        assert t.user_attrs["outcome"] == "complete" and t.constraints["memory"] <= 0
    feasible = {t.number for t in under}
    assert study.best_trial.number in feasible  # Optuna itself ignores the infeasible ones
    best = sd.cli("best", "study.yaml", "--format", "json")
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["trial"] in feasible
    assert_nothing_left(study, sd)


@pytest.mark.slow
def test_baseline_override_sets_the_first_trial(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir(
        "baseline", baseline={"batch_size": 16},
        search_space={"batch_size": {"choices": [16, 32, 64]}}, confirm={"top_k": 0},
    )
    out = sd.cli("run", "study.yaml", "--n-trials", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    assert len(study.trials) == 1
    trial = study.trials[0]
    assert trial.user_attrs["role"] == "baseline"
    assert trial.user_attrs["config"]["batch_size"] == 16 and trial.params == {"batch_size": 16}
    assert trial.user_attrs["config"]["base_batch_size"] == 32  # the workload's own base is unchanged
    ran = json.loads((sd.trial_dir(0) / "config.json").read_text())["config"]
    assert ran["batch_size"] == 16 and ran["global_batch"] == 16
    assert trial.user_attrs["outcome"] == "complete"
    assert trial.user_attrs["samples"] == 16 * trial.user_attrs["steps"]  # it really ran batch 16
    assert_nothing_left(study, sd)
