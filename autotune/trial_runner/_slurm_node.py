"""The program srun starts on every node of a SLURM trial: ``python -P _slurm_node.py TRIAL_DIR NNODES NPROC``.

It is run by its path and imports nothing of autotune (only the standard library and psutil), so that it
starts in a fraction of a second on every node before it becomes torchrun: importing the ``autotune``
package first would cost each trial about a second on its critical path.

Node 0 publishes ``STEP_FILE`` (the step's id) and ``rdzv-<step>`` (``address:port`` of the rendezvous,
then its hostname) in the trial folder; the other nodes wait for it and check that they can reach it.
Every node then execs ``torchrun --nnodes=N --nproc-per-node=NPROC --rdzv-backend=c10d
--rdzv-endpoint=address:port``. A node that cannot take part prints one line, ``autotune: node K (HOST):
...`` (``NODE_ERROR_RE``), and exits 1.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import re
import socket
import sys
import time
from pathlib import Path

import psutil

STEP_FILE = "slurm.step"  # "JOBID.STEPID", written by the node program on node 0
ENDPOINT_PREFIX = "rdzv-"  # rdzv-<JOBID>.<STEPID>: "address:port" of node 0's c10d store, then its hostname


class NodeError(Exception):
    """Why this node cannot take part in the trial: printed as ``autotune: node K (HOST): ...``, exit 1."""


NODE_ERROR_RE = re.compile(r"^autotune: (node \d+ \(\S+\): .*)$", re.M)
_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
UNREACHABLE_FOR_S = 5.0  # a route that stays unreachable this long is not coming


def _free_port() -> int:
    # _process.free_port's twin: this program imports nothing of autotune (see the docstring above)
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
    """``python -P _slurm_node.py TRIAL_DIR NNODES NPROC``, one per node (an srun task)."""
    if len(argv) != 4:
        print("usage: python -P _slurm_node.py TRIAL_DIR NNODES NPROC (started by srun for autotune)",
              file=sys.stderr)
        sys.exit(1)
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
        # Node 0 hosts the store: said, not left to torch's guess from this node's name (which must then
        # resolve, and misses addresses on secondary interfaces).
        f"--rdzv-conf=join_timeout={max(10, int(budget_s))},is_host={'true' if node == 0 else 'false'}",
        "--monitor-interval=0.1",
    ]
    if nnodes > 1:
        argv.append(f"--local-addr={address}")  # the workers' MASTER_ADDR: an address the others reach
    argv += ["-m", "autotune.trial_runner.worker", str(trial_dir)]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    node_main(sys.argv)
