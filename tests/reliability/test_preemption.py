"""Preemption: SIGTERM from outside (SLURM's warning signal before a job's end, a Kubernetes eviction) while a
trial trains, to `autotune run` and to a user's launcher inside `autotune.calibrate()`. The trial is stopped
within 10 s, recorded as interrupted, nothing is left running; `autotune run` exits 143 and a rerun re-runs the
stopped configuration and completes the budget; in a launcher, the signal then reaches the launcher's own
SIGTERM handler, or its default action ends the process, as it would without autotune."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.tuner import counts_toward_budget

from .conftest import StudyDir, assert_nothing_left

# pytest-xdist: one worker runs these one after another (a stopped trial must end within GRACE_S)
pytestmark = pytest.mark.xdist_group("timing")

GRACE_S = 10.0
# every loss call sleeps 100 ms: a trial of 60 steps trains for about 6 s, long enough to be caught mid-way
SLOW = {"workload_args": {"sleep_s": 0.1}, "trial": {"max_steps": 60, "report_every": 4}}
SPACE = {"batch_size": {"choices": [8, 16, 24, 32]}}

LAUNCHER = """
import signal, sys
from pathlib import Path
import autotune

if sys.argv[1] == "handler":
    def on_term(signum, frame):
        Path("handled").write_text(str(signum))
        sys.exit(99)
    signal.signal(signal.SIGTERM, on_term)
