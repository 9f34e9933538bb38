"""The tuner itself failing: SIGKILLed at random points of a study (launch, mid-trial, the tell), or unable
to write a trial's folder (a file where the runs folder should be, a full disk). Nothing finished is lost
or duplicated, stale trials are failed and retried, the budget stays consistent, nothing is left running,
and a tuner that cannot go on says so in one line."""

from __future__ import annotations

import datetime
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.tuner import counts_toward_budget
from tests.tuner.conftest import finished_snapshot

from .conftest import StudyDir, assert_nothing_left, marked_processes

# pytest-xdist: one worker runs these one after another (SIGKILLs are timed into trials of about a second)
pytestmark = pytest.mark.xdist_group("timing")

SEED = 20240611
N_TRIALS = 8
# sleep_s: every loss call sleeps 60 ms, so a trial trains for about a second and can be hit mid-way.
SLOW = {"workload_args": {"sleep_s": 0.06}, "trial": {"max_steps": 14, "report_every": 4}}
SPACE = {"batch_size": {"choices": [8, 16, 24, 32]}}


def _new(runs: Path, name: str, known: set[str]) -> Path | None:
    """A trial folder that was not there before this round and holds ``name``."""
    if not runs.is_dir():
        return None
    for folder in runs.glob("trial-*"):
        if folder.name not in known and (folder / name).exists():
            return folder
    return None


def kill_at(tuner: subprocess.Popen[bytes], sd: StudyDir, phase: str, jitter_s: float, within_s: float = 90) -> str:
    """SIGKILL the tuner ``jitter_s`` after ``phase`` is seen in a trial folder new to this round:
    ``launch`` (config.json written, the ranks being started), ``training`` (a metrics window written),
    ``tell`` (result.json written: the run is over and its result is being stored) or ``random`` (a delay
    from the start). Returns what happened ("killed" or "exited" when the tuner finished first)."""
    known = {f.name for f in sd.runs.glob("trial-*")} if sd.runs.is_dir() else set()
    marker = {"launch": "config.json", "training": "metrics.jsonl", "tell": "result.json"}.get(phase)
    deadline = time.monotonic() + within_s
    while marker is not None and _new(sd.runs, marker, known) is None:
        if tuner.poll() is not None:
            return "exited"
        assert time.monotonic() < deadline, f"{phase} never came"
        time.sleep(0.005)
    if phase == "training":  # the finder behind assert_nothing_left sees a live trial: the zygote, leader, rank
        alive = marked_processes(sd.mark, needle="autotune.trial_runner")
        assert len(alive) >= 3 or tuner.poll() is not None, alive
    time.sleep(jitter_s)
    if tuner.poll() is not None:
        return "exited"
    os.kill(tuner.pid, signal.SIGKILL)
    tuner.wait(timeout=10)
    return "killed"


