"""The heartbeat grace period: 30 s by default, AUTOTUNE_HEARTBEAT_GRACE_S sets it (and the heartbeat interval
with it); a running trial whose heartbeat is older than it is failed by the next worker's recovery and queued
again, and not before; a stop (SIGTERM, Ctrl-C) lands between storage calls, not inside one; a released storage
holds no PostgreSQL session. Real SQLite and PostgreSQL storage."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import psutil._pslinux as psutil_linux
import pytest
from optuna.trial import TrialState
from sqlalchemy import text

from autotune.compat.optuna_private import GuardedStorage, rdb_of, storage_of
from autotune.errors import UsageError
from autotune.tuner import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, make_storage, release_storages
from autotune.tuner._recovery import Interrupted, ask, recover, signals_as_interrupts, worker_identity
from autotune.tuner._storage import grace_period_s, heartbeat_interval_s
from autotune.tuner._telling import tell_interrupted


def test_the_default_grace_period_and_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_HEARTBEAT_GRACE_S", raising=False)
    assert (grace_period_s(), heartbeat_interval_s()) == (GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S) == (30, 5)


@pytest.mark.parametrize(("value", "grace", "interval"), [("2", 2, 1), ("12", 12, 2), ("600", 600, 5)])
def test_the_environment_sets_the_grace_period_and_the_interval_follows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, grace: int, interval: int
) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE_S", value)
    assert (grace_period_s(), heartbeat_interval_s()) == (grace, interval)
    storage = make_storage(f"sqlite:///{tmp_path / 'study.db'}")
    assert storage.get_heartbeat_interval() == interval  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["1", "0", "-3", "2.5", "soon"])
def test_a_bad_grace_period_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE_S", value)
    with pytest.raises(UsageError) as bad:
        grace_period_s()
    message = str(bad.value)
    assert "\n" not in message and message.startswith(f"AUTOTUNE_HEARTBEAT_GRACE_S={value!r}") and "e.g. 30" in message


def test_a_trial_whose_heartbeat_is_older_than_the_grace_period_is_failed_and_queued_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE_S", "2")
    study = optuna.create_study(storage=make_storage(f"sqlite:///{tmp_path / 'study.db'}"), study_name="beats")
    trial = ask(study)
    elsewhere = {"host": "another-host", "pid": 1, "start": 0.0}  # its pid cannot be checked from here
    trial.set_user_attr("worker", elsewhere)
    trial.set_user_attr("config", {"batch_size": 8})
    study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
    me = {"host": "this-host", "pid": 2, "start": 0.0}
    recover(study, me)
    assert study.trials[0].state == TrialState.RUNNING  # a fresh heartbeat: the trial is left alone
    time.sleep(3.0)  # past the 2 s grace period, no heartbeat since
    recover(study, me)
    trials = study.get_trials(deepcopy=False)
    assert trials[0].state == TrialState.FAIL
    assert [t.state for t in trials[1:]] == [TrialState.WAITING]  # queued again with its configuration


#: Another tuner: it says who it is, as it records itself on its trials, and lives until its stdin closes.
IDENTIFY = """import json, sys
from autotune.tuner._recovery import worker_identity
print(json.dumps(worker_identity()), flush=True)
sys.stdin.read()
"""


def test_a_live_tuner_beside_this_one_keeps_its_trial_when_the_wall_clock_is_stepped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tuner on this host is gone when its pid is, or runs another process; the check must not read the wall
    clock, which NTP or a VM resumed from a snapshot steps: a one-second step made a live tuner look gone to the
    one beside it (its start, in epoch seconds, is the boot time read from the wall clock plus ticks since boot),
    and its running trial was failed and run again."""
    other = subprocess.Popen([sys.executable, "-c", IDENTIFY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        worker = json.loads(other.stdout.readline())  # as that tuner records itself on its trials
        study = optuna.create_study(storage=make_storage(f"sqlite:///{tmp_path / 'study.db'}"), study_name="step")
        for recorded in (worker, {**worker, "start_ticks": worker["start_ticks"] - 1}):  # the second: a reused pid
            trial = ask(study)
            trial.set_user_attr("worker", recorded)
            trial.set_user_attr("config", {"batch_size": 8})
        stepped = psutil_linux.boot_time() + 5  # the wall clock, 5 s ahead of where it was when that tuner started
        monkeypatch.setattr(psutil_linux, "boot_time", lambda: stepped)
        assert psutil.Process(other.pid).create_time() - worker["start"] == pytest.approx(5, abs=0.02)
        me = worker_identity()
        assert recover(study, me) == [1]  # the live tuner's trial runs on; the pid's other process is not it
        assert [t.state for t in study.get_trials(deepcopy=False)[:2]] == [TrialState.RUNNING, TrialState.FAIL]
    finally:
        other.kill()
        other.wait(timeout=10)
    assert recover(study, me) == [0]  # gone now: failed and queued again
    assert "its tuner (pid" in study.get_trials(deepcopy=False)[0].user_attrs["reason"]


def test_autotune_run_with_a_bad_grace_period_is_one_line_exit_2(tmp_path: Path) -> None:
    from .conftest import make_study

    sd = make_study(tmp_path / "bad-grace", "bad-grace")
    out = sd.cli("run", "study.yaml", "--n-trials", "2", env={"AUTOTUNE_HEARTBEAT_GRACE_S": "soon"})
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "AUTOTUNE_HEARTBEAT_GRACE_S='soon'" in errors[0], out.stderr
    assert not sd.runs.exists() or not list(sd.runs.glob("trial-*"))  # stopped before any trial



@pytest.mark.timeout(30)
@pytest.mark.parametrize(("signum", "stop"), [(signal.SIGTERM, Interrupted), (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_inside_a_storage_call_lands_as_it_ends_and_the_stopped_trial_is_recorded_at_once(
    tmp_path: Path, signum: int, stop: type[BaseException]
) -> None:
    # SIGTERM landed while the tuner read the study mid-fetch: the read's cursor stayed alive (in SQLAlchemy's
    # compiled result) and held SQLite's read lock, so recording the stopped trial waited out the 60 s busy timeout,
    # failed, and `autotune run` exited a minute past its grace period. A stop now waits for the call to end.
    study = optuna.create_study(storage=make_storage(f"sqlite:///{tmp_path / 'study.db'}"), study_name="cut")
    for _ in range(3):
        study.tell(study.ask(), 1.0)
    trial = ask(study)
    storage = storage_of(study)
    rdb = rdb_of(storage)
    assert isinstance(storage, GuardedStorage) and rdb is not None
    read: list[int] = []

    def read_with_a_stop_mid_fetch() -> None:
        with rdb.engine.connect() as connection:
            rows = connection.execute(text("SELECT * FROM trials"))
            rows.fetchone()  # mid-fetch: the statement holds the read lock
            signal.raise_signal(signum)
            read.append(1 + len(rows.fetchall()))

    with pytest.raises(stop), signals_as_interrupts():
        try:
            storage.guard(read_with_a_stop_mid_fetch)
        except stop:
            assert read == [4]  # the call ran to its end, then the stop
            assert tell_interrupted(study, trial)
            raise
    stopped = study.get_trials(deepcopy=False)[trial.number]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["outcome"] == "interrupted"


@pytest.mark.slow  # the session's PostgreSQL server
def test_release_storages_ends_this_process_postgresql_sessions_and_a_later_call_connects_again(
    postgres_url: str,
) -> None:
    # What calibrate() and load_calibration() end with, so that a launcher or a rank that trains next holds no
    # session on the study's server (a shared server has a connection limit). SQLite: tests/api/test_calibrate.py.
    storage = make_storage(postgres_url)
    rdb = rdb_of(storage)
    assert rdb is not None
    with rdb.engine.connect() as conn:
        ours = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    storage.get_all_studies()
    observer = optuna.storages.RDBStorage(postgres_url).engine  # a session of its own, to look from

    def alive(pid: object) -> bool:
        with observer.connect() as conn:
            found = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar()
        return bool(found)

    try:
        assert alive(ours)  # pooled: it outlives the call that opened it
        release_storages()
        deadline = time.monotonic() + 5
        while alive(ours) and time.monotonic() < deadline:  # the server notices the closed socket at once
            time.sleep(0.05)
        assert not alive(ours)
        assert storage.get_all_studies() is not None  # the storage in hand connects again
    finally:
        observer.dispose()
