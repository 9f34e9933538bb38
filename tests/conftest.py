"""Real servers for the tests: a private PostgreSQL and a single-node SLURM cluster on localhost.

Both start once per test session from the Debian packages (`postgresql`; `slurmctld slurmd slurm-client
munge`), in a temporary folder, on free local ports, and are stopped at the end. Set
AUTOTUNE_TEST_SLURM_CONF to the slurm.conf of a running cluster to use that one instead.

The real parts (PostgreSQL, SLURM, Chromium) are not optional: when the tests collected need one whose
Debian packages are missing, the session installs them first (as root, with apt-get), or stops before the
first test with one line naming the packages and the command that installs them. Only
AUTOTUNE_TEST_SKIP_REAL=1, set on purpose, runs the suite with those tests skipped; under CI=true a
skipped real-part test is a failure.

Every test session also gets a lease folder of its own (AUTOTUNE_LEASE_DIR), so its trials never wait
for trials of another session on the same machine.

In parallel (`python -m pytest -n 3 --dist loadgroup`, pytest-xdist; README's test section) every worker is
a session of its own: its own PostgreSQL, lease folder and warm zygote. Tests of one xdist group run on one
worker, one after another: group `slurm` holds every test of a SLURM cluster (so one worker starts it, once),
group `timing` the tests that assert wall-clock bounds or rank real runs (marked in their files); the timed
tests run as one block with no other test beside it at their priority: as root, the other workers' tests go on
beside the block 10 nicer and take the cores the timed tests leave.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from autotune.trial_runner import free_port as _free_port
from tests._processes import family_cpu_s, process_family
from tests._shared_zygote import SharedZygote, lent

# OpenMP threads waiting for work sleep instead of spinning: the suite runs three workers' trials on two cores, where
# a spinning thread holds a core another process's rank needs (two test files, -n 3, alternated A B B A: 62-67 s
# without, 57-58 s with). The trials' environment keeps OMP_ variables, so the ranks get it; a user's runs keep
# OpenMP's default; a test that sets OMP_WAIT_POLICY itself keeps its own.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def _as(user: str | None, cmd: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _private_dir(prefix: str) -> Path:
    """A folder the servers' own users (postgres, munge) can enter: pytest's tmp folders are 0700."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session", autouse=True)
def _session_lease_dir() -> Iterator[None]:
    folder = tempfile.mkdtemp(prefix="autotune-test-leases-")
    previous = os.environ.get("AUTOTUNE_LEASE_DIR")
    os.environ["AUTOTUNE_LEASE_DIR"] = folder
    yield
    if previous is None:
        os.environ.pop("AUTOTUNE_LEASE_DIR", None)
    else:
        os.environ["AUTOTUNE_LEASE_DIR"] = previous
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def _shared_zygote(_session_lease_dir: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedZygote]:
    shared = SharedZygote(tmp_path_factory.mktemp("zygote"))
    yield shared
    shared.close()


@pytest.fixture(autouse=True)
def _lend_the_zygote(request: pytest.FixtureRequest, _shared_zygote: SharedZygote) -> Iterator[None]:
    """In-process studies borrow the session's warm zygote (tests/_shared_zygote.py), except in a test marked
    `own_zygote`: one that checks the zygote's own start or end, or runs two launchers at once."""
    if request.node.get_closest_marker("own_zygote"):
        yield
        return
    with lent(_shared_zygote):
        yield


# ---------------------------------------------------------------------------------------------- real parts
@dataclass(frozen=True)
class RealPart:
    """A server or program some tests run for real, and the Debian packages it comes from."""

    title: str
    packages: tuple[str, ...]
    present: Callable[[], bool]
    fixtures: tuple[str, ...] = ()  # tests using one of these need the part
    recommends: bool = False  # install the packages' recommended ones too (chromium's fonts)


def _postgres_present() -> bool:
    bin_dir = _postgres_bin()
    return bin_dir is not None and (bin_dir / "pg_ctl").exists()


def _slurm_present() -> bool:
    return all(shutil.which(n) for n in _SLURM_CLIENTS) and all(_sbin(n) for n in _SLURM_DAEMONS)


