"""Many `autotune run` workers, one study on a real PostgreSQL: one study created, a shared budget that no
worker overshoots, unique trial numbers, and a SIGKILLed worker's trial retried by the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from autotune.tuner import counts_toward_budget
from tests._processes import wait_no_leftovers

GRACE_S = 8  # the heartbeat grace period of the frozen-worker test (AUTOTUNE_HEARTBEAT_GRACE_S)
FAULTY = Path(__file__).resolve().parent.parent / "trial_runner" / "faulty.py"

STUDY = """
name: {name}
storage: {url}
workload:
  entrypoint: faulty.py:build
  args: {{fault: {fault}, at_step: 1, samples: 512}}
search_space:
  batch_size: {{choices: [8, 16, 32]}}
trial: {{warmup_steps: 1, max_steps: {max_steps}, max_seconds: 60, report_every: 1}}
sampler: {{name: random, seed: 0}}
pruner: {{name: none}}
confirm: {{top_k: 0}}
"""


def write_study(folder: Path, url: str, name: str = "workers", fault: str = "none", max_steps: int = 4) -> Path:
    (folder / "faulty.py").write_text(FAULTY.read_text())
    study = folder / "study.yaml"
    study.write_text(STUDY.format(name=name, url=url, fault=fault, max_steps=max_steps))
    return study


def start_worker(study: Path, n_trials: int, log: Path, trace: Path | None = None) -> subprocess.Popen[bytes]:
    """``autotune run``; with ``trace``, it records its spans there (AUTOTUNE_TRACE)."""
    env = {**os.environ, **({"AUTOTUNE_TRACE": str(trace)} if trace else {})}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "run", str(study), "--n-trials", str(n_trials)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=study.parent, env=env,
        )


def spans(trace: Path, name: str) -> int:
    """How many ``name`` spans a traced worker has recorded so far."""
    try:
        lines = trace.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(json.loads(line)["span"] == name for line in lines if line.endswith("}"))


def trials(url: str, name: str) -> list[FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


def run_workers(tmp_path: Path, url: str, workers: int, n_trials: int, timeout_s: float) -> list[FrozenTrial]:
    study = write_study(tmp_path, url)
    procs = [start_worker(study, n_trials, tmp_path / f"worker{i}.log") for i in range(workers)]
    deadline = time.monotonic() + timeout_s
    try:
        for i, proc in enumerate(procs):
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, (tmp_path / f"worker{i}.log").read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return trials(url, "workers")


def check_shared_budget(found: list[FrozenTrial], n_trials: int, workers: int, logs: Path | None = None) -> None:
    """The study ``workers`` shared: ``n_trials`` trials, each run once and completed. A failure names the trials
    that are not and ends with the tail of each worker's log (``logs``: their folder)."""
    numbers = [t.number for t in found]
    assert sorted(numbers) == list(range(len(found)))  # unique, none missing
    unfinished = [(t.number, t.state.name, t.user_attrs.get("outcome"), t.user_attrs.get("reason"),
                   t.user_attrs.get("worker", {}).get("pid"), t.datetime_start, t.datetime_complete)
                  for t in found if t.state not in (TrialState.COMPLETE, TrialState.PRUNED)]
    tails = "".join(f"\n--- {log.name}\n{log.read_text()[-1500:]}" for log in sorted(logs.glob("worker*.log"))
                    ) if logs else ""
    assert not unfinished, f"{unfinished}{tails}"
    assert sum(counts_toward_budget(t) for t in found) == n_trials
    assert len(found) == n_trials  # no worker overshot the shared budget, not even by one
    assert sum(t.user_attrs.get("role") == "baseline" for t in found) == 1
    assert len({t.user_attrs["trial_dir"] for t in found}) == n_trials
    assert all(t.user_attrs.get("outcome") == "complete" for t in found)
    ran_by = {t.user_attrs["worker"]["pid"] for t in found}
    assert len(ran_by) >= min(workers, 2), ran_by  # they really shared the work


