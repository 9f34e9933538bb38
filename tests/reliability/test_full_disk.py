"""The study folder on a small filesystem (a real tmpfs, mounted for the test) that fills up while a trial
trains: `autotune run` stops with one line naming the folder and what could not be written, exit 1, nothing
left running, the stored study intact; once space is freed, `status`, `report` and a resume work, and the
trial the full disk stopped is run again (a full disk is no verdict on its configuration)."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.tuner import counts_toward_budget

from .conftest import StudyDir, assert_nothing_left, write_study

SPACE = {"batch_size": {"choices": [8, 16, 24]}}
SLOW = {"workload_args": {"sleep_s": 0.1}, "trial": {"max_steps": 30, "report_every": 2}}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB tmpfs mounted under the test's folder, unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        _unmount(mount)


def _unmount(mount: Path) -> None:
    for _ in range(10):  # a process of a failed test may still hold a file there for a moment
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.5)
    subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, check=False)


def fill(folder: Path) -> Path:
    """Write a file in ``folder`` until its filesystem has no space left."""
    filler = folder / f"filler-{uuid.uuid4().hex[:6]}"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(chunk)
            out.flush()
    with contextlib.suppress(OSError), filler.open("ab") as out:  # the last bytes the buffer held
        out.write(chunk)
    return filler


def read_trials(db: Path) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    try:
        return optuna.load_study(study_name="full", storage=storage).get_trials()
    finally:
        storage.engine.dispose()  # no file left open on the small disk: it is unmounted next


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("storage", ["in_the_folder", "elsewhere", "elsewhere_by_option"])
def test_a_disk_that_fills_mid_trial_is_one_line_exit_1_and_the_study_resumes_once_freed(
    small_disk: Path, study_env: dict[str, str], tmp_path: Path, started: float, storage: str
) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    url = elsewhere if storage == "elsewhere" else None
    # elsewhere_by_option: the study file names no storage; every command is given `--storage URL`, as workers
    # sharing one database are (`report` had no --storage: such a study could not be reported)
    option = ["--storage", elsewhere] if storage == "elsewhere_by_option" else []
    slow = tmp_path / "slow"  # the trials are slow (3 s) while it exists: the first run's is caught mid-way
    slow.touch()
    sd: StudyDir = write_study(small_disk / "study", "full", study_env,
                               workload_args={**SLOW["workload_args"], "sleep_while": str(slow)},
                               trial=SLOW["trial"], search_space=SPACE,
                               sampler={"name": "random", "seed": 0}, **({"storage": url} if url else {}))
    db = sd.db if storage == "in_the_folder" else tmp_path / "elsewhere.db"
    log = tmp_path / "run.log"
    tuner = sd.popen("run", "study.yaml", "--n-trials", "3", *option, log=log)
    try:
        deadline = time.monotonic() + 120
        while not (sd.trial_dir(1) / "metrics.jsonl").exists():  # the baseline is stored, trial 1 trains
            assert tuner.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        filler = fill(small_disk)
        code = tuner.wait(timeout=120)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait(timeout=10)
    text = log.read_text()
    assert code == 1, text
    assert "Traceback" not in text and "Warning" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and text.rstrip().endswith(errors[0]), text
    assert "no space left" in errors[0] and str(small_disk) in errors[0], errors[0]
    assert_nothing_left(sd, started)
    # the stored study is intact (closing: sqlite3's own `with` commits but leaves the file open, and an open file
    # keeps the small disk from unmounting)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    filler.unlink()
    status = sd.cli("status", "study.yaml", *option)
    assert status.returncode == 0 and "complete: 1" in status.stdout, status.stdout + status.stderr
    report = sd.cli("report", "study.yaml", "-o", str(tmp_path / "report.html"), *option)
    assert report.returncode == 0, report.stdout + report.stderr
    slow.unlink()  # the resume's trials need not be slow: what it shows is the stopped one run again
    again = sd.cli("run", "study.yaml", "--n-trials", "3", *option)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = read_trials(db)
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert sum(counts_toward_budget(t) for t in trials) == 3
    # the trial the full disk stopped: interrupted (or, when nothing could be written on it, failed as stale by
    # the resume) and run again with its configuration
    stopped = trials[1]
    assert stopped.state == TrialState.FAIL, stopped.state
    assert stopped.user_attrs.get("outcome") in ("interrupted", None), stopped.user_attrs
    assert [t for t in trials[2:] if counts_toward_budget(t) and t.params == stopped.params]
    assert_nothing_left(sd, started)
