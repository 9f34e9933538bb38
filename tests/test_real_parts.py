"""The README's test command tests the real parts (PostgreSQL, SLURM, Chromium), or stops and says why.

tests/conftest.py installs a missing part's Debian packages before the first test (as root, apt-get) or
stops with one line. These checks run pytest on a few real-part tests in a subprocess, with the gate told
to treat a part as missing and not installable (this machine has every part).

The checks share one subprocess: it calls ``pytest.main`` (what ``python -m pytest`` runs) once per check, each
with the check's arguments and environment, after a marker line that splits the output, so a test reads only
its own run's exit code and output. A fresh interpreter per check cost ~5 s each (Python, torch through the
conftest, the plugins assertion-rewritten); this one pays that once. The gate reads the environment at each
call and keeps nothing between calls. Only the checks of the selected tests run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
BROWSER_TESTS = "tests/report/test_browser.py"
GATE_ENV = ("CI", "AUTOTUNE_TEST_SKIP_REAL", "AUTOTUNE_TEST_PRETEND_MISSING")
MARK = "=== real-parts check: "

# Under pytest-xdist (--dist loadgroup) one worker runs this file's tests, so the shared subprocess runs once.
pytestmark = pytest.mark.xdist_group("real_parts")


class Run(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


CHECKS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}  # by test function
Test = TypeVar("Test", bound=Callable[..., None])


def check(*args: str, **env: str) -> Callable[[Test], Test]:
    """The pytest run a test reads (its ``run`` fixture): pytest's arguments, where ``{name}`` is the test's
    parameter of that name, and the variables of the gate's environment."""

    def register(test: Test) -> Test:
        CHECKS[test.__name__] = (args, env)
        return test

    return register


# Each check in turn, in this interpreter: the gate's variables unset, then the check's own.
DRIVER = f"""
import json, os, sys
import pytest
for name, (args, env) in json.load(sys.stdin).items():
    for key in {GATE_ENV!r}:
        os.environ.pop(key, None)
    os.environ.update(env)
    for stream in (sys.stdout, sys.stderr):
        print("\\n" + {MARK!r} + name, file=stream, flush=True)
    code = int(pytest.main(["-q", "-p", "no:cacheprovider", *args]))
    sys.stderr.flush()
    print("\\n" + {MARK!r} + "exit " + str(code), flush=True)
"""


def _chunks(text: str) -> list[tuple[str, str]]:
    """(marker, what follows it up to the next marker) for each marker line of the driver's output."""
    return [(head, body.rstrip("\n")) for head, _, body in (chunk.partition("\n") for chunk in text.split(MARK)[1:])]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> dict[str, Run]:
    """The checks of this file's selected tests, by test name, run in one subprocess."""
    checks: dict[str, tuple[list[str], dict[str, str]]] = {}
    for item in request.session.items:
        if item.path == Path(__file__) and isinstance(item, pytest.Function):
            args, env = CHECKS[item.originalname]
            params = item.callspec.params if hasattr(item, "callspec") else {}
            checks[item.name] = ([arg.format(**params) for arg in args], env)
    clean = {k: v for k, v in os.environ.items() if k not in GATE_ENV}
    out = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(checks), capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=clean, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    stdout: dict[str, str] = {}
    codes: dict[str, int] = {}
    for head, body in _chunks(out.stdout):
        if head.startswith("exit "):
            codes[list(stdout)[-1]] = int(head.removeprefix("exit "))
        else:
            stdout[head] = body
    stderr = dict(_chunks(out.stderr))
    assert list(codes) == list(stdout) == list(stderr) == list(checks), (out.stdout + out.stderr)[-3000:]
    return {name: Run(codes[name], stdout[name], stderr[name]) for name in checks}


def _summary(run: Run) -> str:
    """The run's last line: pytest's summary (``5 skipped in 0.98s``)."""
    summary = run.stdout.splitlines()[-1]
    assert re.search(r" in [0-9.]+s\b", summary), run.stdout[-2000:]
    return summary


@pytest.fixture
def run(runs: dict[str, Run], request: pytest.FixtureRequest) -> Run:
    """This test's pytest run (its @check)."""
    return runs[request.node.name]


@check(BROWSER_TESTS, AUTOTUNE_TEST_PRETEND_MISSING="chromium")
def test_a_missing_part_stops_the_run_before_any_test_with_one_line(run: Run) -> None:
    assert run.returncode == 2, run.stdout[-2000:]
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "error:" in line]
    assert len(lines) == 1, run.stdout[-2000:]
    assert "apt-get install chromium" in lines[0] and "AUTOTUNE_TEST_SKIP_REAL=1" in lines[0]
    assert " passed" not in run.stdout and " failed" not in run.stdout


@check(BROWSER_TESTS, "-rs", AUTOTUNE_TEST_PRETEND_MISSING="chromium", AUTOTUNE_TEST_SKIP_REAL="1")
def test_skipping_the_real_parts_is_asked_for_explicitly(run: Run) -> None:
    assert run.returncode == 0, run.stdout[-2000:]
    assert "skipped" in run.stdout and "Chromium is not installed" in run.stdout
    summary = _summary(run)
    assert "skipped" in summary and " passed" not in summary


@check(BROWSER_TESTS, AUTOTUNE_TEST_PRETEND_MISSING="chromium", AUTOTUNE_TEST_SKIP_REAL="1", CI="true")
def test_under_ci_a_skipped_real_part_test_fails(run: Run) -> None:
    assert run.returncode == 1, run.stdout[-2000:]
    assert "CI=true: a real-part test (chromium) skipped" in run.stdout
    assert " skipped" not in _summary(run)


@check("tests/test_dependencies.py::test_the_finder_sees_an_undeclared_import",
       AUTOTUNE_TEST_PRETEND_MISSING="chromium,postgresql,slurm")
def test_tests_that_need_no_real_part_never_trigger_the_gate(run: Run) -> None:
    assert run.returncode == 0, run.stdout[-2000:]
    assert "1 passed" in run.stdout


@pytest.mark.slow
@pytest.mark.parametrize("path", ["tests/scale/test_pg_workers.py", "tests/trial_runner/test_slurm.py",
                                  "tests/trial_runner/test_launchers.py", "tests/report/test_browser.py"])
@check("{path}", "--collect-only", AUTOTUNE_TEST_PRETEND_MISSING="chromium,postgresql,slurm")
def test_the_real_part_tests_are_known_to_the_gate(path: str, run: Run) -> None:
    # The gate finds a test's parts by its fixtures and `real` marks: each of these files needs one.
    assert run.returncode == 2, f"{path}: {run.stdout[-2000:]}"
    assert "error: the " in run.stdout + run.stderr
