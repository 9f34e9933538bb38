from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from autotune.spec import StudySpec

from .studies import MULTI_PLANS, SINGLE_PLANS, Plan, make

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.real("chromium")  # installed before the session by tests/conftest.py


@dataclass
class Built:
    spec: StudySpec
    study: optuna.Study
    yaml: Path
    plans: list[Plan]


@pytest.fixture(autouse=True)
def _quiet_optuna() -> Iterator[None]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def _build(root: Path, name: str, objectives: list[tuple[str, str]], plans: list[Plan], confirm: bool) -> Built:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        spec, study, path = make(root, name, objectives, plans, confirm)
    return Built(spec, study, path, plans)


@pytest.fixture(scope="session")
def single(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A single-objective study (throughput) with baseline, search, pruned, oom, crashed, timeout, diverged
    and confirmation trials, and the autotune_confirmation attribute."""
    return _build(tmp_path_factory.mktemp("single"), "demo-single", [("throughput", "maximize")], SINGLE_PLANS,
                  True)


@pytest.fixture(scope="session")
def unconfirmed(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The same trials without the confirmation attribute (the report falls back to single trials)."""
    return _build(tmp_path_factory.mktemp("unconfirmed"), "demo-unconfirmed", [("throughput", "maximize")],
                  SINGLE_PLANS, False)


@pytest.fixture(scope="session")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A two-objective study (throughput up, peak memory down) with a pruned, an oom and a hung trial."""
    return _build(tmp_path_factory.mktemp("multi"), "demo-multi",
                  [("throughput", "maximize"), ("peak_memory_mb", "minimize")], MULTI_PLANS, False)


def run_chromium(args: list[str], url: str, profile: Path, timeout_s: float = 45.0) -> str:
    """Headless Chromium on ``url`` with ``args`` (--dump-dom, --screenshot=...); returns stdout.

    A fresh profile, no network services, and a proxy that does not exist: any request leaving the
    machine fails, so a page that renders rendered offline. The whole process group dies at the end.
    """
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--mute-audio", f"--user-data-dir={profile}",
        "--proxy-server=http://127.0.0.1:9", *args, url,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {timeout_s} s on {url}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    if proc.returncode != 0:
        pytest.fail(f"chromium exited {proc.returncode} on {url}")
    return out.decode("utf-8", errors="replace")


def data_values(dom: str) -> dict[str, str]:
    """``data-key`` -> ``data-value`` of the report's headline numbers."""
    return dict(re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', dom))
