"""Trials across two nodes: a SLURM cluster of network namespaces (tests/_netns_cluster.py), each node with
its own hostname, address, slurmd and process table, the tuner and slurmctld on this machine.

What differs between nodes runs here for real: one torchrun per node started by srun, the c10d rendezvous
on node 0's address, gloo's all-reduce between the namespaces, the slowest rank on the other node, and the
faults only a cluster has — a rank killed on node 2, node 2's slurmd stopped or its power lost, node 2
cut off from node 1, a GLOO_SOCKET_IFNAME that names no interface, loopback or one that routes nowhere.
Each fault ends its trial crashed with the node named, before the wall-clock cap, with nothing left on
any node.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.trial_runner import TrialPlan, TrialResult, run_trial
from autotune.trial_runner._slurm import SlurmLauncher
from tests._cli import autotune
from tests._netns_cluster import ISOLATED_IFNAME, NODE_IFNAME, NetnsCluster
from tests._processes import wait_no_leftovers
from tests.trial_runner.test_launchers import plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent.parent
FAULTY = ROOT / "tests" / "trial_runner" / "faulty.py"

STUDY = """
name: two-nodes
workload:
  entrypoint: faulty.py:build
  args: {{samples: 512{args}}}
launcher: {{kind: slurm, nodes: 2}}
env: {{GLOO_SOCKET_IFNAME: {ifname}}}
search_space:
  batch_size: {{choices: [16, 32]}}
  world_size: 2
