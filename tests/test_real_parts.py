"""The README's test command tests the real parts (PostgreSQL, SLURM, Chromium), or stops and says why.

tests/conftest.py installs a missing part's Debian packages before the first test (as root, apt-get) or
stops with one line. These checks run pytest on a few real-part tests in a subprocess, with the gate told
to treat a part as missing and not installable (this machine has every part).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BROWSER_TESTS = "tests/report/test_browser.py"


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "AUTOTUNE_TEST_SKIP_REAL")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**clean, **env}, check=False,
    )


def test_a_missing_part_stops_the_run_before_any_test_with_one_line() -> None:
    out = _pytest(BROWSER_TESTS, AUTOTUNE_TEST_PRETEND_MISSING="chromium")
    assert out.returncode == 2, out.stdout[-2000:]
    lines = [line for line in (out.stdout + out.stderr).splitlines() if "error:" in line]
    assert len(lines) == 1, out.stdout[-2000:]
    assert "apt-get install chromium" in lines[0] and "AUTOTUNE_TEST_SKIP_REAL=1" in lines[0]
    assert " passed" not in out.stdout and " failed" not in out.stdout


def test_skipping_the_real_parts_is_asked_for_explicitly() -> None:
    out = _pytest(BROWSER_TESTS, "-rs", AUTOTUNE_TEST_PRETEND_MISSING="chromium", AUTOTUNE_TEST_SKIP_REAL="1")
    assert out.returncode == 0, out.stdout[-2000:]
    assert "skipped" in out.stdout and "Chromium is not installed" in out.stdout
    assert " passed" not in out.stdout.splitlines()[-1]


def test_under_ci_a_skipped_real_part_test_fails() -> None:
    out = _pytest(BROWSER_TESTS, AUTOTUNE_TEST_PRETEND_MISSING="chromium", AUTOTUNE_TEST_SKIP_REAL="1", CI="true")
    assert out.returncode == 1, out.stdout[-2000:]
    assert "CI=true: a real-part test (chromium) skipped" in out.stdout
    assert " skipped" not in out.stdout.splitlines()[-1]


def test_tests_that_need_no_real_part_never_trigger_the_gate() -> None:
    out = _pytest("tests/test_dependencies.py::test_the_finder_sees_an_undeclared_import",
                  AUTOTUNE_TEST_PRETEND_MISSING="chromium,postgresql,slurm")
    assert out.returncode == 0, out.stdout[-2000:]
    assert "1 passed" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("path", ["tests/scale/test_pg_workers.py", "tests/trial_runner/test_slurm.py",
                                  "tests/trial_runner/test_launchers.py", "tests/report/test_browser.py"])
def test_the_real_part_tests_are_known_to_the_gate(path: str) -> None:
    # The gate finds a test's parts by its fixtures and `real` marks: each of these files needs one.
    out = _pytest(path, "--collect-only", AUTOTUNE_TEST_PRETEND_MISSING="chromium,postgresql,slurm")
    assert out.returncode == 2, out.stdout[-2000:]
    assert "error: the " in out.stdout + out.stderr
