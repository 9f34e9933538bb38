"""Warm start (issue 19.1): a new study queues the best configurations of the closest earlier study in its
storage right after its baseline, says from where in one line, and never silently uses another model.

Real SQLite storage and the real tuner; the loop's trials are replayed from a landscape (the replay seam)
except in the end-to-end test, which runs `autotune run` twice on a tiny real workload.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.objectives import choose, config_key
from autotune.search_space import TrialConfig, study_space
from autotune.spec import StudySpec
from autotune.tuner import (
    FINGERPRINT_ATTR,
    WARM_START_ATTR,
    Measured,
    NoLaunch,
    Observer,
    Tuner,
    compare_fingerprints,
    replay_runner,
    study_fingerprint,
)
from autotune.tuner._warm_start import project
from autotune.workload_check import load_spec
from tests.tuner.conftest import StudyDir, make_study

SPACE = {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 2}}
SECTIONS = {"search_space": SPACE, "sampler": {"name": "random", "seed": 1}, "pruner": {"name": "none"},
            "confirm": {"top_k": 0}}


def landscape(config: TrialConfig, _seen: int) -> Measured:
    """Workers matter most, then larger batches: the best is batch 64 with 2 workers; the baseline (64, no
    workers) is beaten by every configuration with a worker."""
    return Measured(throughput_samples_s=config.batch_size + 1000.0 * config.num_workers)


class Lines(Observer):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warm_started(self, line: str) -> None:
        self.lines.append(line)


def spec_of(sd: StudyDir, name: str, *sets: str) -> StudySpec:
    """The study file under another name (and --set overrides), on the first study's storage."""
    return load_spec(sd.file, overrides=[f"name={name}", f"storage={sd.url}", *sets])


def replay(spec: StudySpec, n_trials: int) -> tuple[optuna.Study, list[str]]:
    lines = Lines()
    Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape), observer=lines).run(n_trials=n_trials)
    return optuna.load_study(study_name=spec.name, storage=spec.storage_url()), lines.lines


def warm_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if "warm_start" in t.user_attrs]


@pytest.fixture
def earlier(tmp_path: Path) -> tuple[StudyDir, optuna.Study]:
    """A finished study of 8 replayed trials on the first storage."""
    sd = make_study(tmp_path / "a", "a", **SECTIONS)
    study, lines = replay(spec_of(sd, "a"), 8)
    assert lines == []  # nothing earlier in the storage: nothing to say
    return sd, study


