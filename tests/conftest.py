"""Real servers for the tests: a private PostgreSQL and a single-node SLURM cluster on localhost.

Both start once per test session from the Debian packages (`postgresql`; `slurmctld slurmd slurm-client
munge`), in a temporary folder, on free local ports, and are stopped at the end. A test that needs one
is skipped, with the reason, only when the binaries are not installed. Set AUTOTUNE_TEST_SLURM_CONF to
the slurm.conf of a running cluster to use that one instead.

Every test session also gets a lease folder of its own (AUTOTUNE_LEASE_DIR), so its trials never wait
for trials of another session on the same machine.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


# ---------------------------------------------------------------------------------------------- PostgreSQL
def _postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


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
