"""AUTOTUNE_TEST_CPU_LOG (tests/conftest.py): each test's wall and CPU seconds, the processes it started included,
one JSON line a test. A test whose subprocess spins 0.5 s of CPU is charged it; one that sleeps is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TESTS = '''
import subprocess, sys, time

SPIN = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass"

def test_spins_in_a_subprocess():
    subprocess.run([sys.executable, "-c", SPIN], check=True)

def test_sleeps():
    time.sleep(0.5)
'''


def test_the_cpu_log_charges_each_test_the_cpu_of_the_processes_it_started(tmp_path: Path) -> None:
    (tmp_path / "test_cpu.py").write_text(TESTS)
    log = tmp_path / "cpu.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env |= {"PYTHONPATH": str(ROOT), "AUTOTUNE_TEST_CPU_LOG": str(log)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "test_cpu.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
                         check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = {r["id"].split("::")[1]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(lines) == {"test_spins_in_a_subprocess", "test_sleeps"}, lines
    spun, slept = lines["test_spins_in_a_subprocess"], lines["test_sleeps"]
    assert spun["cpu_s"] >= 0.5 and spun["worker"] == "main", spun  # the subprocess's spin and its start
    assert slept["cpu_s"] < 0.2 and slept["wall_s"] >= 0.5, slept