baseline: {{world_size: 2}}
trial: {{warmup_steps: 1, max_steps: {steps}, max_seconds: 120, hang_seconds: 20, report_every: 1}}
sampler: {{name: random, seed: 0}}
pruner: {{name: none}}
confirm: {{top_k: 0}}
"""


def _run_study(folder: Path, n_trials: int, **fields: Any) -> list[optuna.trial.FrozenTrial]:
    (folder / "faulty.py").write_text(FAULTY.read_text())
    (folder / "study.yaml").write_text(STUDY.format(**{"args": "", "ifname": NODE_IFNAME, "steps": 5, **fields}))
    out = autotune("run", "study.yaml", "--n-trials", str(n_trials), cwd=folder)  # the tuner in this process
    assert out.exit_code == 0, out.stdout[-2000:] + out.stderr[-2000:]
    study = optuna.load_study(study_name="two-nodes", storage=f"sqlite:///{folder / 'two-nodes.db'}")
    return study.get_trials()


def _nothing_left(cluster: NetnsCluster, trial_dir: Path) -> None:
    """No process of the trial on this machine or any node, and no process but its daemons on any node."""
    assert wait_no_leftovers(trial_dir, within_s=10) == []
    deadline = time.monotonic() + 15  # slurmstepd reports the step's end and leaves
    while any(cluster.processes(i) for i in (1, 2)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [cluster.processes(i) for i in (1, 2)] == [[], []]
    out = subprocess.run(["squeue", "-h", "-s", "-o", "%i %j"], capture_output=True, text=True, timeout=30,
                         check=False)
    assert "autotune-" not in out.stdout


def _with_env(p: TrialPlan, **env: str) -> TrialPlan:
    return p.model_copy(update={"config": p.config.model_copy(update={"env": env})})


def _during_training(trial_dir: Path, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` once the trial has reported its first window (every rank is past the rendezvous)."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if (trial_dir / "metrics.jsonl").read_text().strip():
                    break
            except OSError:
                pass
            time.sleep(0.1)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def _rank_on(cluster: NetnsCluster, trial_dir: Path, index: int) -> int:
    """A rank of the trial that runs on node ``index``: its pid there (as that node numbers processes)."""
    name = cluster.node(index).name
    for path in sorted(trial_dir.glob("rank*.host")):
        if path.read_text().strip() == name:
            return int((trial_dir / f"{path.stem}.pid").read_text())
    raise AssertionError(f"no rank of {trial_dir} on {name}")


def _trial(p: TrialPlan, trial_dir: Path) -> TrialResult:
    return run_trial(p, trial_dir, SlurmLauncher(nodes=2))


# ------------------------------------------------------------------------------------------ trials on 2 nodes
@pytest.mark.slow
def test_a_study_runs_every_trial_on_both_nodes(two_nodes: NetnsCluster, tmp_path: Path) -> None:
    trials = _run_study(tmp_path, 2)
    assert len(trials) == 2
    for t in trials:
        assert t.user_attrs["outcome"] == "complete", t.user_attrs["reason"]
        assert t.user_attrs["config"]["world_size"] == 2
        assert sorted(t.user_attrs["hosts"]) == two_nodes.hostnames  # one rank on each node
        folder = Path(t.user_attrs["trial_dir"])
        applied = json.loads((folder / "applied.json").read_text())
        # the study's env: reached the ranks on both nodes
        assert [r["env"] for r in applied["ranks"]] == [{"GLOO_SOCKET_IFNAME": NODE_IFNAME}] * 2
        endpoint = next(folder.glob("rdzv-*")).read_text().splitlines()
        assert endpoint[0].split(":")[0] == two_nodes.node(1).address  # node 0's address, not a name
        _nothing_left(two_nodes, folder)


@pytest.mark.slow
def test_world_size_is_nodes_times_ranks_per_node_and_the_slowest_rank_is_on_the_other_node(
    two_nodes: NetnsCluster, tmp_path: Path
) -> None:
    slow = 3  # ranks 2 and 3 run on the node that is not rank 0's
    p = plan("slow", world_size=4, rank=slow, at_step=1, limits={"max_steps": 6, "max_seconds": 150})
    p = p.model_copy(update={"trace": True})
    result = _trial(p, tmp_path / "t")
    assert result.outcome.value == "complete", result.reason
    assert sorted(result.hosts) == sorted(two_nodes.hostnames * 2)  # 2 nodes x 2 ranks per node
    assert result.hosts[0] == result.hosts[1] and result.hosts[2] == result.hosts[3] != result.hosts[0]
    applied = json.loads((tmp_path / "t" / "applied.json").read_text())
    assert applied["allreduce_calls_total"] >= applied["steps"]  # DDP all-reduced across the namespaces
    # Rank 3 sleeps 50 ms in every step, on the other node: rank 0 reports the slowest rank's step time.
    for w in result.windows:
        assert w.window_throughput_samples_s <= p.config.global_batch / 0.05
    _nothing_left(two_nodes, tmp_path / "t")


@pytest.mark.slow
def test_nodes_whose_names_resolve_nowhere_still_meet(two_nodes: NetnsCluster, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No DNS for the nodes: each publishes the address that routes to srun's node, and gloo uses its
    interface."""
    nameless = NetnsCluster(nodes=2, resolve_names=False).start()
    try:
        monkeypatch.setenv("SLURM_CONF", str(nameless.conf))
        assert nameless.exec(1, ["getent", "hosts", nameless.node(2).name]).returncode != 0
        result = _trial(plan(world_size=2), tmp_path / "t")
        assert result.outcome.value == "complete", result.reason
        assert sorted(result.hosts) == nameless.hostnames
        endpoint = next((tmp_path / "t").glob("rdzv-*")).read_text().splitlines()
        assert endpoint[0].split(":")[0] == nameless.node(1).address
    finally:
        nameless.stop()


# ---------------------------------------------------------------------------------------------- the faults
@pytest.mark.slow
def test_a_rank_killed_on_node_2_is_crashed_with_the_node_named_and_the_study_goes_on(
    two_nodes: NetnsCluster, tmp_path: Path
) -> None:
    first = tmp_path / "runs" / "two-nodes" / "trial-0000"

    def kill() -> None:
        two_nodes.exec(2, ["kill", "-KILL", str(_rank_on(two_nodes, first, 2))])

    watcher = _during_training(first, kill)
    trials = _run_study(tmp_path, 2, args=", fault: slow", steps=60)
    watcher.join(timeout=5)
    killed, after = trials
    assert killed.user_attrs["outcome"] == "crashed"
    assert "killed by SIGKILL" in killed.user_attrs["reason"]
    assert two_nodes.node(2).name in killed.user_attrs["reason"]
    assert after.user_attrs["outcome"] == "complete", after.user_attrs["reason"]
    _nothing_left(two_nodes, first)


