"""The reliability suite's helpers: a study folder with the chaos workload, the real CLI (as a subprocess, or in
this process where a rerun or a read is not what a test checks), the stored study, and the process table.

Every `autotune` a test starts (``StudyDir.cli`` too, while it runs) carries a mark in its environment
(``AUTOTUNE_RELIABILITY_MARK``, one value per test). Trials inherit it (autotune passes ``AUTOTUNE_*``
variables into trial environments), so what a study started can be found in the process table even when other
autotune sessions run on the same machine — a warm zygote, a forked rank, a DataLoader worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests._processes import find_processes, wait_no_leftovers, wait_until_none
from tests.tuner import conftest as tuner

HERE = Path(__file__).parent
MARK_ENV = "AUTOTUNE_RELIABILITY_MARK"

#: Short real trials: well under a second of training; a hang is seen after 5 s, anything ends by 30 s.
SHORT_TRIAL = {"warmup_steps": 2, "max_steps": 10, "report_every": 2, "max_seconds": 30, "hang_seconds": 5}


@dataclass
class StudyDir(tuner.StudyDir):
    """``study.yaml`` beside a copy of chaos.py, run with the test's environment (its mark)."""

    @property
    def mark(self) -> str:
        assert self.env is not None
        return self.env[MARK_ENV]


def write_study(folder: Path, name: str, env: dict[str, str], *, workload_args: dict[str, Any] | None = None,
                entrypoint: str = "chaos.py:build", trial: dict[str, Any] | None = None, **sections: Any) -> StudyDir:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "chaos.py", folder / "chaos.py")
    doc: dict[str, Any] = {
        "name": name,
        "workload": {"entrypoint": entrypoint, "args": dict(workload_args or {})},
        "trial": {**SHORT_TRIAL, **(trial or {})},
        "pruner": {"name": "none"},
        "confirm": {"top_k": 0},
        **sections,
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return StudyDir(folder, name, env)


# ------------------------------------------------------------------------------------------- the process table
def _carries(proc: psutil.Process, mark: str) -> bool:
    try:
        return proc.environ().get(MARK_ENV) == mark
    except psutil.AccessDenied:
        return True  # cannot tell: count it
    except psutil.Error:
        return False


def marked_processes(mark: str, *, since: float = 0.0, needle: str = "") -> list[str]:
    """Live processes carrying ``mark`` (started by this test), created after ``since``, whose command line
    contains ``needle``."""
    return find_processes(lambda proc, _cwd, cmdline: proc.info["create_time"] >= since - 1 and needle in cmdline
                          and _carries(proc, mark), exclude=(os.getpid(),))


def wait_none_marked(mark: str, *, since: float = 0.0, needle: str = "", within_s: float = 10.0) -> list[str]:
    return wait_until_none(lambda: marked_processes(mark, since=since, needle=needle), within_s)


def assert_nothing_left(sd: StudyDir, since: float) -> None:
    """Nothing the study started is alive: no process of any trial folder (torchrun, zygote-forked ranks,
    DataLoader workers), no process whose command line names autotune.trial_runner started since ``since``,
    and no process at all carrying the test's mark (the tuner, its warm zygote)."""
    dirs = set(sd.runs.glob("trial-*")) if sd.runs.is_dir() else set()
    for trial_dir in sorted(dirs):
        assert not wait_no_leftovers(trial_dir, within_s=10), f"processes of {trial_dir} outlived the run"
    assert not wait_none_marked(sd.mark, since=since, needle="autotune.trial_runner"), "trial processes outlived it"
    assert not wait_none_marked(sd.mark, since=since), "processes started by the tuner outlived it"


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def study_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the test's `autotune` processes: its mark, and a lease folder of its own (other
    autotune sessions on this machine do not hold up its trials). Anything still marked at the end is
    killed, so a failing test does not poison the next one."""
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK_ENV: mark, "AUTOTUNE_LEASE_DIR": str(tmp_path / "leases")}
    env.pop("AUTOTUNE_CORES_PER_RANK", None)
    yield env
    for line in marked_processes(mark):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


@pytest.fixture
def started() -> float:
    """When the test began (processes created before it are not its own)."""
    return time.time()


@pytest.fixture
def make_study(tmp_path: Path, study_env: dict[str, str]) -> Any:
    def make(name: str, **kwargs: Any) -> StudyDir:
        return write_study(tmp_path / name, name, study_env, **kwargs)

    return make
