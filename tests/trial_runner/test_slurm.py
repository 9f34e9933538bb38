"""What only the SLURM launcher does: refusals, srun's arguments, and a trial inside an allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import LaunchError, StudyFileError
from autotune.spec import parse_spec
from autotune.trial_runner import make_launcher
from autotune.trial_runner._slurm import NODE_PROGRAM, SlurmLauncher

from .conftest import HERE
from .test_launchers import plan


def _spec(launcher: dict[str, object], **extra: object) -> object:
    return parse_spec({"name": "s", "workload": {"entrypoint": "faulty.py:build"}, "launcher": launcher, **extra},
                      source="s.yaml", base_dir=HERE)


def test_without_srun_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError) as e:
        make_launcher(_spec({"kind": "slurm"}))
    assert str(e.value) == "srun not found; install slurm-client or use launcher.kind: local"


def test_world_sizes_must_split_evenly_over_the_nodes() -> None:
    with pytest.raises(StudyFileError, match=r"search_space.world_size: 3 ranks cannot be split over "
                                             r"launcher.nodes \(2\); give world sizes that are multiples of 2"):
        _spec({"kind": "slurm", "nodes": 2}, search_space={"world_size": {"choices": [2, 3]}},
              baseline={"world_size": 2})
    with pytest.raises(StudyFileError, match=r"baseline.world_size: .* set baseline: \{world_size: 2\}"):
        _spec({"kind": "slurm", "nodes": 2}, search_space={"world_size": {"choices": [2, 4]}})
    _spec({"kind": "slurm", "nodes": 2}, search_space={"world_size": {"choices": [2, 4]}}, baseline={"world_size": 2})


def _fake_srun(folder: Path) -> None:
    for name in ("srun", "scancel", "squeue"):
        tool = folder / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)


def test_srun_arguments_outside_and_inside_an_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_srun(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    launcher = SlurmLauncher(nodes=2, partition="gpu", time_limit="00:10:00", srun_args=("--gres=gpu:4",))
    cmd = launcher.command(plan(world_size=8), tmp_path / "t", "autotune-t-1")
    assert cmd[1:8] == ["--job-name=autotune-t-1", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=1", "--export=ALL", "--exclusive"]
    assert "--partition=gpu" in cmd and "--time=00:10:00" in cmd
    # one node program per node, then two nodes of four ranks each
    assert cmd[-7:] == ["--gres=gpu:4", sys.executable, "-P", str(NODE_PROGRAM), str(tmp_path / "t"), "2", "4"]
    assert NODE_PROGRAM.name == "_slurm_node.py" and NODE_PROGRAM.is_file()
    with pytest.raises(LaunchError, match=r"world_size 3 is not divisible by launcher\.nodes 2"):
        launcher.command(plan(world_size=3), tmp_path / "t", "x")
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # inside an allocation: a step of it, no job options
    inside = launcher.command(plan(world_size=2), tmp_path / "t", "x")
    assert not any(a.startswith(("--partition", "--time", "--exclusive")) for a in inside)


INSIDE = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.trial_runner.test_launchers import plan
from autotune.trial_runner import run_trial
from autotune.trial_runner._slurm import NODE_PROGRAM, SlurmLauncher
result = run_trial(plan(world_size=2), Path(sys.argv[1]), SlurmLauncher())
print(json.dumps({{"outcome": result.outcome.value, "job": os.environ["SLURM_JOB_ID"]}}))
"""


@pytest.mark.slow
def test_a_trial_inside_an_allocation_is_a_step_of_it(slurm_cluster: object, tmp_path: Path) -> None:
    script = tmp_path / "tuner.py"
    script.write_text(INSIDE.format(root=str(HERE.parent.parent)))
    out = subprocess.run(["salloc", "-N1", "--exclusive", sys.executable, str(script), str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "complete"
    job, _ = (tmp_path / "t" / "slurm.step").read_text().split(".")
    assert job == report["job"]  # the tuner's own allocation, not a new job


# ----------------------------------------------------- the node program (_slurm_node.py) and its address
def test_the_node_program_imports_nothing_of_autotune() -> None:
    out = subprocess.run([sys.executable, "-P", "-X", "importtime", str(NODE_PROGRAM)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 1 and "usage" in out.stderr.lower()
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time")]
    assert "psutil" in imported and not [m for m in imported if m.split(".")[0] == "autotune"]

def test_a_node_publishes_the_address_of_the_interface_gloo_is_told_to_use() -> None:
    from autotune.trial_runner._slurm_node import NodeError, node_address

    assert node_address(1, {"GLOO_SOCKET_IFNAME": "lo"}) == ("127.0.0.1", None)  # one node: loopback is fine
    with pytest.raises(NodeError, match=r"^GLOO_SOCKET_IFNAME=lo: its address 127\.0\.0\.1 is loopback, which the "
                                        r"other nodes cannot reach; set env\.GLOO_SOCKET_IFNAME to the interface"):
        node_address(2, {"GLOO_SOCKET_IFNAME": "lo"})
    with pytest.raises(NodeError, match=r"^NCCL_SOCKET_IFNAME=nosuch0: this node has no interface of that name "
                                        r"with an IPv4 address \(it has .*lo.*\); set env\.NCCL_SOCKET_IFNAME"):
        node_address(2, {"NCCL_SOCKET_IFNAME": "nosuch0,eth9"})


def test_without_an_interface_a_node_never_publishes_loopback_to_other_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.trial_runner._slurm_node as slurm

    monkeypatch.setattr(slurm.socket, "gethostname", lambda: "node7")
    monkeypatch.setattr(slurm, "_resolved", lambda host: ["127.0.1.1"])  # Debian's "127.0.1.1 hostname"
    monkeypatch.setattr(slurm, "_route_to", lambda dest: "127.0.0.1")
    with pytest.raises(slurm.NodeError, match=r"node7 resolves to 127\.0\.1\.1\); set env\.GLOO_SOCKET_IFNAME"):
        slurm.node_address(2, {"SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1"})
    # The address that routes to srun's node, and its interface for gloo, which would resolve node7 to loopback.
    monkeypatch.setattr(slurm, "_route_to", lambda dest: "10.1.2.3")
    monkeypatch.setattr(slurm, "_interface_of", lambda address: "ib0")
    assert slurm.node_address(2, {"SLURM_LAUNCH_NODE_IPADDR": "10.1.2.1"}) == ("10.1.2.3", "ib0")
    monkeypatch.setattr(slurm, "_resolved", lambda host: ["127.0.1.1", "10.9.9.9"])
    assert slurm.node_address(2, {}) == ("10.9.9.9", None)  # a name that resolves: gloo finds it the same way
