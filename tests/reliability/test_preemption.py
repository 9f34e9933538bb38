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