Path("calibrating").write_text("")
calibration = autotune.calibrate("study.yaml", n_trials=3)
Path("returned").write_text("")
"""


def _wait_training(proc: subprocess.Popen[bytes], trial_dir: Path, log: Path) -> None:
    deadline = time.monotonic() + 120
    while not (trial_dir / "metrics.jsonl").exists():
        assert proc.poll() is None, f"exited ({proc.returncode}) before training:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{trial_dir.name} never trained:\n{log.read_text()}"
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return code, time.monotonic() - sent


def _check_recorded(sd: StudyDir, number: int) -> None:
    trials = sd.load().get_trials(deepcopy=False)
    stopped = trials[number]
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["outcome"] == "interrupted", stopped.user_attrs
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert not (sd.trial_dir(number) / "done.json").exists()  # really stopped mid-trial
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert [t.user_attrs.get("retry_of") for t in waiting] == [number]  # queued again, same configuration
    assert waiting[0].user_attrs["config"] == stopped.user_attrs["config"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_stops_autotune_run_in_the_grace_period_and_the_rerun_completes_the_budget(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    slow = tmp_path / "slow"  # the trials are slow (6 s) while it exists: the first run's is caught mid-way
    slow.touch()
    sd = make_study("preempted", workload_args={**SLOW["workload_args"], "sleep_while": str(slow)},
                    trial=SLOW["trial"], search_space=SPACE, sampler={"name": "random", "seed": 5})
    log = tmp_path / "run.log"
    tuner = sd.popen("run", "study.yaml", "--n-trials", "3", log=log)
    _wait_training(tuner, sd.trial_dir(0), log)
    code, took = _stop(tuner)
    text = log.read_text()
    assert code == 143, text
    assert took < GRACE_S, f"took {took:.1f} s to stop"
    assert "Traceback" not in text and "interrupted: the running trial was stopped and recorded" in text, text
    _check_recorded(sd, 0)
    assert_nothing_left(sd, started)

    slow.unlink()  # the rerun's trials need not be slow: what it shows is the stopped one run again, the budget met
    again = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert sum(counts_toward_budget(t) for t in trials) == 3
    rerun = [t for t in trials if t.user_attrs.get("retry_of") == 0]
    assert len(rerun) == 1 and rerun[0].state == TrialState.COMPLETE
    assert rerun[0].user_attrs["config"] == trials[0].user_attrs["config"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["handler", "default"])
def test_sigterm_to_a_launcher_in_calibrate_stops_the_trial_then_reaches_the_launcher(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path, launcher: str
) -> None:
    sd = make_study(f"calibrate-{launcher}", **SLOW, search_space=SPACE, sampler={"name": "random", "seed": 5})
    log = tmp_path / "launcher.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, launcher], cwd=sd.folder, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=sd.env)
    _wait_training(proc, sd.trial_dir(0), log)
    code, took = _stop(proc)
    text = log.read_text()
    assert took < GRACE_S, f"took {took:.1f} s to stop"
    if launcher == "handler":  # the launcher's own handler ran, after the trial was stopped and recorded
        assert code == 99, text
        assert (sd.folder / "handled").read_text() == str(int(signal.SIGTERM))
        assert "Traceback" not in text, text
    else:  # no handler: SIGTERM's default action ended the process, as without autotune
        assert code == -signal.SIGTERM, text
    assert not (sd.folder / "returned").exists()
    _check_recorded(sd, 0)
    assert_nothing_left(sd, started)


def _wait_folder(proc: subprocess.Popen[bytes], sd: StudyDir, number: int, log: Path, name: str = "") -> Path:
    """Trial ``number``'s folder (holding ``name``) once it appears: polled every 5 ms, so a signal sent then lands
    in what follows (a race entrant's start, a result's tell)."""
    folder = sd.trial_dir(number)
    deadline = time.monotonic() + 180
    while not (folder / name).exists() if name else not folder.is_dir():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {folder.name}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{folder.name} never came:\n{log.read_text()}"
        time.sleep(0.005)
    return folder


def _none_left_running(sd: StudyDir, text: str) -> None:
    """What `interrupted: the running trial was stopped and recorded` promises: no trial of the stopped run is
    still RUNNING in the study (else `status` shows it running, and a worker on another host waits out its
    heartbeat's grace period before it is failed)."""
    trials = sd.load().get_trials(deepcopy=False)
    running = [(t.number, t.user_attrs.get("role")) for t in trials if t.state == TrialState.RUNNING]
    assert not running, f"left RUNNING after the exit: {running}\n{text}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_as_the_confirmation_race_starts_records_its_entrants_and_the_rerun_races_afresh(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    # The race's entrants are trials of their own (role confirm), started one after another; SIGTERM lands while
    # the first starts. Every entrant is recorded as interrupted and none is queued again: the next run's race
    # chooses its entrants afresh. (A queued entrant was taken by the next race's ask in place of the trial that
    # race had queued: a trial stored with one configuration's params and another's config_key, and the queued
    # ones left WAITING for good.)
    sd = make_study("race-preempted", workload_args={"sleep_s": 0.02}, trial={"max_steps": 20, "report_every": 4},
                    search_space=SPACE, sampler={"name": "random", "seed": 5}, confirm={"top_k": 2})
    log = tmp_path / "run.log"
    tuner = sd.popen("run", "study.yaml", "--n-trials", "3", log=log)
    _wait_folder(tuner, sd, 3, log)  # trial #3: the race's first entrant, being started
    code, took = _stop(tuner)
    text = log.read_text()
    assert code == 143, text
    assert took < GRACE_S, f"took {took:.1f} s to stop"
    assert "Traceback" not in text and "interrupted: the running trial was stopped and recorded" in text, text
    _none_left_running(sd, text)
    trials = sd.load().get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state == TrialState.WAITING], "an entrant was queued again"
    assert_nothing_left(sd, started)

    again = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert not [t.number for t in trials if not t.state.is_finished()], [(t.number, t.state) for t in trials]
    for t in trials:  # each stored confirmation ran the configuration it names, and its params are that one's
        if t.user_attrs.get("role") == "confirm" and t.state == TrialState.COMPLETE:
            confirmed = trials[t.user_attrs["confirms"]]
            assert t.user_attrs["config_key"] == confirmed.user_attrs["config_key"], (t.number, confirmed.number)
            assert t.params == confirmed.params, (t.number, t.params, confirmed.params)
    assert sd.load().user_attrs.get("autotune_confirmation")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigterm_as_a_trial_is_told_or_the_next_one_asked_leaves_no_trial_running(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    # Between a trial's end (its result.json written) and the next trial's launch the tuner stores the result,
    # asks Optuna for the next trial and configures it: a SIGTERM there left the trial RUNNING (to be failed only
    # by a later run) while `autotune run` said it was recorded. Three rounds, each stopped 0-30 ms after a result.
    sd = make_study("tell-preempted", workload_args={"sleep_s": 0.02}, trial={"max_steps": 12, "report_every": 4},
                    search_space=SPACE, sampler={"name": "random", "seed": 5})
    jitters = [0.0, 0.015, 0.03]
    for i, jitter in enumerate(jitters):
        log = tmp_path / f"round{i}.log"
        before = len(sd.load().get_trials(deepcopy=False)) if i else 0
        tuner = sd.popen("run", "study.yaml", "--n-trials", "8", log=log)
        # the first trial this round finishes: its result written, the tuner about to store it
        _wait_folder(tuner, sd, before, log, "result.json")
        time.sleep(jitter)
        code, took = _stop(tuner)
        text = log.read_text()
        assert code == 143, text
        assert took < GRACE_S, f"took {took:.1f} s to stop"
        assert "Traceback" not in text, text
        _none_left_running(sd, text)
    assert_nothing_left(sd, started)
    again = sd.cli("run", "study.yaml", "--n-trials", "8")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert sum(counts_toward_budget(t) for t in trials) == 8
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_confirmation_run_left_queued_is_superseded_not_measured_in_place_of_another(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    # A confirmation run left WAITING (its run stopped between queueing it and taking it; Optuna's retry of a
    # stale one; an earlier autotune's interrupted race) would be handed to the next ask, a search trial's or a
    # confirmation's, in place of the trial that ask was for. The next run fails it as superseded instead.
    sd = make_study("left-queued", workload_args={"sleep_s": 0.02}, trial={"max_steps": 12, "report_every": 4},
                    search_space=SPACE, sampler={"name": "random", "seed": 5}, confirm={"top_k": 0})
    first = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    study = sd.load()
    done = study.get_trials(deepcopy=False)
    study.enqueue_trial(done[1].params, skip_if_exists=False, user_attrs={
        "role": "confirm", "config": done[1].user_attrs["config"], "confirms": 2, "race": True})
    stale = len(done)

    again = sd.cli("run", "study.yaml", "--n-trials", "4", "--set", "confirm.top_k=2")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert trials[stale].state == TrialState.FAIL and trials[stale].user_attrs["outcome"] == "interrupted"
    assert "superseded" in trials[stale].user_attrs["reason"] or "queued by an earlier run" in trials[stale].user_attrs[
        "reason"]
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert sum(counts_toward_budget(t) for t in trials) == 4
    confirms = [t for t in trials if t.user_attrs.get("role") == "confirm" and t.state == TrialState.COMPLETE]
    assert confirms, again.stdout
    for t in confirms:
        confirmed = trials[t.user_attrs["confirms"]]
        assert t.user_attrs["config_key"] == confirmed.user_attrs["config_key"], (t.number, confirmed.number)
    assert_nothing_left(sd, started)
