"""The SLURM launcher: each trial is one ``srun`` job step running one torchrun per node.

``srun --nodes=N --ntasks-per-node=1`` starts this module's node program on every node of the step (inside
the tuner's allocation when ``SLURM_JOB_ID`` is set, else srun asks for an allocation of its own with
``--exclusive``, ``--partition`` and ``--time``). The program on node 0 picks a free port and publishes
``address:port`` (and its hostname) in the trial folder; the address is one the other nodes reach
(``node_address``: GLOO_SOCKET_IFNAME's interface, else a non-loopback address). The other nodes first
check that they can reach it, and every node then becomes ``torchrun --nnodes=N --nproc-per-node=W/N
--rdzv-backend=c10d --rdzv-endpoint=address:port --local-addr=<its own address>``, so the ranks meet
through torch.distributed's own rendezvous. SLURM_PROCID and SLURM_NTASKS reach the ranks too; they
read RANK and WORLD_SIZE, which torchrun sets. A node that cannot take part says why on one line,
``autotune: node K (HOST): ...``, which becomes the trial's reason.

The trial folder must be on a file system every node sees (it is where config.json, metrics and logs
are). Ending a trial cancels its step (``scancel``) and kills the local srun, so nothing is left on any
node; when the tuner dies, srun gets SIGTERM and SLURM cancels the step.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from autotune.errors import LaunchError
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._local import (
    ProcessTreeHandle,
    _die_with_tuner,
    become_subreaper,
    summarize_torchrun_failure,
    trial_environment,
    with_trial_env,
)
from autotune.trial_runner._plan import TrialPlan

STEP_FILE = "slurm.step"  # "JOBID.STEPID", written by the node program on node 0
ENDPOINT_PREFIX = "rdzv-"  # rdzv-<JOBID>.<STEPID>: "host:port" of node 0's c10d store
COMMAND_TIMEOUT_S = 30.0


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LaunchError(f"{name} not found; install slurm-client or use launcher.kind: local")
    return path


class SlurmLauncher(Launcher):
    """srun job steps, one torchrun per node and a c10d rendezvous.

    Args:
        nodes: nodes per trial; a trial's world size must be a multiple of it (ranks per node = W / nodes).
        partition, time_limit: for the allocation srun asks for when the tuner runs outside one.
        srun_args: extra srun arguments, appended last.
        env: extra environment for the ranks.
    """

    name = "slurm"

    def __init__(
        self,
        nodes: int = 1,
        partition: str | None = None,
        time_limit: str | None = None,
        srun_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.srun = _which("srun")
        self.scancel = _which("scancel")
        self.squeue = _which("squeue")
        self.nodes = nodes
        self.partition = partition
        self.time_limit = time_limit
        self.srun_args = tuple(srun_args)
        self.extra_env = env or {}
        self.kill_wait_s = self._kill_wait()
        become_subreaper()

    @property
    def in_allocation(self) -> bool:
        return bool(os.environ.get("SLURM_JOB_ID"))

    def _kill_wait(self) -> float:
        """The cluster's KillWait: how long SLURM waits between SIGTERM and SIGKILL when cancelling."""
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            return 30.0
        try:
            out = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True,
                                 timeout=COMMAND_TIMEOUT_S, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return 30.0
        match = re.search(r"^KillWait\s*=\s*(\d+)", out, re.M)
        return float(match.group(1)) if match else 30.0

    def ranks_per_node(self, world_size: int) -> int:
        if world_size % self.nodes:
            raise LaunchError(
                f"world_size {world_size} is not divisible by launcher.nodes {self.nodes}; "
                f"use world sizes that are multiples of {self.nodes}"
            )
        return world_size // self.nodes

    def command(self, plan: TrialPlan, trial_dir: Path, job_name: str) -> list[str]:
        per_node = self.ranks_per_node(plan.config.world_size)
        cmd = [
            self.srun,
            f"--job-name={job_name}",
            f"--nodes={self.nodes}",
            f"--ntasks={self.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "--export=ALL",
        ]
        if not self.in_allocation:
            cmd.append("--exclusive")  # whole nodes: a trial is never measured beside another job
            if self.partition:
                cmd.append(f"--partition={self.partition}")
            if self.time_limit:
                cmd.append(f"--time={self.time_limit}")
        cmd += [*self.srun_args, sys.executable, "-m", "autotune.trial_runner._slurm",
                str(trial_dir), str(self.nodes), str(per_node)]
        return cmd

    def environment(self, plan: TrialPlan) -> dict[str, str]:
        env = trial_environment(plan, self.extra_env)
        # srun needs the tuner's SLURM_* (the allocation, SLURM_CONF); each node sizes its own threads.
        env.update({k: v for k, v in os.environ.items() if k.startswith("SLURM_")})
        if "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in self.extra_env:
            env.pop("OMP_NUM_THREADS", None)
        # A threads_per_rank number reaches every node's torchrun (node_main keeps a set OMP_NUM_THREADS).
        return with_trial_env(env, plan)

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        job_name = f"autotune-{trial_dir.name}-{uuid.uuid4().hex[:8]}"
        cmd = self.command(plan, trial_dir, job_name)
        # Ranks on other nodes cannot see the tuner's pid; srun ending the step stands in for that watch.
        plan.model_copy(update={"tuner_pid": None}).write(trial_dir)
        out, err = trial_dir / "launcher.out", trial_dir / "launcher.err"
        try:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=plan.base_dir,
                    env=self.environment(plan),
                    start_new_session=True,
                    preexec_fn=_die_with_tuner,
                )
        except OSError as e:
            raise LaunchError(f"cannot start srun for {trial_dir}: {e}") from e
        return SlurmStepHandle(proc, trial_dir, err, self, job_name)


