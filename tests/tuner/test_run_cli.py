"""`autotune run` end to end on real trials, read back by `autotune best/status`, the `optuna`
CLI, and resumed by running the same command again."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests._processes import fd_targets

from .conftest import (
    CONFIG_KEYS,
    KNOBS,
    TRIAL_ATTRS,
    StudyDir,
    assert_nothing_left,
    budget_trials,
    finished_snapshot,
    make_study,
)

SEARCH = {
    "search_space": {
        "batch_size": {"choices": [16, 32, 64]},
        "num_workers": {"low": 0, "high": 1},
        "world_size": {"choices": [1, 2]},
    },
    "sampler": {"name": "tpe", "seed": 0},
    "pruner": {"name": "median"},
    # one re-run each (test_noisy_confirmation: more); the race is test_race.py's
    "confirm": {"method": "reruns", "top_k": 1, "repeats": 1, "max_repeats": 1},
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[StudyDir, subprocess.CompletedProcess[str]]:
    """One real `autotune run study.yaml --n-trials 4`, shared by the read-only tests of this module."""
    sd = make_study(tmp_path_factory.mktemp("e2e"), "e2e", **SEARCH)
    out = sd.autotune("run", "study.yaml", "--n-trials", "4", timeout=240)
    return sd, out


def _held(path: Path) -> list[str]:
    """This process's open file descriptors on ``path`` (or its journal)."""
    return [target for target in fd_targets(os.getpid()) if target.startswith(str(path))]


def roles(study: optuna.Study) -> list[str]:
    return [t.user_attrs.get("role") for t in study.get_trials(deepcopy=False)]


@pytest.mark.slow
def test_run_searches_confirms_and_prints_the_choice(ran: tuple[StudyDir, subprocess.CompletedProcess[str]]) -> None:
    sd, out = ran
    assert out.returncode == 0, out.stdout + out.stderr
    assert "autotune: chosen configuration" in out.stdout
    assert "speedup:" in out.stdout or "the default configuration is the best measured" in out.stdout
    assert "ExperimentalWarning" not in out.stderr, out.stderr  # no Optuna notices in a user's terminal

    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    assert all(t.state.is_finished() for t in trials), [t.state for t in trials]
    # exactly the budget of baseline + search trials, then the confirmation runs
    assert roles(study).count("baseline") == 1
    assert roles(study).count("search") == 3
    assert len(budget_trials(study)) == 4
    assert trials[0].user_attrs["role"] == "baseline"
    confirms = [t for t in trials if t.user_attrs["role"] == "confirm"]
    assert confirms and all(t.number > 3 for t in confirms)

    # trial 0 is the workload's default configuration
    base = trials[0].user_attrs["config"]
    assert (base["num_workers"], base["world_size"], base["amp"], base["grad_accum"]) == (0, 1, "off", 1)
    assert base["batch_size"] == base["base_batch_size"] == 32  # faulty.py's base batch
    assert base["activation_checkpointing"] is False and base["bucket_cap_mb"] == 25

    for t in trials:
        attrs = t.user_attrs
        assert set(attrs) >= TRIAL_ATTRS, (t.number, TRIAL_ATTRS - set(attrs))
        assert set(attrs["config"]) == CONFIG_KEYS
        assert attrs["worker"]["host"] and attrs["worker"]["pid"] > 0
        assert Path(attrs["trial_dir"]).parent == sd.runs
        assert (Path(attrs["trial_dir"]) / "config.json").exists()
        if attrs["outcome"] in ("complete", "pruned"):
            assert attrs["throughput_samples_s"] > 0 and attrs["peak_memory_mb"] > 0
            assert attrs["windows"] and all(len(w) == 4 for w in attrs["windows"])
            assert attrs["windows"][-1][0] == attrs["steps"]
        if attrs["outcome"] == "complete":
            assert t.state == TrialState.COMPLETE
            assert t.values == [pytest.approx(attrs["throughput_samples_s"])]
            assert set(t.constraints) == {"memory", "diverged"}
        # the params Optuna holds are the knobs the trial ran with
        assert all(attrs["config"][k] == v for k, v in t.params.items())
        assert set(t.params) <= KNOBS
    for t in confirms:
        assert trials[t.user_attrs["confirms"]].user_attrs["config_key"] == t.user_attrs["config_key"]

    record = study.user_attrs["autotune_confirmation"]
    assert record["metric"] == "throughput_samples_s"
    groups = {g["config_key"]: g for g in record["groups"]}
    best = groups[record["best_config_key"]]
    assert record["best_trial"] in best["trials"]
    measured = [t.user_attrs["throughput_samples_s"] for t in trials if t.number in best["trials"]]
    assert best["median"] == pytest.approx(statistics.median(measured))
    # a group holds every complete, feasible measurement of its configuration, less the baseline's first
    # trial when it read far off its re-runs (left out, and the summary says so)
    left_out = record["left_out"]
    assert set(left_out) <= {0}
    same = [t.number for t in trials if t.user_attrs["config_key"] == best["config_key"]
            and t.user_attrs["outcome"] == "complete" and t.number not in left_out]
    assert sorted(best["trials"]) == sorted(same)
    assert ("(the baseline's first run) read more than" in out.stdout) == bool(left_out)
    # every confirmed configuration was re-run once (repeats: 1): the top one and the baseline
    assert sorted(t.user_attrs["config_key"] for t in confirms) == sorted(groups)
    assert trials[0].user_attrs["config_key"] in groups
    assert record["baseline"]["config_key"] == trials[0].user_attrs["config_key"]
    assert record["speedup"] == pytest.approx(best["median"] / record["baseline"]["median"])
    if record["default_is_best"]:  # nothing beat the baseline by more than the spread: it is the choice
        assert record["best_config_key"] == record["baseline"]["config_key"] and record["speedup"] == 1.0
        assert "the default configuration is the best measured" in out.stdout
    else:
        assert f"speedup: {record['speedup']:.2f}x" in out.stdout
        assert record["speedup"] > 1.0

    assert_nothing_left(study, sd)


