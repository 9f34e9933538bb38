"""A multi-node SLURM cluster on this machine: each node a network namespace of its own.

    host (this machine's namespace)          node 1 (netns NAME-n1)         node 2 (netns NAME-n2)
    munged, slurmctld, the tuner, srun       slurmd -N NAME-n1              slurmd -N NAME-n2
    bridge NAME-br  10.213.K.1/24 ---veth--- eth0 10.213.K.11/24   ---      eth0 10.213.K.12/24

Every node is a network namespace with its own address on a private bridge, a UTS namespace with its own
hostname (the node's name), a mount namespace whose /etc/hosts names every node (the cluster's DNS; with
``resolve_names=False`` the names resolve nowhere, as on a cluster without DNS for them), and a PID
namespace: the node's processes cannot see the host's or the other node's, nor can the tuner see
theirs, as on real machines. The file system is shared: munge's socket, slurm.conf, the trial folders.
The nodes share this machine's cores (slurm.conf gives each the CPUs the machine has).

Traffic goes only to loopback and to addresses on the bridge this module creates (10.213.K.0/24, K chosen
free among the subnets on this machine); nothing else is addressed. Every name it creates starts with
``PREFIX`` plus a cluster id; a state file in ``STATE_DIR`` records what each cluster made and which
process owns it, so a cluster whose owner died (a killed test run) is removed by the next ``start()``,
and ``stop()`` runs from ``finally`` and ``atexit``.

``python -m tests._netns_cluster up`` starts one by hand (prints ``SLURM_CONF=...``; Ctrl-C ends it) and
``python -m tests._netns_cluster clean`` removes leftovers of any that were not stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from autotune.trial_runner import free_port as _free_port

PREFIX = "atmn"  # autotune multi-node: every namespace, link and state file this module creates
STATE_DIR = Path(tempfile.gettempdir()) / "autotune-netns-clusters"
NODE_IFNAME = "eth0"  # the interface that reaches the other nodes, in every node
ISOLATED_IFNAME = "iso0"  # an interface of every node that reaches no other node
SUBNET = "10.213"  # 10.213.K.0/24, one K per cluster

# PID 1 of a node: hostname, the node's /etc/hosts, then slurmd in the foreground. It reaps orphans (as
# init must) and stays up if slurmd dies; SIGTERM ends it, and with it every process of the node.
_NODE_INIT = r"""
import os, signal, socket, subprocess, sys
name, hosts, slurmd, conf = sys.argv[1:5]
socket.sethostname(name)
if hosts != "-":
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
subprocess.Popen([slurmd, "-D", "-f", conf, "-N", name])
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
while True:
    try:
        os.wait()
    except ChildProcessError:
        signal.pause()