class SlurmStepHandle(ProcessTreeHandle):
    """A trial's srun (a local process) and its job step (on any node).

    Ranks that run on this machine are found through their pid files and checked against their command
    line (a pid from another node may name an unrelated local process); their memory is watched like a
    local trial's. Ranks elsewhere are ended by SLURM.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], trial_dir: Path, log_err: Path, launcher: SlurmLauncher, job_name: str
    ) -> None:
        super().__init__(proc, trial_dir, log_err)
        self.launcher = launcher
        self.job_name = job_name
        self.own_allocation = not launcher.in_allocation

    def _rank_pids(self) -> dict[int, int]:
        local = {}
        for rank, pid in super()._rank_pids().items():
            with contextlib.suppress(psutil.Error):
                if _runs_trial(psutil.Process(pid), self.trial_dir):
                    local[rank] = pid
        return local

    def processes(self) -> list[psutil.Process]:
        for pid in self._rank_pids().values():
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(pid).parent()
                if parent is not None and _runs_trial(parent, self.trial_dir):
                    self._remember(parent)  # the node's torchrun (slurmstepd's child, not ours)
        return super().processes()

    def step(self) -> str | None:
        """``JOBID.STEPID`` once the step runs (node 0 wrote it), else None."""
        with contextlib.suppress(OSError):
            text = (self.trial_dir / STEP_FILE).read_text().strip()
            if re.fullmatch(r"\d+(_\d+)?\.\d+", text):
                return text
        return None

    def _scancel(self, *args: str) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([self.launcher.scancel, *args], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=COMMAND_TIMEOUT_S, check=False)

    def _cancel(self, signal_name: str | None = None) -> None:
        """Cancel (or signal) this trial's step; srun's own allocation goes with it."""
        opts = [f"--signal={signal_name}"] if signal_name else []
        step = self.step()
        if step is not None:
            self._scancel(*opts, step.split(".")[0] if self.own_allocation and not signal_name else step)
        elif self.own_allocation:
            self._scancel(*opts, f"--name={self.job_name}")  # still pending, or node 0 not started yet

    def still_queued(self) -> bool:
        """Whether squeue still lists this trial's step (or its own job)."""
        step = self.step()
        if step is not None:
            args = ["-h", "-s", "-o", "%i", "-j", step.split(".")[0]]
        elif self.own_allocation:
            args = ["-h", "-o", "%i", f"--name={self.job_name}"]
        else:
            return False
        try:
            out = subprocess.run([self.launcher.squeue, *args], stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=COMMAND_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if out.returncode != 0:
            return False  # the job is gone: squeue refuses an unknown job id
        listed = out.stdout.split()
        return bool(listed) if step is None else step in listed

    def terminate(self, grace_s: float) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # srun: "forcing job termination", the step is ended
        self._cancel()
        deadline = time.monotonic() + grace_s + self.launcher.kill_wait_s + 5
        while time.monotonic() < deadline and (self.proc.poll() is None or self.still_queued()):
            time.sleep(0.1)
        if self.proc.poll() is None or self.still_queued():
            self._cancel("KILL")
            self._cancel()
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.still_queued():
                time.sleep(0.2)
        super().terminate(min(grace_s, 1.0))  # stragglers on this machine, and srun itself

    def exit_summary(self) -> str:
        """A node's own account first (the node program's ``autotune: node K (HOST): ...``, srun's ``Node
        failure on HOST``), then torchrun's failure reports of every node."""
        try:
            text = self.log_err.read_text(errors="replace")
        except OSError:
            return ""
        own = NODE_ERROR_RE.search(text)
        if own:
            return own.group(1)
        lost = _NODE_FAILURE_RE.search(text)
        if lost:
            return f"node {lost.group(1)}: SLURM reports a node failure (its slurmd stopped answering)"
        return summarize_torchrun_failure(text)

    def diagnose(self) -> str:
        """The step's nodes that SLURM lists as not responding or down, when the run stopped making progress."""
        step = self.step()
        if step is None:
            return ""
        nodes = _command([self.launcher.squeue, "-h", "-s", "-o", "%N", "-j", step.split(".")[0]])
        listed = [line.split()[0] for line in nodes.splitlines() if line.strip()]
        if not listed or not (sinfo := shutil.which("sinfo")):
            return ""
        states = _command([sinfo, "-h", "-N", "-o", "%N %T", "-n", ",".join(listed)])
        bad = []
        for line in states.splitlines():
            name, _, state = line.partition(" ")
            if state.endswith("*") or state.strip().lower().startswith(("down", "fail")):
                bad.append(f"{name} ({state.strip()})")
        if not bad:
            return ""
        return f"node {', '.join(bad)}: not responding to SLURM"


_NODE_FAILURE_RE = re.compile(r"^srun: error: Node failure on (\S+)", re.M)


def _command(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


def _runs_trial(proc: psutil.Process, trial_dir: Path) -> bool:
    try:
        return str(trial_dir) in proc.cmdline()
    except psutil.Error:
        return False


# ------------------------------------------------------------------------------ the program on each node
class NodeError(Exception):
    """Why this node cannot take part in the trial: printed as ``autotune: node K (HOST): ...``, exit 1."""


NODE_ERROR_RE = re.compile(r"^autotune: (node \d+ \(\S+\): .*)$", re.M)
_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
UNREACHABLE_FOR_S = 5.0  # a route that stays unreachable this long is not coming


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _own_address(nnodes: int) -> str:
    """This node's name for the other nodes; a single-node trial on a host whose name does not resolve
    (a container, say) uses the loopback address instead."""
    host = socket.gethostname()
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        if nnodes == 1:
            return "127.0.0.1"
        raise
    return host


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _ipv4(ifname: str) -> str | None:
    for addr in psutil.net_if_addrs().get(ifname, ()):
        if addr.family == socket.AF_INET:
            return str(addr.address)
    return None


def _interface_of(address: str) -> str | None:
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    return None


def _resolved(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, socket.AF_INET)})
    except OSError:
        return []