RACE = """
import sys, time
from pathlib import Path
from autotune.workload_check import load_spec
from autotune.search_space import study_space
from autotune.tuner import open_study
spec = load_spec(sys.argv[1])
space = study_space(spec)
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.001)
study = open_study(spec, space)
print(study._study_id)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)  # four processes import torch at once: on a loaded machine, minutes
def test_workers_started_together_on_an_empty_database_create_one_study(tmp_path: Path, postgres_url: str) -> None:
    study = write_study(tmp_path, postgres_url)
    procs = [
        subprocess.Popen([sys.executable, "-c", RACE, str(study)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    try:
        for proc in procs:  # every process has imported torch and read the study: none is still starting
            assert proc.stdout is not None
            if (line := proc.stdout.readline()) != "ready\n":
                proc.kill()
                pytest.fail(f"a worker did not get ready: {line}{proc.communicate(timeout=30)[1][-2000:]}")
        start = time.time() + 0.5
        outs = [p.communicate(f"{start}\n", timeout=90) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-2000:]  # without the creation lock: UniqueViolation, often
    assert len({out.strip() for out, _ in outs}) == 1
    assert [s.study_name for s in optuna.get_all_study_summaries(postgres_url)] == ["workers"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_four_workers_times_3_trials_lose_none(tmp_path: Path, postgres_url: str) -> None:
    """Four workers share one budget: none overshoots it, trial numbers are unique, no trial is lost. (Every
    trial is claimed by four workers racing for it; benchmarks/pg_workers.py runs the 100-trial version.)"""
    # 10-20 s on 2 cores: one trial at a time (the core lease), four workers taking turns; 12 trials, each
    # raced for by four workers, the last ones by workers whose budget checks meet the others' finished trials
    # (24 trials showed nothing 12 do not: every claim past the first few is a race among all four)
    found = run_workers(tmp_path, postgres_url, workers=4, n_trials=12, timeout_s=540)
    check_shared_budget(found, n_trials=12, workers=4, logs=tmp_path)


@pytest.mark.slow
def test_a_sigkilled_workers_trial_is_retried_by_another(tmp_path: Path, postgres_url: str) -> None:
    # Trials of 3 s and more (60 steps of 50 ms) so one can be caught running (the test looks every 0.2 s, and
    # each look reads the study from PostgreSQL: under a suite's load 1.5 s trials let the victim finish its whole
    # budget unseen once).
    study = write_study(tmp_path, postgres_url, fault="slow", max_steps=60)
    victim = start_worker(study, 3, tmp_path / "victim.log")
    survivor = start_worker(study, 3, tmp_path / "survivor.log")
    try:
        deadline = time.monotonic() + 120
        while True:
            assert victim.poll() is None, (tmp_path / "victim.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the victim never ran a trial"
            created = [s.study_name for s in optuna.get_all_study_summaries(postgres_url)]
            running = [
                t for t in (trials(postgres_url, "workers") if created else [])
                if t.state == TrialState.RUNNING and t.user_attrs.get("worker", {}).get("pid") == victim.pid
                and (tmp_path / "runs" / "workers" / f"trial-{t.number:04d}" / "metrics.jsonl").exists()
            ]
            if running:
                break
            time.sleep(0.2)
        killed = running[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        trial_dir = tmp_path / "runs" / "workers" / f"trial-{killed.number:04d}"
        assert not wait_no_leftovers(trial_dir, within_s=10)  # its trial died with it
        survivor.wait(timeout=180)
        assert survivor.returncode == 0, (tmp_path / "survivor.log").read_text()[-3000:]
    finally:
        for proc in (victim, survivor):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    found = trials(postgres_url, "workers")
    dead = found[killed.number]
    assert dead.state == TrialState.FAIL and dead.user_attrs["outcome"] == "interrupted"
    retries = [t for t in found if t.user_attrs.get("retry_of") == killed.number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].user_attrs["config"] == dead.user_attrs["config"]
    assert retries[0].user_attrs["worker"]["pid"] == survivor.pid
    assert sum(counts_toward_budget(t) for t in found) == 3
    assert not [t for t in found if t.state in (TrialState.RUNNING, TrialState.WAITING)]


@pytest.mark.slow
def test_a_worker_waiting_for_the_others_stops_cleanly_on_ctrl_c(tmp_path: Path, postgres_url: str) -> None:
    study = write_study(tmp_path, postgres_url, fault="slow", max_steps=400)
    busy = start_worker(study, 1, tmp_path / "busy.log")  # holds the whole budget: one long trial
    waiting: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "runs" / "workers" / "trial-0000" / "metrics.jsonl").exists():
            assert busy.poll() is None and time.monotonic() < deadline, (tmp_path / "busy.log").read_text()
            time.sleep(0.2)
        trace = tmp_path / "waiting.trace"
        waiting = start_worker(study, 1, tmp_path / "waiting.log", trace=trace)
        deadline = time.monotonic() + 90
        while spans(trace, "claim") < 2:  # started, found the budget taken by the running trial, waits
            assert waiting.poll() is None and time.monotonic() < deadline, (tmp_path / "waiting.log").read_text()
            time.sleep(0.2)
        assert busy.poll() is None  # the budget's one trial is still running
        waiting.send_signal(signal.SIGINT)
        assert waiting.wait(timeout=30) == 130, (tmp_path / "waiting.log").read_text()[-3000:]
        log = (tmp_path / "waiting.log").read_text()
        assert "Traceback" not in log and "interrupted" in log
    finally:
        for proc in (busy, waiting):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert len(trials(postgres_url, "workers")) == 1  # the waiting worker asked for nothing


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_frozen_workers_trial_is_retried_once_its_heartbeat_is_stale(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on another host cannot be checked by pid: its trial comes back through Optuna's stale
    heartbeat. A stopped (SIGSTOP) worker here looks just like that: its pid lives, its heartbeat stops. The
    grace period is shortened from 30 s to 8 s (the heartbeat then beats every second): the same rule, sooner."""
    monkeypatch.setenv("AUTOTUNE_CORES_PER_RANK", "1")  # the frozen worker keeps its core; one is left
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE_S", str(GRACE_S))
    # 2 trials: the other worker runs the second, then finds the rest of the budget held by the frozen trial and
    # waits for its heartbeat to go stale. (With 3 its own two trials outlasted the grace period: nothing waited.)
    study = write_study(tmp_path, postgres_url, fault="slow", max_steps=30)
    frozen = start_worker(study, 2, tmp_path / "frozen.log")
    other: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "runs" / "workers" / "trial-0000" / "metrics.jsonl").exists():
            assert frozen.poll() is None and time.monotonic() < deadline, (tmp_path / "frozen.log").read_text()
            time.sleep(0.2)
        frozen.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        other = start_worker(study, 2, tmp_path / "other.log")
        other.wait(timeout=200)
        assert other.returncode == 0, (tmp_path / "other.log").read_text()[-3000:]
        assert time.monotonic() - stopped_at > GRACE_S  # not before the grace period
    finally:
        frozen.kill()
        frozen.wait(timeout=10)
        if other is not None and other.poll() is None:
            other.kill()
            other.wait(timeout=10)
    found = trials(postgres_url, "workers")
    assert found[0].state == TrialState.FAIL and found[0].user_attrs["worker"]["pid"] == frozen.pid
    retried = [t for t in found if t.system_attrs.get("failed_trial") == 0]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    assert retried[0].user_attrs["worker"]["pid"] == other.pid
    assert retried[0].user_attrs["config"] == found[0].user_attrs["config"]
    assert sum(counts_toward_budget(t) for t in found) == 2