"""


def _run(cmd: Sequence[str], timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False,
                         stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip() or out.stdout.strip()}")
    return out


def _sbin(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/usr/local/sbin", "/sbin") if os.access(p := f"{d}/{name}", os.X_OK)), None
    )


DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "scancel", "squeue", "sinfo", "scontrol", "ip", "unshare", "nsenter", "runuser")


def missing_requirements() -> str | None:
    """Why this machine cannot host the cluster (a skip reason), or None."""
    missing = [n for n in CLIENTS if not shutil.which(n)] + [n for n in DAEMONS if not _sbin(n)]
    if missing:
        return (f"no multi-node SLURM cluster: {', '.join(missing)} not installed "
                "(apt-get install slurmctld slurmd slurm-client munge iproute2 util-linux)")
    if os.geteuid() != 0:
        return "no multi-node SLURM cluster: network namespaces and slurmd need root"
    return None


def _used_subnets() -> set[int]:
    out = _run(["ip", "-4", "-o", "addr", "show"]).stdout
    used = set()
    for word in out.split():
        if word.startswith(f"{SUBNET}."):
            with contextlib.suppress(ValueError, IndexError):
                used.add(int(word.split(".")[2]))
    return used


def _alive(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:
        return False


@dataclass
class Node:
    name: str  # node name = hostname = namespace name
    address: str
    host_link: str  # the veth end on the bridge, in the host's namespace
    init_pid: int = 0  # the node's PID 1, as the host sees it (0: not running)
    init_started: float = 0.0


@dataclass
class NetnsCluster:
    """A SLURM cluster of ``nodes`` network namespaces. ``start()``, use, ``stop()``."""

    nodes: int = 2
    resolve_names: bool = True  # False: the nodes' names resolve nowhere (no /etc/hosts entries, no DNS)
    cid: str = field(default_factory=lambda: uuid.uuid4().hex[:4])
    root: Path = field(init=False)
    conf: Path = field(init=False)
    bridge: str = field(init=False)
    bridge_address: str = field(init=False)
    isolated_subnet: str = field(init=False)
    node_list: list[Node] = field(init=False, default_factory=list)
    _stopped: bool = field(init=False, default=False)

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.cid}"

    @property
    def state_file(self) -> Path:
        return STATE_DIR / f"{self.name}.json"

    def node(self, index: int) -> Node:
        """Node ``index`` (1-based, as SLURM's node names and this cluster's addresses are)."""
        return self.node_list[index - 1]

    @property
    def hostnames(self) -> list[str]:
        return [n.name for n in self.node_list]

    # ---------------------------------------------------------------------------------------- start
    def start(self) -> NetnsCluster:
        cleanup_leftovers()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        used = _used_subnets()
        k, isolated = [k for k in range(int(self.cid, 16) % 200 + 20, 255) if k not in used][:2]
        self.bridge = f"{self.name}-br"
        self.bridge_address = f"{SUBNET}.{k}.1"
        self.isolated_subnet = f"{SUBNET}.{isolated}"
        self.node_list = [Node(f"{self.name}-n{i}", f"{SUBNET}.{k}.{10 + i}", f"{self.name}-h{i}")
                          for i in range(1, self.nodes + 1)]
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.root.chmod(0o755)  # munge must reach its socket in here
        self.conf = self.root / "slurm.conf"
        self._save()
        atexit.register(self.stop)
        try:
            self._network()
            self._files()
            self._daemons()
        except BaseException:
            self.stop()
            raise
        return self

    def _save(self) -> None:
        state = {
            "owner": os.getpid(), "owner_started": psutil.Process().create_time(), "root": str(self.root),
            "bridge": self.bridge,
            "nodes": [vars(n) for n in self.node_list],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)

    def _network(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        _run(["ip", "addr", "add", f"{self.bridge_address}/24", "dev", self.bridge], check=True)
        _run(["ip", "link", "set", self.bridge, "up"], check=True)
        for node in self.node_list:
            _run(["ip", "netns", "add", node.name], check=True)
            _run(["ip", "link", "add", node.host_link, "type", "veth", "peer", "name", NODE_IFNAME,
                  "netns", node.name], check=True)
            _run(["ip", "link", "set", node.host_link, "master", self.bridge], check=True)
            _run(["ip", "link", "set", node.host_link, "up"], check=True)
            inside = ["ip", "netns", "exec", node.name]
            _run([*inside, "ip", "addr", "add", f"{node.address}/24", "dev", NODE_IFNAME], check=True)
            _run([*inside, "ip", "link", "set", NODE_IFNAME, "up"], check=True)
            _run([*inside, "ip", "link", "set", "lo", "up"], check=True)
            # An interface that leads nowhere: a veth pair whose far end nobody answers on, in a subnet of
            # its own (a NIC on a network the other nodes are not on).
            _run([*inside, "ip", "link", "add", ISOLATED_IFNAME, "type", "veth", "peer", "name", "iso1"], check=True)
            _run([*inside, "ip", "addr", "add", f"{self.isolated_subnet}.{node.address.rsplit('.', 1)[1]}/24",
                  "dev", ISOLATED_IFNAME], check=True)
            _run([*inside, "ip", "link", "set", ISOLATED_IFNAME, "up"], check=True)
            _run([*inside, "ip", "link", "set", "iso1", "up"], check=True)

    def _files(self) -> None:
        munge, spool = self.root / "munge", self.root / "spool"
        for folder in (munge, spool / "ctld"):
            folder.mkdir(parents=True)
        shutil.chown(munge, "munge", "munge")
        munge.chmod(0o711)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        controller = socket.gethostname().split(".")[0]
        hosts = ["127.0.0.1 localhost", f"{self.bridge_address} {controller}",
                 *(f"{n.address} {n.name}" for n in self.node_list)]
        (self.root / "hosts").write_text("\n".join(hosts) + "\n")
        cpus = os.cpu_count() or 1
        r = self.root
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={controller}({self.bridge_address})",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={munge / 'munge.socket'}",
            f"StateSaveLocation={spool / 'ctld'}",
            f"SlurmdSpoolDir={spool / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none", "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "MpiDefault=none",
            "ReturnToService=2", "KillWait=2", "InactiveLimit=0",
            "SlurmdTimeout=6",  # a node whose slurmd is gone is DOWN within seconds
            "MessageTimeout=5",
            *(f"NodeName={n.name} NodeAddr={n.address} CPUs={cpus} State=UNKNOWN" for n in self.node_list),
            f"PartitionName=debug Nodes={','.join(self.hostnames)} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _daemons(self) -> None:
        munge = self.root / "munge"
        _run(["runuser", "-u", "munge", "--", str(_sbin("munged")), f"--key-file={munge / 'munge.key'}",
              f"--socket={munge / 'munge.socket'}", f"--pid-file={munge / 'munged.pid'}",
              f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}"], check=True)
        out = _run([str(_sbin("slurmctld")), "-f", str(self.conf)])
        if out.returncode != 0:
            raise RuntimeError(f"slurmctld did not start: {out.stderr.strip()}\n{self.log('slurmctld.log')}")
        for index in range(1, self.nodes + 1):
            self.power_on(index)
        self.wait_idle()

    # -------------------------------------------------------------------------------------- the nodes
    def power_on(self, index: int) -> None:
        """Start node ``index``: its PID 1 in fresh UTS, mount and PID namespaces inside its netns."""
        node = self.node(index)
        (self.root / "spool" / node.name).mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            # nsenter, not `ip netns exec`: that would mount a sysfs of its own, hiding the cgroup file system
            # slurmd needs.
            ["nsenter", f"--net=/run/netns/{node.name}", "unshare", "--uts", "--mount", "--pid", "--fork",
             "--kill-child", "--mount-proc", "--", sys.executable, "-c", _NODE_INIT, node.name,
             str(self.root / "hosts") if self.resolve_names else "-", str(_sbin("slurmd")), str(self.conf)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(self.root / f"{node.name}.init.log").open("ab"), start_new_session=True,
        )
        node.init_pid, node.init_started = proc.pid, psutil.Process(proc.pid).create_time()
        self._save()

    def power_off(self, index: int) -> None:
        """Node ``index`` loses power: its PID 1 dies and with it every process on the node."""
        node = self.node(index)
        if node.init_pid and _alive(node.init_pid, node.init_started):
            _kill_tree(node.init_pid)
        node.init_pid = 0
        self._save()

    def stop_slurmd(self, index: int) -> None:
        """SIGKILL node ``index``'s slurmd only: the node and its running steps stay up."""
        slurmd = self.slurmd(index)
        if slurmd is not None:
            slurmd.kill()
            slurmd.wait(5)

    def start_slurmd(self, index: int) -> None:
        """Start node ``index``'s slurmd again (it daemonizes; the node's PID 1 adopts it)."""
        node = self.node(index)
        _run(["nsenter", "-t", str(self._pid1(index)), "-n", "-u", "-m", "-p", "--", str(_sbin("slurmd")), "-f",
              str(self.conf), "-N", node.name], check=True)

    def _pid1(self, index: int) -> int:
        """The host's pid of node ``index``'s PID 1 (the child of its unshare)."""
        node = self.node(index)
        try:
            return psutil.Process(node.init_pid).children()[0].pid
        except (psutil.Error, IndexError):
            raise RuntimeError(f"{node.name} is not running") from None

    def cut_off(self, index: int, from_index: int = 1) -> None:
        """Node ``index`` loses its route to node ``from_index`` (a network partition); the controller, and
        this machine, stay reachable."""
        ns, target = self.node(index).name, self.node(from_index).address
        _run(["ip", "-n", ns, "route", "del", f"{SUBNET}.{self._k}.0/24"], check=True)
        _run(["ip", "-n", ns, "route", "add", f"{self.bridge_address}/32", "dev", NODE_IFNAME], check=True)
        for other in self.node_list:
            if other.address != target and other.name != ns:
                _run(["ip", "-n", ns, "route", "add", f"{other.address}/32", "dev", NODE_IFNAME], check=True)

    def heal(self) -> None:
        """Every node's routes as ``start()`` made them."""
        for node in self.node_list:
            routes = _run(["ip", "-n", node.name, "-4", "route", "show"]).stdout.splitlines()
            keep = (f"{SUBNET}.{self._k}.0/24", f"{self.isolated_subnet}.0/24")
            for line in routes:
                if line.split() and line.split()[0] not in keep:
                    _run(["ip", "-n", node.name, "route", "del", line.split()[0]])
            _run(["ip", "-n", node.name, "route", "replace", f"{SUBNET}.{self._k}.0/24", "dev", NODE_IFNAME,
                  "src", node.address], check=True)

    @property
    def _k(self) -> int:
        return int(self.bridge_address.split(".")[2])

    def ensure_up(self) -> None:
        """Every node powered, with its slurmd and its routes, and idle (after a test that broke one)."""
        self.heal()
        for index, node in enumerate(self.node_list, start=1):
            if not (node.init_pid and _alive(node.init_pid, node.init_started)):
                self.power_on(index)
            elif self.slurmd(index) is None:
                self.start_slurmd(index)
        self.wait_idle()

    def pids(self, index: int) -> list[psutil.Process]:
        """Every live process of node ``index`` (as the host sees them)."""
        out = _run(["ip", "netns", "pids", self.node(index).name]).stdout.split()
        procs = []
        for pid in out:
            with contextlib.suppress(psutil.Error, ValueError):
                proc = psutil.Process(int(pid))
                if proc.status() != psutil.STATUS_ZOMBIE:
                    procs.append(proc)
        return procs

    def processes(self, index: int) -> list[str]:
        """Command lines of the processes of node ``index`` other than its init, unshare and slurmd."""
        found = []
        for proc in self.pids(index):
            with contextlib.suppress(psutil.Error):
                cmd = proc.cmdline()
                if cmd and (cmd[0].endswith(("unshare", "slurmd")) or _NODE_INIT in cmd):
                    continue
                found.append(f"{proc.pid} {' '.join(cmd)}")
        return found

    def slurmd(self, index: int) -> psutil.Process | None:
        for proc in self.pids(index):
            with contextlib.suppress(psutil.Error):
                if proc.name() == "slurmd":
                    return proc
        return None

    def exec(self, index: int, cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` on node ``index``: in its network, UTS, mount and PID namespaces."""
        return _run(["nsenter", "-t", str(self._pid1(index)), "-n", "-u", "-m", "-p", "--", *cmd], timeout=timeout)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until sinfo lists every node idle."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.sinfo()
            if len(out) == self.nodes and all(state == "idle" for state in out.values()):
                return
            time.sleep(0.2)
        logs = [self.log("slurmctld.log", 8)]
        for n in self.node_list:
            logs += [self.log(f"slurmd-{n.name}.log", 8), self.log(f"{n.name}.init.log", 8)]
        raise RuntimeError(f"the nodes of {self.name} are not idle: {self.sinfo()}\n" + "\n".join(logs))

    def sinfo(self) -> dict[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=10,
                             check=False, env={**os.environ, "SLURM_CONF": str(self.conf)})
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if line.strip())

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log(self, name: str, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.root / name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    # ----------------------------------------------------------------------------------------- stop
    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--full", "--user", str(os.getuid())], capture_output=True, timeout=10,
                           check=False, env={**os.environ, "SLURM_CONF": str(self.conf)})
        _teardown(json.loads(self.state_file.read_text()) if self.state_file.exists() else {
            "root": str(getattr(self, "root", "")), "bridge": getattr(self, "bridge", ""),
            "nodes": [vars(n) for n in self.node_list]})
        self.state_file.unlink(missing_ok=True)


def _kill_tree(pid: int) -> None:
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


def _kill_pid_file(path: Path, owner_dir: str) -> None:
    """SIGKILL the daemon named by ``path`` if its command line or files point into ``owner_dir``."""
    try:
        proc = psutil.Process(int(path.read_text().strip()))
        cmd = " ".join(proc.cmdline())
    except (OSError, ValueError, psutil.Error):
        return
    if owner_dir in cmd or proc.name() in ("slurmctld", "munged"):
        with contextlib.suppress(psutil.Error):
            proc.kill()
            proc.wait(5)


def _teardown(state: dict[str, Any]) -> None:
    """Remove everything a cluster's state names: node processes, namespaces, links, daemons, files."""
    root = str(state.get("root") or "")
    for node in state.get("nodes", []):
        name = str(node["name"])
        if node.get("init_pid") and _alive(int(node["init_pid"]), float(node.get("init_started", 0))):
            _kill_tree(int(node["init_pid"]))
        _kill_netns(name)
        _run(["ip", "link", "del", str(node["host_link"])])
    if state.get("bridge"):
        _run(["ip", "link", "del", str(state["bridge"])])
    if root and Path(root).is_dir():
        _kill_pid_file(Path(root) / "slurmctld.pid", root)
        _kill_pid_file(Path(root) / "munge" / "munged.pid", root)
        shutil.rmtree(root, ignore_errors=True)


def _kill_netns(name: str) -> None:
    pids = _run(["ip", "netns", "pids", name]).stdout.split()
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error, ValueError):
            procs.append(psutil.Process(int(pid)))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)
    _run(["ip", "netns", "del", name])


def cleanup_leftovers() -> list[str]:
    """Remove the clusters whose owner process is gone, and any ``PREFIX`` namespace or link that no live
    cluster claims. Returns the names removed."""
    removed = []
    live: set[str] = set()
    for path in sorted(STATE_DIR.glob(f"{PREFIX}*.json")) if STATE_DIR.is_dir() else []:
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if _alive(int(state.get("owner", 0)), float(state.get("owner_started", 0))):
            live.add(path.stem)
            continue
        _teardown(state)
        path.unlink(missing_ok=True)
        removed.append(path.stem)
    for line in _run(["ip", "netns", "list"]).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX) and name.split("-")[0] not in live:
            _kill_netns(name)
            removed.append(name)
    for line in _run(["ip", "-o", "link", "show"]).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            link = parts[1].strip().split("@")[0]
            if link.startswith(PREFIX) and link.split("-")[0] not in live:
                _run(["ip", "link", "del", link])
                removed.append(link)
    return removed


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("up", "clean"):
        print("usage: python -m tests._netns_cluster up [NODES] | clean", file=sys.stderr)
        return 2
    if argv[1] == "clean":
        print("\n".join(cleanup_leftovers()) or "nothing to clean")
        return 0
    reason = missing_requirements()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    cluster = NetnsCluster(nodes=int(argv[2]) if len(argv) > 2 else 2).start()
    print(f"SLURM_CONF={cluster.conf}  nodes: {' '.join(f'{n.name}={n.address}' for n in cluster.node_list)}",
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