@pytest.mark.slow
def test_sigkill_at_random_points_loses_nothing_and_the_rerun_finishes(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    sd = make_study("killed", search_space=SPACE, sampler={"name": "random", "seed": 1}, **SLOW)
    phases = ["launch", "training", "tell", "random", "tell", "launch"]
    seen: dict[int, tuple[object, ...]] = {}
    stale: set[int] = set()
    log: list[str] = []
    for i, phase in enumerate(phases):
        jitter = rng.uniform(0.5, 5.0) if phase == "random" else rng.uniform(0.0, 0.05)
        tuner = sd.popen("run", "study.yaml", "--n-trials", str(N_TRIALS), log=tmp_path / f"round{i}.log")
        try:
            what = kill_at(tuner, sd, phase, jitter)
        finally:
            if tuner.poll() is None:
                tuner.kill()
                tuner.wait(timeout=10)
        log.append(f"round {i}: {phase} +{jitter:.2f}s: {what} ({tuner.returncode})")
        assert_nothing_left(sd, started)
        if not sd.db.exists():
            continue  # killed before the study was created
        study = sd.load()
        now = finished_snapshot(study)
        assert {n: now.get(n) for n in seen} == seen, f"a finished trial changed or vanished; {log}"
        seen = now
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        stale |= {t.number for t in running}
        log[-1] += "; left running: " + (", ".join(f"#{t.number} ({len(t.user_attrs)} attrs)" for t in running) or "-")
    print("\n".join(log))  # shown with -s, and on failure
    assert stale, f"no round left a trial running: the kills missed every trial; {log}"

    rerun = sd.cli("run", "study.yaml", "--n-trials", str(N_TRIALS))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Traceback" not in rerun.stdout + rerun.stderr
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    after = finished_snapshot(study)
    assert {n: after[n] for n in seen} == seen, "a finished trial changed or vanished"
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    for number in stale:
        t = trials[number]
        assert t.state == TrialState.FAIL and t.user_attrs["outcome"] == "interrupted", (number, t.user_attrs)
        assert "died" in t.user_attrs["reason"]
        if "config" in t.user_attrs:  # it had started: its configuration is measured again, once
            retries = [r for r in trials if r.user_attrs.get("retry_of") == number]
            assert len(retries) == 1, (number, [r.number for r in retries], log)
            assert retries[0].params == t.params
            assert retries[0].user_attrs["config_key"] == t.user_attrs["config_key"]
    counted = [t for t in trials if counts_toward_budget(t)]
    assert len(counted) == N_TRIALS, (len(counted), log)
    assert [t.user_attrs["role"] for t in counted].count("baseline") == 1
    assert_nothing_left(sd, started)


def _ask_and_die(sd: StudyDir) -> int:
    """A tuner that dies (os._exit, as under SIGKILL) right after asking Optuna for a trial, before it has
    written anything on it."""
    code = (
        "import optuna, os, sys\n"
        f"s = optuna.load_study(study_name={sd.name!r}, storage={sd.url!r})\n"
        "print(s.ask().number, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout)


def _age(db: Path, number: int, seconds: float) -> None:
    """Move a trial's start back in time, as if the rerun came ``seconds`` later."""
    with sqlite3.connect(db) as conn:
        (start,) = conn.execute("SELECT datetime_start FROM trials WHERE number = ?", (number,)).fetchone()
        then = datetime.datetime.fromisoformat(start) - datetime.timedelta(seconds=seconds)
        conn.execute("UPDATE trials SET datetime_start = ? WHERE number = ?", (then.isoformat(sep=" "), number))


@pytest.mark.slow
def test_a_tuner_killed_right_after_asking_for_a_trial_does_not_stall_the_study(
    make_study: Callable[..., StudyDir], started: float
) -> None:
    sd = make_study("orphan", search_space=SPACE, sampler={"name": "random", "seed": 2})
    first = sd.cli("run", "study.yaml", "--n-trials", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    orphan = _ask_and_die(sd)
    assert sd.load().trials[orphan].state == TrialState.RUNNING
    _age(sd.db, orphan, 120)  # long past any heartbeat grace period

    rerun = sd.cli("run", "study.yaml", "--n-trials", "3")  # before: waited forever
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert trials[orphan].state == TrialState.FAIL and trials[orphan].user_attrs["outcome"] == "interrupted"
    assert sum(counts_toward_budget(t) for t in trials) == 3
    status = sd.cli("status", "study.yaml")  # a failed trial with no config reads back
    assert status.returncode == 0 and "interrupted: 1" in status.stdout, status.stdout + status.stderr
    assert_nothing_left(sd, started)


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["runs_is_a_file", "disk_full"])
def test_a_trial_folder_that_cannot_be_written_is_one_line_exit_1_and_no_corrupt_study(
    make_study: Callable[..., StudyDir], started: float, broken: str
) -> None:
    sd = make_study(f"unwritable-{broken}", search_space=SPACE, sampler={"name": "random", "seed": 3})
    if broken == "runs_is_a_file":
        (sd.folder / "runs").write_text("not a folder\n")  # chmod would not stop root; a file does
        why = "Not a directory"
    else:
        # The first trial's config.json is written through config.tmp: make that write hit a full disk.
        sd.trial_dir(0).mkdir(parents=True)
        (sd.trial_dir(0) / "config.tmp").symlink_to("/dev/full")
        why = "No space left on device"

    out = sd.autotune("run", "study.yaml", "--n-trials", "2", timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert str(sd.trial_dir(0)) in lines[0] and why in lines[0], lines[0]

    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING], "a trial was left RUNNING"
    first = trials[0]
    assert first.user_attrs["role"] == "baseline"
    assert first.state == TrialState.FAIL and first.user_attrs["outcome"] == "interrupted"
    assert not counts_toward_budget(first), "a trial autotune could not start must not use up the budget"
    assert_nothing_left(sd, started)

    # fixed, the same command finishes the study, the baseline measured after all
    if broken == "runs_is_a_file":
        (sd.folder / "runs").unlink()
    else:
        (sd.trial_dir(0) / "config.tmp").unlink()
    again = sd.cli("run", "study.yaml", "--n-trials", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = sd.load().get_trials(deepcopy=False)
    assert sum(counts_toward_budget(t) for t in trials) == 2
    baseline = [t for t in trials if t.user_attrs.get("role") == "baseline" and counts_toward_budget(t)]
    assert len(baseline) == 1 and baseline[0].user_attrs["outcome"] == "complete"
    assert baseline[0].user_attrs["retry_of"] == first.number


@pytest.mark.slow
def test_status_says_a_running_trial_whose_run_is_gone_runs_nowhere(
    make_study: Callable[..., StudyDir], started: float, tmp_path: Path
) -> None:
    # A tuner SIGKILLed mid-trial (or stopped by a full disk under its SQLite study, which then cannot record the
    # trial) leaves it RUNNING in the study. `status` said "running: #0 for N s on HOST (pid P)" however long ago
    # P died; it now says that run is gone and what the next run does with the trial.
    sd = make_study("gone", search_space=SPACE, sampler={"name": "random", "seed": 2}, **SLOW)
    tuner = sd.popen("run", "study.yaml", "--n-trials", "2", log=tmp_path / "run.log")
    assert kill_at(tuner, sd, "training", 0.2) == "killed"
    assert_nothing_left(sd, started)
    status = sd.cli("status", "study.yaml")
    text = " ".join(status.stdout.split())
    assert status.returncode == 0, status.stdout + status.stderr
    assert "running: #0 for " in text and f"(pid {tuner.pid}; that run is gone: the next `autotune run` records it " \
        "as interrupted and runs it again)" in text, status.stdout
    again = sd.cli("run", "study.yaml", "--n-trials", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    status = sd.cli("status", "study.yaml")
    assert "running: #" not in status.stdout and "interrupted: 1" in status.stdout, status.stdout