@pytest.mark.slow
def test_node_2_losing_its_slurmd_mid_trial_ends_it_crashed_and_the_next_trial_runs(
    two_nodes: NetnsCluster, tmp_path: Path
) -> None:
    p = plan("slow", world_size=2, limits={"max_steps": 1000, "max_seconds": 120, "hang_seconds": 20})
    watcher = _during_training(tmp_path / "a", lambda: two_nodes.stop_slurmd(2))
    result = _trial(p, tmp_path / "a")
    watcher.join(timeout=5)
    assert result.outcome.value == "crashed"
    assert result.reason.startswith(f"node {two_nodes.node(2).name}")
    two_nodes.ensure_up()  # slurmd back: SLURM returns the node to service and ends what was left of the step
    _nothing_left(two_nodes, tmp_path / "a")
    again = _trial(plan(world_size=2), tmp_path / "b")
    assert again.outcome.value == "complete", again.reason
    assert sorted(again.hosts) == two_nodes.hostnames


@pytest.mark.slow
def test_node_2_losing_power_mid_trial_ends_it_crashed_with_the_node_named(
    two_nodes: NetnsCluster, tmp_path: Path
) -> None:
    p = plan("slow", world_size=2, limits={"max_steps": 1000, "max_seconds": 120, "hang_seconds": 15})
    watcher = _during_training(tmp_path / "t", lambda: two_nodes.power_off(2))
    result = _trial(p, tmp_path / "t")
    watcher.join(timeout=5)
    assert result.outcome.value == "crashed", result.reason
    assert f"node {two_nodes.node(2).name}" in result.reason
    assert wait_no_leftovers(tmp_path / "t", within_s=10) == []
    two_nodes.ensure_up()
    _nothing_left(two_nodes, tmp_path / "t")


@pytest.mark.slow
def test_a_node_that_cannot_reach_node_1_says_so(two_nodes: NetnsCluster, tmp_path: Path) -> None:
    two_nodes.cut_off(2)  # node 2 keeps its route to the controller, loses the one to node 1
    try:
        result = _trial(plan(world_size=2, limits={"max_seconds": 60}), tmp_path / "t")
    finally:
        two_nodes.heal()
    assert result.outcome.value == "crashed"
    n1, n2 = two_nodes.node(1), two_nodes.node(2)
    assert result.reason.startswith(f"node 1 ({n2.name}): cannot reach the rendezvous {n1.address}:")
    assert f"on node 0 ({n1.name})" in result.reason and "unreachable" in result.reason
    _nothing_left(two_nodes, tmp_path / "t")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ifname", "says"),
    [
        ("nosuch0", "GLOO_SOCKET_IFNAME=nosuch0: this node has no interface of that name with an IPv4 address "
                    f"(it has {NODE_IFNAME}, {ISOLATED_IFNAME}"),
        ("lo", "GLOO_SOCKET_IFNAME=lo: its address 127.0.0.1 is loopback, which the other nodes cannot reach"),
        (ISOLATED_IFNAME, "cannot reach the rendezvous"),  # an interface on a network no other node is on
    ],
)
def test_a_wrong_gloo_interface_fails_clearly(
    two_nodes: NetnsCluster, tmp_path: Path, ifname: str, says: str
) -> None:
    # the start-up timeout bounds the wait for an unreachable rendezvous (iso0: nothing answers, so the node
    # waits it out); 8 s of it says the same as the default 0.75 x max_seconds, in a third of the time
    p = _with_env(plan(world_size=2, limits={"max_seconds": 30}), GLOO_SOCKET_IFNAME=ifname)
    p = p.model_copy(update={"startup_timeout_s": 8.0})
    result = _trial(p, tmp_path / "t")
    assert result.outcome.value == "crashed"  # before the wall-clock cap: not a timeout
    assert result.reason.startswith("node ") and says in result.reason, result.reason
    assert any(n.name in result.reason for n in two_nodes.node_list)
    _nothing_left(two_nodes, tmp_path / "t")
