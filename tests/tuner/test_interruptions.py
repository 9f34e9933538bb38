"""A tuner killed (SIGKILL) or stopped (Ctrl-C, SIGTERM) mid-trial: nothing runs on, nothing is lost, and
running the command again finishes the study."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests._processes import processes_in

from .conftest import StudyDir, assert_nothing_left, budget_trials, finished_snapshot

# pytest-xdist: one worker runs these one after another (a stopped tuner must end within seconds)
pytestmark = pytest.mark.xdist_group("timing")

# fault: slow sleeps 50 ms in every loss call: a trial of 40 steps trains for about 2 s.
SLOW = {"workload_args": {"fault": "slow", "at_step": 1}, "trial": {"max_steps": 40, "report_every": 4}}


def wait_training(tuner: subprocess.Popen[bytes], trial_dir: Path, log: Path, within_s: float = 90) -> None:
    """Until the trial has written its first reporting window (its ranks are training)."""
    deadline = time.monotonic() + within_s
    while not (trial_dir / "metrics.jsonl").exists():
        assert tuner.poll() is None, f"the tuner exited ({tuner.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{trial_dir.name} never started training:\n{log.read_text()}"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkilled_tuner_leaves_nothing_and_the_rerun_finishes_the_study(
    study_dir: Callable[..., StudyDir], tmp_path: Path
) -> None:
    # On the warm launcher, the default. What a SIGKILL leaves of a cold torchrun trial (ranks in sessions of their
    # own) is tests/trial_runner/test_launchers.py's; the rerun and its retry do not depend on the launcher.
    start = "warm"
    sd = study_dir(
        f"killed-{start}", **SLOW, launcher={"start": start}, search_space={"batch_size": {"choices": [16, 32, 64]}},
        sampler={"name": "random", "seed": 3}, pruner={"name": "none"}, confirm={"top_k": 0},
    )
    log = tmp_path / "first.log"
    tuner = sd.popen("run", "study.yaml", "--n-trials", "3", log=log)
    try:
        wait_training(tuner, sd.trial_dir(1), log)  # the baseline is done, the first search trial trains
        assert len(processes_in(sd.folder, exclude=(tuner.pid,))) >= 2, "no trial process to kill"
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=10)
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert_nothing_left(sd.load(), sd)

    study = sd.load()
    killed = study.trials[1]
    assert killed.state == TrialState.RUNNING  # nobody recorded its end: its tuner died
    before = finished_snapshot(study)
    assert list(before) == [0] and study.trials[0].state == TrialState.COMPLETE

    rerun = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    after = finished_snapshot(study)
    assert {n: after[n] for n in before} == before  # no finished trial lost or changed
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]

    killed = trials[1]
    assert killed.state == TrialState.FAIL
    assert killed.user_attrs["outcome"] == "interrupted"
    retries = [t for t in trials if t.user_attrs.get("retry_of") == 1]
    assert len(retries) == 1, [t.user_attrs.get("retry_of") for t in trials]
    retry = retries[0]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["outcome"] == "complete"
    assert retry.user_attrs["config_key"] == killed.user_attrs["config_key"]
    assert retry.params == killed.params
    assert retry.user_attrs["role"] == "search"

    # the budget: baseline + 2 search trials finished, the interrupted one not counted, nothing twice
    assert len(budget_trials(study)) == 3
    assert [t.user_attrs["role"] for t in trials].count("baseline") == 1
    assert len(trials) == 4  # baseline, killed, its retry, one more search trial
    status = sd.cli("status", "study.yaml")
    assert status.returncode == 0, status.stderr
    assert "complete: 3" in status.stdout and "interrupted: 1" in status.stdout, status.stdout
    assert_nothing_left(study, sd)


@pytest.mark.slow
# Each signal once and each launcher once: the tuner turns both signals into the same stop, and each launcher
# ends its trial the same way for either (SIGTERM on the warm launcher is tests/reliability/test_preemption.py's).
@pytest.mark.parametrize(("signum", "code", "start"), [(signal.SIGINT, 130, "warm"), (signal.SIGTERM, 143, "torchrun")])
def test_ctrl_c_and_sigterm_stop_and_record_the_running_trial(
    study_dir: Callable[..., StudyDir], tmp_path: Path, signum: int, code: int, start: str
) -> None:
    sd = study_dir(f"stopped-{code}-{start}", **SLOW, launcher={"start": start}, confirm={"top_k": 0})
    log = tmp_path / "run.log"
    tuner = sd.popen("run", "study.yaml", "--n-trials", "2", log=log)
    try:
        wait_training(tuner, sd.trial_dir(0), log)
        sent = time.monotonic()
        os.kill(tuner.pid, signum)
        status = tuner.wait(timeout=20)
        took = time.monotonic() - sent
    finally:
        if tuner.poll() is None:
            tuner.kill()
    output = log.read_text()
    assert status == code, output
    assert took < 8, f"took {took:.1f} s to stop"
    assert "interrupted" in output and "Traceback" not in output, output
    assert not (sd.trial_dir(0) / "done.json").exists()  # it really was stopped mid-trial

    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    stopped = trials[0]
    assert stopped.state == TrialState.FAIL, stopped.state
    assert stopped.user_attrs["outcome"] == "interrupted"
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # queued again with the same configuration, for the next `autotune run`
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert [t.user_attrs.get("retry_of") for t in waiting] == [0]
    assert waiting[0].user_attrs["config"] == stopped.user_attrs["config"]
    assert_nothing_left(study, sd)


def test_ctrl_c_before_the_first_trial_is_an_interruption_and_closes_the_launcher(
    study_dir: Callable[..., StudyDir], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the launcher prepares (the warm launcher's zygote imports torch: seconds) is exit 130 with
    the launcher closed, not click's 'Aborted!' exit 1 — a worker waiting for the others is often there."""
    from autotune.tuner import Interrupted, NoLaunch, Tuner, _loop
    from autotune.workload_check import load_spec

    closed: list[bool] = []

    class CtrlCWhilePreparing(NoLaunch):
        def prepare(self, plan: object) -> None:
            raise KeyboardInterrupt

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(_loop, "make_launcher", lambda spec: CtrlCWhilePreparing())
    sd = study_dir("ctrl-c-preparing")
    with pytest.raises(Interrupted) as stop:
        Tuner(load_spec(str(sd.file))).run(n_trials=3)
    assert stop.value.exit_code == 130 and not stop.value.trial_stopped and closed == [True]
    # The launcher is prepared before the study is opened (its zygote's imports overlap the opening): the
    # study was never created, so nothing is left to resume but the study file.
    assert not sd.db.exists() or not optuna.get_all_study_names(storage=sd.url)


def test_a_sigterm_the_process_ignores_stays_ignored_while_the_tuner_runs() -> None:
    """A launcher that ignores SIGTERM (SIG_IGN) keeps ignoring it inside calibrate(); one that does not gets
    the tuner's handler for the run and its own back afterwards."""
    from autotune.tuner._recovery import signals_as_interrupts

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with signals_as_interrupts():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with signals_as_interrupts():
            assert callable(signal.getsignal(signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