def _optuna_cli() -> str:
    found = shutil.which("optuna", path=str(Path(sys.executable).parent)) or shutil.which("optuna")
    assert found, "the optuna console script is not installed"
    return found


@pytest.mark.slow
def test_the_optuna_cli_reads_the_stored_study(ran: tuple[StudyDir, subprocess.CompletedProcess[str]]) -> None:
    sd, out = ran
    assert out.returncode == 0, out.stderr
    study = sd.load()
    common = ["--storage", sd.url, "--study-name", sd.name, "-f", "json"]
    best = subprocess.run([_optuna_cli(), "best-trial", *common], capture_output=True, text=True, timeout=60,
                          check=False)
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert payload["number"] == study.best_trial.number
    assert payload["params"] == study.best_trial.params
    assert payload["state"] == "COMPLETE"
    assert payload["user_attrs"]["config_key"] == study.best_trial.user_attrs["config_key"]

    listed = subprocess.run([_optuna_cli(), "trials", *common], capture_output=True, text=True, timeout=60,
                            check=False)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["number"] for r in rows] == [t.number for t in study.trials]
    assert [r["user_attrs"]["role"] for r in rows] == roles(study)


@pytest.mark.slow
def test_best_and_status_read_the_study(ran: tuple[StudyDir, subprocess.CompletedProcess[str]]) -> None:
    sd, out = ran
    assert out.returncode == 0, out.stderr
    held = _held(sd.db)  # (the test's own reads of the study may hold some)
    as_json = sd.cli("best", "study.yaml", "--format", "json")
    as_yaml = sd.cli("best", "study.yaml", "--format", "yaml")
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_json.stderr + as_yaml.stderr
    assert len(_held(sd.db)) <= len(held), "a command left the study's database open in its process"
    payload = json.loads(as_json.stdout)
    assert payload == yaml.safe_load(as_yaml.stdout)
    study = sd.load()
    record = study.user_attrs["autotune_confirmation"]
    assert payload["trial"] == record["best_trial"] and payload["confirmed"] is True
    chosen = study.trials[record["best_trial"]].user_attrs["config"]
    assert payload["config"] == {k: chosen[k] for k in payload["config"]}
    assert set(payload["config"]) == KNOBS
    assert payload["derived"]["global_batch"] == chosen["global_batch"]

    status = sd.cli("status", "study.yaml")
    assert status.returncode == 0, status.stderr
    trials = study.get_trials(deepcopy=False)
    assert f"{len(trials)} trials stored" in status.stdout
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.user_attrs["outcome"]] = counts.get(t.user_attrs["outcome"], 0) + 1
    for outcome, n in counts.items():
        assert f"{outcome}: {n}" in status.stdout, status.stdout
    assert f"best so far: trial #{record['best_trial']}" in status.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", [["best", "study.yaml", "--format", "json"], ["status", "study.yaml"]])
def test_best_and_status_of_a_study_not_run_yet(tmp_path: Path, command: list[str]) -> None:
    sd = make_study(tmp_path / "fresh", "fresh", **SEARCH)
    out = sd.cli(*command)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "no study named 'fresh'" in out.stderr and "autotune run study.yaml" in out.stderr
    assert not sd.db.exists(), "a read-only command created the database"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_running_again_resumes_the_study(
    ran: tuple[StudyDir, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    first, out = ran
    assert out.returncode == 0, out.stderr
    sd = first.copy_to(tmp_path / "resumed")
    before = finished_snapshot(sd.load())

    more = sd.cli("run", "study.yaml", "--n-trials", "6")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "resuming study" in more.stdout and "4 of 6 trials done" in more.stdout
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    after = finished_snapshot(study)
    assert {n: after[n] for n in before} == before  # finished trials untouched
    assert [t.number for t in trials] == list(range(len(trials)))
    new = [t for t in trials if t.number not in before]
    assert new and min(t.number for t in new) == max(before) + 1  # numbers continue
    assert roles(study).count("baseline") == 1  # the baseline is not re-run
    assert [t.user_attrs["role"] for t in new].count("search") == 2
    assert len(budget_trials(study)) == 6
    assert all(t.state.is_finished() for t in trials)

    again = sd.cli("run", "study.yaml", "--n-trials", "6")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "6 of 6 trials done" in again.stdout
    study = sd.load()
    final = finished_snapshot(study)
    assert {n: final[n] for n in after} == after
    added = [t.user_attrs["role"] for t in study.get_trials(deepcopy=False) if t.number not in after]
    assert "search" not in added and "baseline" not in added, added  # at most more confirmation runs
    assert_nothing_left(study, sd)
