"""The confirmation race with real ranks: paced runs freeze between their blocks, and `autotune run` at the
default confirmation races its best configurations against the baseline and leaves nothing running."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.compat import optuna_private
from autotune.search_space import study_space
from autotune.trial_runner import PacedRun, PacedRunFailed, WarmLauncher, plan_for
from autotune.trial_runner._plan import WAKE_FILE
from autotune.tuner._recovery import heartbeats
from autotune.tuner._storage import HEARTBEAT_INTERVAL_S
from autotune.workload_check import load_spec
from tests._processes import wait_no_leftovers

from .conftest import assert_nothing_left, make_study


def _stopped(procs: list[psutil.Process]) -> bool:
    """Whether every process is stopped (SIGSTOP is delivered asynchronously: within a second)."""
    deadline = time.monotonic() + 1.0
    while not all(p.status() == psutil.STATUS_STOPPED for p in procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_paced_run_is_frozen_between_its_blocks_and_leaves_nothing(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "paced", "paced")
    spec = load_spec(str(sd.file))
    config = study_space(spec).default_config(spec.baseline)
    launcher = WarmLauncher()
    run = PacedRun(launcher, plan_for(spec, config).model_copy(update={"pace_steps": 4}), tmp_path / "paced" / "t")
    try:
        run.start(60)
        assert run.handle is not None
        ranks = [p for procs in run.handle.rank_processes().values() for p in procs]
        assert ranks and _stopped(ranks)
        beat = (run.trial_dir / "heartbeat").stat().st_mtime_ns
        time.sleep(0.5)
        assert (run.trial_dir / "heartbeat").stat().st_mtime_ns == beat  # no step while frozen
        windows = [run.block(30) for _ in range(3)]
        assert [w.step - windows[0].step for w in windows] == [0, 4, 8]  # 4 steps a block, each released once
        assert all(w.window_throughput_samples_s > 0 for w in windows)
        assert _stopped(ranks)
        # A block's end woke the tuner through the pipe rank 0 writes as it parks (it did not look for it). Not
        # every one: under load a block can end before the tuner first looks (2 of 3 in a suite run at load 3).
        assert run.wake is not None and run.wake.woken >= 1
    finally:
        run.close()
        launcher.close()
    assert not wait_no_leftovers(run.trial_dir, within_s=10)
    assert not (run.trial_dir / WAKE_FILE).exists()


@pytest.mark.slow
def test_a_paced_run_without_a_pipe_still_ends_its_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file system that cannot hold a FIFO (some network mounts): the tuner looks for each block's end in the
    # parked file instead of sleeping on the pipe; the blocks are the same.
    def no_fifo(path: object, mode: int = 0o666) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr("autotune.trial_runner._pace.os.mkfifo", no_fifo)
    sd = make_study(tmp_path / "nopipe", "nopipe")
    spec = load_spec(str(sd.file))
    plan = plan_for(spec, study_space(spec).default_config(spec.baseline)).model_copy(update={"pace_steps": 4})
    launcher = WarmLauncher()
    run = PacedRun(launcher, plan, tmp_path / "nopipe" / "t")
    try:
        run.start(60)
        assert run.wake is None
        windows = [run.block(30) for _ in range(3)]
    finally:
        run.close()
        launcher.close()
    assert [w.step - windows[0].step for w in windows] == [0, 4, 8]
    assert all(w.window_throughput_samples_s > 0 for w in windows)
    assert not wait_no_leftovers(run.trial_dir, within_s=10)


@pytest.mark.slow
def test_a_paced_run_in_a_folder_used_before_reads_its_own_blocks(tmp_path: Path) -> None:
    # A study file rerun after its database was deleted numbers its trials from 0 again: the new run must not
    # take the old one's parked count (its blocks would seem to end at once) or its windows for its own.
    sd = make_study(tmp_path / "reused", "reused")
    spec = load_spec(str(sd.file))
    plan = plan_for(spec, study_space(spec).default_config(spec.baseline)).model_copy(update={"pace_steps": 4})
    folder = tmp_path / "reused" / "t"
    launcher = WarmLauncher()
    try:
        first = PacedRun(launcher, plan, folder)
        first.start(60)
        old = [first.block(30) for _ in range(3)]
        first.close()
        (folder / "rank0.pid").write_text("1")  # not a rank of the next run: it must never be signalled
        second = PacedRun(launcher, plan, folder)
        try:
            second.start(60)
            windows = [second.block(30) for _ in range(2)]
        finally:
            second.close()
    finally:
        launcher.close()
    assert old[-1].step - old[0].step == 8
    assert [w.step - windows[0].step for w in windows] == [0, 4]
    # a new run's count and clock: its first block ends where the first run's did, with windows of its own (the
    # old file's would be equal to the old ones, field by field; comparing elapsed times raced the machine's load)
    assert windows[0].step == old[0].step and not any(w in old for w in windows)
    assert not wait_no_leftovers(folder, within_s=10)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["raise", "hang"])
def test_a_paced_run_that_crashes_or_hangs_in_a_block_fails_it(tmp_path: Path, fault: str) -> None:
    sd = make_study(tmp_path / fault, fault, workload_args={"fault": fault, "at_step": 24})
    spec = load_spec(str(sd.file))
    config = study_space(spec).default_config(spec.baseline)
    launcher = WarmLauncher()
    run = PacedRun(launcher, plan_for(spec, config).model_copy(update={"pace_steps": 4}), tmp_path / fault / "t")
    try:
        run.start(60)
        with pytest.raises(PacedRunFailed) as failed:
            for _ in range(8):  # the fault fires after a block or more
                run.block(5)
        assert 1 <= run.blocks < 6
        expected = "crashed (exit status" if fault == "raise" else f"no end of block {run.blocks + 1} within its time"
        assert str(failed.value).startswith(expected), failed.value
    finally:
        run.close()
        launcher.close()
    assert not wait_no_leftovers(run.trial_dir, within_s=10)


@pytest.mark.slow
def test_autotune_run_races_the_best_configurations_against_the_baseline(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "race", "race", search_space={"batch_size": {"choices": [16, 64]}},
                    sampler={"name": "grid"}, pruner={"name": "none"},
                    confirm={"top_k": 2, "rounds": 6, "block_s": 0.3})
    out = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    race = study.user_attrs["autotune_race"]
    assert 4 <= len(race["rounds"]) <= 6 and race["stopped"]
    assert len(race["entrants"]) >= 2 and all(v > 0 for r in race["rounds"] for v in r.values())
    raced = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("race")]
    assert {t.user_attrs["config_key"] for t in raced} == set(race["entrants"])
    assert all(t.user_attrs["role"] == "confirm" and t.state.is_finished() for t in raced)
    for t in raced:  # each entrant left the loop when told, and finished as a trial does (done.json, evaluated)
        done = json.loads((Path(t.user_attrs["trial_dir"]) / "done.json").read_text())
        assert done["reason"].startswith("paced: ") and done["outcome"] == "complete"
    record = study.user_attrs["autotune_confirmation"]
    assert record["best_config_key"] in race["entrants"]
    assert "confirmed by a race:" in out.stdout and "(confirmed by a race)" in out.stdout
    best = sd.cli("best", "study.yaml", "--format", "json")
    payload = json.loads(best.stdout)
    assert payload["confirmation"]["method"] == "race" and payload["confirmation"]["rounds"] == len(race["rounds"])
    assert_nothing_left(study, sd)


def test_a_race_records_each_entrants_heartbeat_every_interval_not_every_block(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'beats.db'}", heartbeat_interval=HEARTBEAT_INTERVAL_S)
    study = optuna.create_study(storage=storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Optuna's note that heartbeats are meant for optimize()
        trials = [study.ask(), study.ask()]
    recorded: list[int] = []
    monkeypatch.setattr(optuna_private.storage_of(study), "record_heartbeat", recorded.append)
    now = [0.0]
    beat = heartbeats(study, lambda: now[0])
    for _ in range(20):  # 20 rounds of 0.1 s blocks: 2 s
        for trial in trials:
            beat(trial)
            now[0] += 0.1
    assert len(recorded) == 2  # each entrant's first, and none again within HEARTBEAT_INTERVAL_S
    now[0] += HEARTBEAT_INTERVAL_S
    beat(trials[0])
    assert len(recorded) == 3
