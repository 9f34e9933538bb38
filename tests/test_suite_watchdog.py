"""A test that hangs where pytest-timeout's signal cannot reach it (C code holding the GIL) still ends the
suite, with every thread's stack, instead of running into CI's limit silently (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_hang_in_c_code_ends_the_run_with_the_stacks(tmp_path: Path) -> None:
    # the suite's real hang, in miniature: the main thread joins, holding the GIL, a thread that needs it
    (tmp_path / "test_stuck.py").write_text(
        "import ctypes\nimport threading\n\n\n"
        "def test_stuck_in_c_code():\n"
        "    thread = threading.Thread(target=lambda: sum(range(10**10)), daemon=True)\n"
        "    thread.start()\n"
        "    ctypes.PyDLL(None).pthread_join(ctypes.c_ulong(thread.ident), None)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_TEST_HANG_GRACE_S": "2"}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "-o", "timeout=1",
         str(tmp_path / "test_stuck.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False,
    )
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert time.monotonic() - started < 45
    assert "Timeout (0:00:03)!" in out.stderr and "test_stuck_in_c_code" in out.stderr