def _route_to(destination: str) -> str | None:
    """The local address this node sends from to ``destination`` (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((destination, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def node_address(nnodes: int, env: dict[str, str]) -> tuple[str, str | None]:
    """(the address the other nodes reach this node at, an interface for gloo when the user named none).

    The interface named by ``GLOO_SOCKET_IFNAME`` (or ``NCCL_SOCKET_IFNAME``) decides, as it does for the
    collectives; else the address this node's name resolves to, unless that is loopback (Debian's
    ``127.0.1.1 host``); else the address that routes to the node srun was started on. A single-node
    trial keeps its name (or loopback).
    """
    for var in _IFNAME_VARS:
        ifname = env.get(var, "").split(",")[0].strip()
        if not ifname or ifname.startswith(("^", "=")):
            continue  # NCCL's exclude/exact-match forms name no single interface
        address = _ipv4(ifname)
        if address is None:
            present = ", ".join(sorted(psutil.net_if_addrs()))
            raise NodeError(f"{var}={ifname}: this node has no interface of that name with an IPv4 address "
                            f"(it has {present}); set env.{var} to the interface that connects the nodes")
        if nnodes > 1 and _is_loopback(address):
            raise NodeError(f"{var}={ifname}: its address {address} is loopback, which the other nodes cannot "
                            f"reach; set env.{var} to the interface that connects the nodes")
        return address, None
    if nnodes == 1:
        return _own_address(1), None
    host = socket.gethostname()
    names = _resolved(host)
    for resolved in names:
        if not _is_loopback(resolved):
            return resolved, None
    launch = env.get("SLURM_LAUNCH_NODE_IPADDR", "")
    routed = _route_to(launch) if launch else None
    if routed and not _is_loopback(routed):
        return routed, _interface_of(routed)
    raise NodeError(f"cannot tell which address of this node the other nodes reach ({host} resolves to "
                    f"{', '.join(names) or 'nothing'}); set env.GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME for "
                    "NCCL) to the interface that connects the nodes")


def _publish(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _wait_for(path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text:
                return text
        time.sleep(0.1)
    raise NodeError(f"node 0 did not publish the rendezvous endpoint {path} within {timeout_s:g} s; "
                    "is the trial folder on a file system every node sees?")


def await_endpoint(endpoint: str, where: str, timeout_s: float) -> None:
    """Return once node 0's rendezvous store accepts a connection; NodeError when it cannot be reached: a
    route that stays unreachable for UNREACHABLE_FOR_S, or nothing answering within ``timeout_s``."""
    host, port = endpoint.rsplit(":", 1)
    start = time.monotonic()
    unreachable_since: float | None = None
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2.0).close()
            return
        except OSError as e:
            last = e
        now = time.monotonic()
        if getattr(last, "errno", None) in _UNREACHABLE:
            unreachable_since = unreachable_since if unreachable_since is not None else now
        else:
            unreachable_since = None
        if now - start > timeout_s or (unreachable_since is not None and now - unreachable_since > UNREACHABLE_FOR_S):
            why = last.strerror or str(last) if isinstance(last, OSError) else str(last)
            raise NodeError(f"cannot reach the rendezvous {endpoint} on {where}: {why} (for {now - start:.0f} s); "
                            "check the routes between the nodes and env.GLOO_SOCKET_IFNAME")
        time.sleep(0.2)


def _startup_budget_s(trial_dir: Path) -> float:
    """Seconds a node may spend getting to the rendezvous: the plan's start-up timeout, and less than the
    trial's max_seconds, so that a node that cannot get there says why before the wall-clock kill."""
    try:
        plan = json.loads((trial_dir / "config.json").read_text())
        max_seconds = float(plan.get("limits", {}).get("max_seconds", 300.0))
        return float(min(plan.get("startup_timeout_s", 300.0), 0.75 * max_seconds))
    except (OSError, ValueError, TypeError, AttributeError):
        return 300.0