CHROMIUM = Path("/usr/bin/chromium")
REAL_PARTS: dict[str, RealPart] = {
    "postgresql": RealPart("PostgreSQL", ("postgresql",), _postgres_present, ("postgres_server",)),
    "slurm": RealPart("SLURM", ("slurmctld", "slurmd", "slurm-client", "munge"), _slurm_present,
                      ("slurm_cluster", "netns_cluster")),
    "chromium": RealPart("Chromium", ("chromium",), CHROMIUM.exists, recommends=True),
}
SKIP_REAL = "AUTOTUNE_TEST_SKIP_REAL"
# tests/test_real_parts.py checks this gate on a machine that has every part: it names parts to treat as
# missing and not installable.
PRETEND_MISSING = "AUTOTUNE_TEST_PRETEND_MISSING"


def _present(name: str) -> bool:
    return name not in os.environ.get(PRETEND_MISSING, "").split(",") and REAL_PARTS[name].present()


_STDERR_FD: list[int] = []  # the terminal's stderr, kept while pytest's capture is suspended (pytest_configure)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real(part): the test runs a real part (postgresql, slurm, chromium)")
    config.addinivalue_line("markers", "own_zygote: in-process studies start their own zygote, as the product does")
    _STDERR_FD.append(os.dup(2))  # fd 2 is a capture file while a test runs
    # A shell ignores SIGINT for what it starts in the background (`pytest &` in a script, nohup), and an
    # ignored signal stays ignored in every process started from here: the tests' `autotune run` would not
    # see the Ctrl-C a test sends it (tests/tuner/test_interruptions.py). A user's process gets it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _parts_of(item: pytest.Item) -> set[str]:
    fixtures = set(getattr(item, "fixturenames", ()))
    parts = {name for name, part in REAL_PARTS.items() if fixtures & set(part.fixtures)}
    for mark in item.iter_markers("real"):
        unknown = set(mark.args) - set(REAL_PARTS)
        if unknown:
            names = ", ".join(sorted(unknown))
            raise pytest.UsageError(f"{item.nodeid}: real({names}): not one of {sorted(REAL_PARTS)}")
        parts.update(mark.args)
    return parts


def _install(config: pytest.Config, parts: list[str]) -> str | None:
    """apt-get install the parts' packages; None when it worked, else why not."""
    if os.environ.get(PRETEND_MISSING):
        return "not installable in this check"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "not root" if os.geteuid() != 0 else "no apt-get"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    say = reporter.write_line if reporter is not None else print
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [["apt-get", "update", "-q"]]
    for flag in (False, True):  # chromium's recommended packages (fonts) come with it
        chosen = [p for name in parts if REAL_PARTS[name].recommends is flag for p in REAL_PARTS[name].packages]
        if chosen:
            steps.append(["apt-get", "install", "-y", "-q", *([] if flag else ["--no-install-recommends"]), *chosen])
    log = Path(tempfile.gettempdir()) / "autotune-test-apt.log"
    with contextlib.ExitStack() as stack:
        if capture is not None:
            stack.enter_context(capture.global_and_fixture_disabled())
        packages = ", ".join(p for name in parts for p in REAL_PARTS[name].packages)
        say(f"installing the Debian packages of the real-part tests ({packages}); "
            f"apt-get's output goes to {log}; set {SKIP_REAL}=1 to skip those tests instead")
        with log.open("w") as out:
            for cmd in steps:
                started = time.monotonic()
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                      timeout=1800, check=False)
                say(f"  {' '.join(cmd[:2])}: exit {done.returncode} in {time.monotonic() - started:.0f} s")
                if done.returncode != 0:
                    return f"`{' '.join(cmd)}` failed (exit {done.returncode}; see {log})"
    return None


