"""The suite's seam (tests/_shared_zygote.py): in-process studies fork their trials from the session's zygote,
and a study whose trials need another environment still gets a zygote of its own, closed with it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests._processes import zygotes
from tests._shared_zygote import SharedZygote

from .conftest import StudyDir, assert_nothing_left

SPACE = {"batch_size": {"choices": [8, 16]}}
TRIAL = {"warmup_steps": 1, "max_steps": 4, "report_every": 2, "max_seconds": 30, "hang_seconds": 10}


def _run_watched(sd: StudyDir, *args: str) -> set[int]:
    """``autotune ARGS`` in this process; every zygote of this process seen while it ran (a session launcher of
    tests/trial_runner may hold one of its own)."""
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            seen.update(zygotes())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = sd.cli(*args)
    finally:
        done.set()
        watcher.join()
    assert out.returncode == 0, out.stdout + out.stderr
    return seen


def test_two_in_process_studies_fork_from_the_sessions_zygote(
    study_dir: Callable[..., StudyDir], _shared_zygote: SharedZygote
) -> None:
    first = study_dir("lent-a", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    second = study_dir("lent-b", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    before = zygotes()
    for sd in (first, second):
        seen = _run_watched(sd, "run", "study.yaml", "--n-trials", "2")
        assert _shared_zygote.proc is not None and _shared_zygote.proc.poll() is None
        assert seen - before <= {_shared_zygote.proc.pid}, "the run started a zygote of its own"
        assert_nothing_left(sd.load(), sd)  # the trials' processes are gone; the zygote lives in its own folder
        assert zygotes() <= before | {_shared_zygote.proc.pid}
    for sd in (first, second):
        trials = sd.load().trials
        assert len(trials) == 2 and all(t.user_attrs["outcome"] == "complete" for t in trials)


def test_a_study_with_env_values_starts_and_closes_its_own_zygote(
    study_dir: Callable[..., StudyDir], _shared_zygote: SharedZygote
) -> None:
    sd = study_dir("own-env", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0},
                   env={"OMP_WAIT_POLICY": "ACTIVE"})
    before = zygotes()
    seen = _run_watched(sd, "run", "study.yaml", "--n-trials", "1")
    shared = {_shared_zygote.proc.pid} if _shared_zygote.proc is not None else set()
    assert seen - before - shared, "the run forked its trial from a zygote started under another environment"
    assert_nothing_left(sd.load(), sd)
    assert zygotes() <= before  # its own zygote ended with the run
