"""The suite in parallel (`python -m pytest -n 3 --dist loadgroup`, README): tests of one group run on one worker.

Group `slurm` holds every SLURM test (one worker starts the session's cluster, once), group `timing` the tests
that assert wall-clock bounds or rank real runs (tests/conftest.py), which run in a row with no other test beside
them at their priority (as root, the others go on beside them 10 nicer). This runs tests/conftest.py on a few
tests of each kind under two pytest-xdist workers, each test recording its node id, its worker, when it ran and
its nice value.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import beside_nice

ROOT = Path(__file__).resolve().parent.parent

TESTS = '''
import json, os, time
import pytest

@pytest.fixture(autouse=True)
def _record(request):
    began = time.monotonic()
    time.sleep(0.3)  # long enough for the other worker's tests to overlap this one unless something stops them
    yield
    with open(os.environ["GROUPS_LOG"], "a") as log:
        log.write(json.dumps({"id": request.node.nodeid, "worker": os.environ["PYTEST_XDIST_WORKER"],
                              "began": began, "ended": time.monotonic(),
                              "nice": os.getpriority(os.PRIO_PROCESS, 0)}) + "\\n")

@pytest.mark.real("slurm")
@pytest.mark.parametrize("n", range(4))
def test_slurm(n):
    pass

@pytest.mark.xdist_group("timing")
@pytest.mark.parametrize("n", range(4))
def test_timing(n):
    pass

@pytest.mark.real("slurm")
@pytest.mark.xdist_group("timing")
def test_slurm_timed():
    pass

@pytest.mark.parametrize("n", range(12))
def test_free(n):
    pass
'''


@pytest.mark.slow  # two workers, each importing the conftest's autotune: seconds
@pytest.mark.real("slurm")  # the conftest's gate wants SLURM for a test marked real("slurm"), as in the suite
def test_each_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(TESTS)
    log = tmp_path / "groups.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's xdist worker
    env |= {"PYTHONPATH": str(ROOT), "GROUPS_LOG": str(log)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-n", "2", "--dist", "loadgroup", "--max-worker-restart=0", "test_groups.py"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env, check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 21, runs
    workers: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        name = re.split(r"[\[@]", run["id"].split("::")[1])[0]
        # the scheduler groups by this suffix of the node id; a SLURM test is in group slurm alone
        suffix = {"test_slurm": "@slurm", "test_slurm_timed": "@slurm", "test_timing": "@timing", "test_free": "]"}
        assert run["id"].endswith(suffix[name]), run
        workers[name.removesuffix("_timed")].add(run["worker"])
    assert len(workers["test_slurm"]) == 1 and len(workers["test_timing"]) == 1, dict(workers)
    assert len(workers["test_slurm"] | workers["test_timing"] | workers["test_free"]) == 2, dict(workers)
    # a timed test runs at its own priority, alone: a test that overlaps it (time.monotonic is one clock for the
    # machine) ran 10 nicer, where lowering it again is allowed (root), and none did elsewhere
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the run inherits this test's (beside a timed block: niced)
    timed = [r for r in runs if r["id"].endswith("@timing")]
    assert all(t["nice"] == base for t in timed), (base, timed)
    beside = [r for t in timed for r in runs if r is not t and r["began"] < t["ended"] and t["began"] < r["ended"]]
    if os.geteuid() == 0:
        assert all(r["nice"] == beside_nice(base) for r in beside), (base, beside)
        assert beside, runs  # the other worker did not wait out the block (its 12 free tests take 3.6 s)
    else:
        assert not beside, beside
    # the timed tests, run in a row by their worker, are one block: no test starts between two of them at nice 0
    block = (min(t["began"] for t in timed), max(t["ended"] for t in timed))
    inside = [r for r in runs if r not in timed and block[0] < r["began"] < block[1]]
    assert all(r["nice"] == beside_nice(base) for r in inside), (base, inside)
    # and a test after the block runs at the session's nice value again (root). A test that passed the gate
    # while the last timed test was ending runs niced and may begin just after it: half a second's margin.
    after = [r for r in runs if r["began"] > block[1] + 0.5]
    if os.geteuid() == 0 and after:
        assert all(r["nice"] == base for r in after), (base, after)
    # and the others did run side by side: the locks do not serialise the whole run
    untimed = [r for r in runs if not r["id"].endswith("@timing")]
    assert any(a["began"] < b["ended"] and b["began"] < a["ended"] for a in untimed for b in untimed if a is not b)