@contextlib.contextmanager
def _one_session_at_a_time(name: str) -> Iterator[None]:
    """An exclusive lock on a file in the temp folder. pytest-xdist's workers each collect the tests and would
    each run the installation gate: the first installs, the others wait and then find the parts present. The
    wait is bounded by the holder's: apt-get's steps have timeouts, and the lock goes with its process."""
    with (Path(tempfile.gettempdir()) / f"autotune-test-{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before the first test: every real part the collected tests need is installed, or the run stops. Under
    pytest-xdist's --dist loadgroup, each test's group is in its node id, where the scheduler reads it."""
    _install_real_parts(config, items)
    if getattr(config, "workerinput", None) is not None and config.getvalue("loadgroup"):
        for item in items:
            _put_group_in_node_id(item)


def _install_real_parts(config: pytest.Config, items: list[pytest.Item]) -> None:
    needed = sorted({part for item in items for part in _parts_of(item)})
    if not needed or os.environ.get(SKIP_REAL) == "1" or all(_present(name) for name in needed):
        return
    with _one_session_at_a_time("apt"):
        missing = [name for name in needed if not _present(name)]  # again: another worker may have installed them
        if not missing:
            return
        why = _install(config, missing)
        still = [name for name in missing if not _present(name)]
    if not still:
        return
    packages = " ".join(p for name in still for p in REAL_PARTS[name].packages)
    titles = ", ".join(REAL_PARTS[name].title for name in still)
    pytest.exit(
        f"error: the {titles} tests need Debian packages that are not installed ({why or 'installed, not found'}): "
        f"run `sudo apt-get install {packages}` and try again, or set {SKIP_REAL}=1 to run without those tests",
        returncode=2,
    )


def _groups_of(item: pytest.Item) -> list[str]:
    """The test's xdist groups, as the scheduler sees them (:func:`_put_group_in_node_id`)."""
    if "slurm" in _parts_of(item):
        return ["slurm"]
    return sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                   for m in item.iter_markers("xdist_group")})