def test_the_fingerprint_is_stored_on_the_study(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, study = earlier
    fingerprint = study.user_attrs[FINGERPRINT_ATTR]
    hardware, software, workload = fingerprint["hardware"], fingerprint["software"], fingerprint["workload"]
    assert hardware["device"] == "cpu" and hardware["cpus"] == len(os.sched_getaffinity(0))
    assert hardware["cpu_model"] and hardware["interconnect"] == "shared memory on one host"
    assert hardware["gpu_count"] == 0 and hardware["nodes"] == 1
    import torch

    assert software["torch"] == torch.__version__
    assert workload["entrypoint"] == "faulty.py:build" and workload["args"] == {"fault": "none"}
    # faulty.Net(32): Linear(8, 32), two Linear(32, 32) blocks, Linear(32, 1)
    assert workload["parameters"] == (8 * 32 + 32) + 2 * (32 * 32 + 32) + (32 + 1)
    assert workload["dtypes"] == {"float32": 1.0}
    assert workload["batch"] == "[0]: float32[8]; [1]: float32[1]"
    assert compare_fingerprints(fingerprint, study_fingerprint(spec_of(sd, "b"))).same


def test_same_fingerprint_queues_the_best_after_the_baseline(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, a = earlier
    best = choose(a).best
    assert best is not None
    b, lines = replay(spec_of(sd, "b"), 6)
    trials = b.get_trials(deepcopy=False)
    assert len(trials) == 6  # the warm-start trials count toward the budget
    assert trials[0].user_attrs["role"] == "baseline"
    warm = warm_trials(b)
    assert warm and [t.number for t in warm] == list(range(1, len(warm) + 1))  # right after the baseline
    assert all(t.user_attrs["warm_start"]["study"] == "a" and t.user_attrs["role"] == "search" for t in warm)
    assert warm[0].user_attrs["config_key"] == best.config_key  # a's choice first
    assert all(t.user_attrs["outcome"] == "complete" for t in warm)  # scored like any other trial
    assert lines == [f"warm start: {len(warm)} configuration{'s' if len(warm) > 1 else ''} from study 'a' "
                     "(same machine and model), run after the baseline"]
    assert b.user_attrs[WARM_START_ATTR]["source"] == "a"


def test_different_machine_facts_are_named(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, a = earlier
    fingerprint = a.user_attrs[FINGERPRINT_ATTR]
    fingerprint["hardware"].update(cpus=96, cpu_model="Other CPU 9000")
    fingerprint["software"]["torch"] = "2.0.0"
    a.set_user_attr(FINGERPRINT_ATTR, fingerprint)
    b, lines = replay(spec_of(sd, "b"), 4)
    assert warm_trials(b)  # still used: the same model on the same kind of device
    (line,) = lines
    here = study_fingerprint(spec_of(sd, "c"))
    assert "from study 'a' (close: " in line
    assert "cpu_model Other CPU 9000 (here " + here["hardware"]["cpu_model"] + ")" in line
    assert f"cpus 96 (here {here['hardware']['cpus']})" in line
    assert f"torch 2.0.0 (here {here['software']['torch']})" in line


def test_a_different_model_is_not_used(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, _ = earlier
    b, lines = replay(spec_of(sd, "b", "workload.args.width=64"), 4)  # another parameter count
    assert warm_trials(b) == []
    (line,) = lines
    assert line.startswith(
        "warm start: none; study 'a' trains another model, runs on another device or holds another global batch: "
    )
    assert "parameters 2,433 (here 8,961)" in line


def test_warm_start_false_queues_nothing(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, _ = earlier
    b, lines = replay(spec_of(sd, "b", "warm_start=false"), 4)
    assert warm_trials(b) == [] and lines == []
    assert b.user_attrs[WARM_START_ATTR]["enabled"] is False


def test_a_resumed_study_does_not_queue_twice(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, _ = earlier
    b, first = replay(spec_of(sd, "b"), 2)  # the baseline and one warm-start trial; the rest stay queued
    queued = len(warm_trials(b))
    assert first and queued >= 2
    b, again = replay(spec_of(sd, "b"), 7)
    assert again == [] and len(warm_trials(b)) == queued
    assert len({t.user_attrs["config_key"] for t in warm_trials(b)}) == queued


def test_no_more_are_queued_than_the_budget_leaves(earlier: tuple[StudyDir, optuna.Study]) -> None:
    sd, _ = earlier
    b, lines = replay(spec_of(sd, "b", "budget.n_trials=2"), 2)
    assert len(warm_trials(b)) == 1 and lines[0].startswith("warm start: 1 configuration from study 'a'")
    assert not b.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))


def test_projection_clips_drops_and_fixes(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "p", "p", search_space={
        "batch_size": {"low": 8, "high": 32, "step": 8}, "amp": {"choices": ["off"]}, "world_size": {"choices": [1, 2]},
        "num_workers": 1,
    })
    spec = load_spec(sd.file)
    space = study_space(spec)
    baseline = space.default_config(spec.baseline)
    theirs = space.default_config({"batch_size": 64, "world_size": 4, "num_workers": 2}).model_dump()
    projected, changed = project(space, theirs, baseline)
    assert projected.batch_size == 32  # clipped into the range
    assert projected.world_size == baseline.world_size  # 4 is not a choice here: the baseline's value
    assert projected.num_workers == 1  # fixed by this study
    assert any("batch_size 64 clipped to 32" in c for c in changed)
    assert any("world_size 4 is not in this space" in c for c in changed)


def test_a_bad_warm_start_value_is_one_line_exit_2(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "bad", "bad", warm_start="maybe")
    out = sd.cli("run", "study.yaml")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == "error: study.yaml: warm_start: 'maybe' is not true or false; give true or false"
    assert not sd.db.exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_study_run_twice_on_one_storage_warm_starts_and_says_from_where(tmp_path: Path) -> None:
    """The issue's check: `autotune run` on a tiny real workload, then a second study on the same storage."""
    sd = make_study(tmp_path / "e2e", "first", search_space={"batch_size": {"choices": [16, 64]}},
                    baseline={"batch_size": 16}, sampler={"name": "grid", "seed": 0}, pruner={"name": "none"},
                    confirm={"top_k": 0})
    first = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "warm start" not in first.stdout
    document: dict[str, Any] = yaml.safe_load(sd.file.read_text())
    # The second study fixes num_workers at 1: whichever configuration the first chose (its baseline too, on
    # a noisy machine), its projection differs from the second's baseline (num_workers 0) and is queued.
    space = {**document["search_space"], "num_workers": 1}
    (sd.folder / "second.yaml").write_text(
        yaml.safe_dump({**document, "name": "second", "search_space": space}, sort_keys=False)
    )
    second = sd.cli("run", "second.yaml", "--storage", sd.url, "--n-trials", "3")
    assert second.returncode == 0, second.stdout + second.stderr
    a = sd.load()
    b = optuna.load_study(study_name="second", storage=sd.url)
    best = choose(a).best
    assert best is not None
    assert "warm start: " in second.stdout and "from study 'first' (same machine and model)" in second.stdout
    warm = warm_trials(b)
    assert warm and warm[0].number == 1  # the first study's choice, projected: num_workers fixed at 1 here
    ran = warm[0].user_attrs["config"]
    assert (ran["batch_size"], ran["num_workers"]) == (best.config["batch_size"], 1)
    assert warm[0].user_attrs["outcome"] == "complete"
    assert len(b.get_trials(deepcopy=False)) == 3
    status = sd.cli("status", "second.yaml", "--storage", sd.url)
    assert status.returncode == 0, status.stderr
    assert "machine: cpu, " in status.stdout and "model: faulty.py:build" in status.stdout
    assert "from study 'first' (same machine and model)" in status.stdout
    shutil.rmtree(sd.runs, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_calibrate_warm_starts_and_tells_its_observer(earlier: tuple[StudyDir, optuna.Study]) -> None:
    """calibrate() runs the same loop: two real trials, the baseline and the earlier study's choice."""
    from autotune import calibrate

    sd, a = earlier
    best = choose(a).best
    assert best is not None
    lines = Lines()
    calibration = calibrate(sd.file, n_trials=2, observer=lines, name="c", storage=sd.url)
    assert len(lines.lines) == 1 and "from study 'a' (same machine and model)" in lines.lines[0]
    warm, *queued = warm_trials(calibration.study)  # the study file's budget (20) left room for 3
    assert all(t.state == optuna.trial.TrialState.WAITING for t in queued)
    assert warm.number == 1 and warm.user_attrs["config_key"] == best.config_key
    assert warm.user_attrs["outcome"] == "complete"


def test_config_keys_of_projected_configs_are_stable(earlier: tuple[StudyDir, optuna.Study]) -> None:
    """A configuration of the same space projects onto itself."""
    sd, a = earlier
    spec = spec_of(sd, "b")
    space = study_space(spec)
    baseline = space.default_config(spec.baseline)
    for group in (choose(a).candidates or ()):
        projected, changed = project(space, dict(group.config), baseline)
        assert changed == [] and config_key(projected.model_dump()) == group.config_key