def node_main(argv: list[str]) -> None:
    """``python -m autotune.trial_runner._slurm TRIAL_DIR NNODES NPROC``, one per node (an srun task)."""
    trial_dir, nnodes, nproc = Path(argv[1]), int(argv[2]), int(argv[3])
    node = int(os.environ.get("SLURM_NODEID", "0"))
    step = f"{os.environ.get('SLURM_JOB_ID', '0')}.{os.environ.get('SLURM_STEP_ID', '0')}"
    endpoint_file = trial_dir / f"{ENDPOINT_PREFIX}{step}"
    budget_s = _startup_budget_s(trial_dir)
    started = time.monotonic()
    try:
        address, gloo_ifname = node_address(nnodes, dict(os.environ))
        if node == 0:
            _publish(trial_dir / STEP_FILE, step)
            endpoint = f"{address}:{_free_port()}"
            _publish(endpoint_file, f"{endpoint}\n{socket.gethostname()}")
        else:
            published = _wait_for(endpoint_file, budget_s).splitlines()  # "host:port", node 0's hostname
            endpoint = published[0].strip()
            where = f"node 0 ({published[1].strip()})" if len(published) > 1 else "node 0"
            await_endpoint(endpoint, where, budget_s - (time.monotonic() - started))
    except NodeError as e:
        print(f"autotune: node {node} ({socket.gethostname()}): {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    if gloo_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = gloo_ifname
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // nproc)))
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={step}",
        f"--rdzv-conf=join_timeout={max(10, int(budget_s))}",
        "--monitor-interval=0.1",
    ]
    if nnodes > 1:
        argv.append(f"--local-addr={address}")  # the workers' MASTER_ADDR: an address the others reach
    argv += ["-m", "autotune.trial_runner.worker", str(trial_dir)]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    node_main(sys.argv)