def _put_group_in_node_id(item: pytest.Item) -> None:
    """``tests/x.py::test@slurm``: the suffix pytest-xdist's loadgroup scheduler groups by (the groups of the
    test's xdist_group marks, joined by ``_``). A SLURM test is in group ``slurm`` alone, marked or not: in any
    other group it would run on another worker, which would start a second cluster.

    pytest-xdist 3.8 appends the suffix itself by writing ``item._nodeid``, which pytest 8 read for
    ``item.nodeid``; pytest 9.2 reads ``item._id`` (a NodeId) instead, so the suffix never reached the
    scheduler and grouped tests ran on any worker. Here it goes into whichever of the two ``nodeid`` reads
    (private names of pytest; checked with pytest 9.2 and xdist 3.8); a pytest that keeps it elsewhere stops
    the run here, and tests/test_suite_parallel.py fails if the groups do not hold."""
    groups = _groups_of(item)
    if not groups:
        return
    suffix = "@" + "_".join(groups)
    if item.nodeid.endswith(suffix):  # pytest-xdist's own suffix took
        return
    grouped = item.nodeid + suffix
    node_id = getattr(item, "_id", None)
    if node_id is not None and not isinstance(node_id, str):  # pytest 9.2: a NodeId
        item._id = type(node_id).parse(grouped)
    else:
        item._nodeid = grouped
    if item.nodeid != grouped:
        raise pytest.UsageError(f"{item.nodeid}: cannot add its xdist group to its node id with this pytest "
                                "(tests/conftest.py, _put_group_in_node_id)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for name in sorted(_parts_of(item)):
        part = REAL_PARTS[name]
        if not _present(name):
            pytest.skip(f"{part.title} is not installed ({SKIP_REAL}=1): apt-get install {' '.join(part.packages)}")


def _lock_path(controller_pid: int, name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"autotune-test-{controller_pid}-{name}.lock"


_TIMED_BLOCK: list[IO[str]] = []  # gate and run, held from one timed test to the next one of this worker
BESIDE_NICE = 10  # a test beside a timed block runs this much nicer than the session (CFS weight 110 against 1,024)
_BASE_NICE = os.getpriority(os.PRIO_PROCESS, 0)  # the session's own (a pytest run inside a niced test inherits it)
_NICE: list[int] = [_BASE_NICE]  # this worker's processes' nice value now


def beside_nice(base: int) -> int:
    """The nice value of a test beside a timed block, in a session started at ``base``."""
    return min(19, base + BESIDE_NICE)


def _is_timed(item: pytest.Item | None) -> bool:
    return item is not None and "timing" in _groups_of(item)


def _nice_family(nice: int) -> None:
    """Every thread of this worker and of its processes (its zygote, the trials it runs) at ``nice``: a process
    started later inherits it. Raising is anyone's right; lowering it again is root's (the caller checks)."""
    if _NICE[0] == nice:
        return
    for pid in process_family(os.getpid()):
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):
                    os.setpriority(os.PRIO_PROCESS, int(tid), nice)
    _NICE[0] = nice


# outermost (tryfirst): a wait here is not counted in the test's timeout
@pytest.hookimpl(hookwrapper=True, tryfirst=True, specname="pytest_runtest_protocol")
def pytest_timed_tests_run_alone(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist a test of group `timing` runs with no other test beside it at its priority, as in a
    serial run: its wall-clock bounds are the product's (a stop within a grace period), not the other workers'
    load. Two locks shared by the run's workers (files named after their controller, the workers' parent):
    every test holds `run` shared while it runs, a timed one holds it exclusively; `gate` is taken first by
    both, and held by a timed test while it waits for the running ones to end and while it runs. A timed test
    whose next test is timed too (the group runs on one worker, in a row) hands both locks on: the group is one
    block, not one wait for the others' running tests per timed test.

    A test that finds the gate held while a timed block runs does not wait for the block (~290 s, in which
    the timed tests use about half of two cores): it runs beside it 10 nicer than the session, it and every
    process it starts, so the timed test's processes take the cores whenever they need them and the others
    get what they leave (a run of 16.7 minutes where the block alone had made it 18.4). The next test outside
    a block runs at the session's nice value again, which needs root (lowering a nice value): elsewhere a test
    waits for the block to end, as before."""
    if getattr(item.config, "workerinput", None) is None:
        yield
        return
    timed, beside = _is_timed(item), False
    if _TIMED_BLOCK:  # the previous test was timed and handed its locks on
        gate, run = _TIMED_BLOCK
        _TIMED_BLOCK.clear()
    else:
        controller = os.getppid()
        gate, run = _lock_path(controller, "gate").open("a"), _lock_path(controller, "run").open("a")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | (0 if timed or os.geteuid() != 0 else fcntl.LOCK_NB))
        except BlockingIOError:  # a timed block runs (or another test passes the gate this instant)
            beside = True
        else:
            fcntl.flock(run, fcntl.LOCK_EX if timed else fcntl.LOCK_SH)
            if not timed:
                fcntl.flock(gate, fcntl.LOCK_UN)
    _nice_family(beside_nice(_BASE_NICE) if beside else _BASE_NICE)
    try:
        yield
    finally:
        if timed and _is_timed(nextitem):
            _TIMED_BLOCK.extend((gate, run))
        else:
            for lock in (run, gate):
                if not beside:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()


CPU_LOG = "AUTOTUNE_TEST_CPU_LOG"  # a file: each test's wall and CPU seconds, one JSON line a test


# innermost (trylast): the timed gate's wait is not the test's
@pytest.hookimpl(hookwrapper=True, trylast=True, specname="pytest_runtest_protocol")
def pytest_cpu_log(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With AUTOTUNE_TEST_CPU_LOG set, every test appends ``{"id", "worker", "started", "wall_s", "cpu_s"}`` to that
    file: when it began (Unix time, to lay the workers' runs side by side), its wall seconds, and the CPU of the
    worker and every process it started (its zygote, the trials, `autotune run` subprocesses) meanwhile.
    Under `-n 3` the suite is CPU-bound, so this is where its time goes."""
    path = os.environ.get(CPU_LOG)
    if not path:
        yield
        return
    cpu, began, at = family_cpu_s(os.getpid()), time.monotonic(), time.time()
    yield
    line = json.dumps({"id": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                       "started": round(at, 2), "wall_s": round(time.monotonic() - began, 3),
                       "cpu_s": round(family_cpu_s(os.getpid()) - cpu, 2)})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one write per line: the workers' lines do not interleave
    finally:
        os.close(fd)


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None:  # the controller (or a serial run): the workers' locks
        for name in ("gate", "run"):
            _lock_path(os.getpid(), name).unlink(missing_ok=True)


# pytest-timeout's signal method cannot stop a test whose main thread is blocked in C code (a gloo thread
# joined while it waits for the GIL, say): the suite then hangs until CI's limit and prints nothing. This
# watchdog fires a minute past the test's own timeout, dumps every thread's stack and ends the run, exit 1.
HANG_GRACE = "AUTOTUNE_TEST_HANG_GRACE_S"  # tests/test_real_parts.py shortens it to check the watchdog


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker is not None and marker.args else float(item.config.getini("timeout") or 0)
    if limit > 0:
        grace = float(os.environ.get(HANG_GRACE, "60"))
        faulthandler.dump_traceback_later(limit + grace, exit=True, file=_STDERR_FD[0] if _STDERR_FD else 2)
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under CI=true a real-part test that skipped is a failure: CI must have tested the real parts."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and os.environ.get("CI", "").lower() == "true" and _parts_of(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI=true: a real-part test ({', '.join(sorted(_parts_of(item)))}) skipped: {reason}"


# ---------------------------------------------------------------------------------------------- PostgreSQL
def _postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


@dataclass(frozen=True)
class PostgresControl:
    """The session's PostgreSQL, to stop and start it (a storage outage)."""

    pg_ctl: tuple[str, ...]  # pg_ctl -D DATA, as the server's user
    options: str
    log: Path

    def running(self) -> bool:
        return _run([*self.pg_ctl, "status"]).returncode == 0

    def stop(self) -> None:
        """A fast shutdown, as for maintenance: open connections are cut."""
        out = _run([*self.pg_ctl, "-m", "fast", "-w", "-t", "60", "stop"], timeout=90)
        if out.returncode != 0:
            pytest.fail(f"PostgreSQL did not stop: {out.stderr.strip()[-400:]}\n{_tail(self.log)}")

    def start(self) -> None:
        """Start it again (on the same port), once it accepts connections; nothing when it runs."""
        if self.running():
            return
        out = _run([*self.pg_ctl, "-o", self.options, "-l", str(self.log), "-w", "-t", "60", "start"], timeout=90)
        if out.returncode != 0:
            pytest.fail(f"PostgreSQL did not start again: {out.stderr.strip()[-400:]}\n{_tail(self.log)}")


_POSTGRES: list[PostgresControl] = []  # the session's server, once started


@pytest.fixture
def postgres_control(postgres_server: str) -> Iterator[PostgresControl]:
    """Stop and start the session's PostgreSQL in a test; it runs again afterwards, whatever the test did."""
    control = _POSTGRES[0]
    try:
        yield control
    finally:
        control.start()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A private PostgreSQL (trust auth, fsync off) on a free local port: its base URL, no database."""
    bin_dir = _postgres_bin()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    user = None
    if os.geteuid() == 0:  # initdb refuses root
        user = "postgres"
        if _run(["id", "-u", user]).returncode != 0:
            pytest.fail("running as root, but there is no 'postgres' user to run PostgreSQL as")
    root = _private_dir("autotune-pg-")
    if user:
        shutil.chown(root, user)
    data, log, port = root / "data", root / "postgres.log", _free_port()
    init = _run(_as(user, [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "autotune",
                           "--no-sync", "-E", "UTF8"]))
    if init.returncode != 0:
        pytest.fail(f"initdb failed: {init.stderr.strip()[-800:]}")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    start = _run(_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log),
                            "-w", "-t", "60", "start"]), timeout=90)
    if start.returncode != 0:
        pytest.fail(f"PostgreSQL did not start: {start.stderr.strip()[-400:]}\n{_tail(log)}")
    _POSTGRES[:] = [PostgresControl(tuple(_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data)])), options, log)]
    try:
        yield f"postgresql+psycopg://autotune@127.0.0.1:{port}"
    finally:
        _run(_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "30", "stop"]))
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's PostgreSQL: its SQLAlchemy URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    conninfo = postgres_server.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres_server}/{name}"


# --------------------------------------------------------------------------------------------------- SLURM
@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    node: str

    def steps(self) -> list[str]:
        """Every job step the cluster lists (``JOBID.STEPID NAME``)."""
        out = _run(["squeue", "-h", "-s", "-o", "%i %j"], timeout=30)
        return [line for line in out.stdout.splitlines() if line.strip()]

    def jobs(self) -> list[str]:
        out = _run(["squeue", "-h", "-o", "%i %j %T"], timeout=30)
        return [line for line in out.stdout.splitlines() if line.strip()]


_SLURM_DAEMONS = ("munged", "slurmctld", "slurmd")
_SLURM_CLIENTS = ("srun", "scancel", "squeue", "sinfo", "scontrol")


def _sbin(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/usr/local/sbin", "/sbin") if os.access(p := f"{d}/{name}", os.X_OK)), None
    )


def _wait_idle(timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = _run(["sinfo", "-h", "-o", "%T"], timeout=10)
        if out.returncode == 0 and "idle" in out.stdout:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A single-node SLURM cluster on localhost (munged, slurmctld, slurmd), or the one named by
    AUTOTUNE_TEST_SLURM_CONF. SLURM_CONF points the session's srun/squeue/scancel at it."""
    previous = os.environ.get("SLURM_CONF")
    existing = os.environ.get("AUTOTUNE_TEST_SLURM_CONF")
    if existing:
        os.environ["SLURM_CONF"] = existing
        if not _wait_idle(10):
            pytest.fail(f"AUTOTUNE_TEST_SLURM_CONF={existing}: no idle node answers sinfo")
        yield SlurmCluster(Path(existing), socket.gethostname().split(".")[0])
        return
    missing = [n for n in _SLURM_CLIENTS if not shutil.which(n)] + [n for n in _SLURM_DAEMONS if not _sbin(n)]
    if missing:
        pytest.skip(f"no SLURM cluster reachable: {', '.join(missing)} not installed "
                    "(apt-get install slurmctld slurmd slurm-client munge)")
    if os.geteuid() != 0:
        pytest.skip("no SLURM cluster reachable: starting a private one needs root (slurmd runs jobs as their "
                    "users); set AUTOTUNE_TEST_SLURM_CONF to a running cluster's slurm.conf")
    root = _private_dir("autotune-slurm-")
    munge_dir, spool = root / "munge", root / "spool"
    for folder in (munge_dir, spool / "ctld", spool / "d"):
        folder.mkdir(parents=True)
    shutil.chown(munge_dir, "munge", "munge")
    munge_dir.chmod(0o711)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    socket_path = munge_dir / "munge.socket"
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=autotune-test",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={socket_path}",
                f"StateSaveLocation={spool / 'ctld'}",
                f"SlurmdSpoolDir={spool / 'd'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                "JobCompType=jobcomp/none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "ReturnToService=2",
                "KillWait=2",
                "InactiveLimit=0",
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
                f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    os.environ["SLURM_CONF"] = str(conf)
    started: list[Path] = []
    try:
        munged = _run(_as("munge", [str(_sbin("munged")), f"--key-file={key}", f"--socket={socket_path}",
                                    f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
                                    f"--seed-file={munge_dir / 'seed'}"]))
        if munged.returncode != 0:
            pytest.fail(f"munged did not start: {munged.stderr.strip()}")
        started.append(munge_dir / "munged.pid")
        for daemon, pid_file in (("slurmctld", root / "slurmctld.pid"), ("slurmd", root / "slurmd.pid")):
            out = _run([str(_sbin(daemon)), "-f", str(conf)])
            if out.returncode != 0:
                pytest.fail(f"{daemon} did not start: {out.stderr.strip()}\n{_tail(root / (daemon + '.log'))}")
            started.append(pid_file)
        if not _wait_idle():
            logs = "\n".join(_tail(root / name) for name in ("slurmctld.log", "slurmd.log"))
            pytest.fail(f"the SLURM node never became idle\n{logs}")
        yield SlurmCluster(conf, host)
    finally:
        with contextlib.suppress(Exception):
            _run(["scancel", "--full", "--user", str(os.getuid())], timeout=30)
        for pid_file in reversed(started):
            _stop(pid_file)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(root, ignore_errors=True)


def _stop(pid_file: Path, timeout_s: float = 10.0) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # A daemon may have been re-parented to this process (the launchers make it a child subreaper).
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
