"""Multi-node trials: time to first step and overhead per trial on 1 node vs 2 nodes, as ratios.

The same trial (the quickstart MLP at world size 2, ``max_steps`` chosen from a probe for a training span
of about ``--span-s``) runs through the SLURM launcher on a two-node cluster of network namespaces
(tests/_netns_cluster.py: each node its own netns, hostname, address and slurmd; slurmctld and the tuner on
this machine): once as ``nodes: 1`` (one torchrun with 2 ranks) and once as ``nodes: 2`` (one torchrun per
node, 1 rank each, c10d rendezvous on node 0's address, gloo across the namespaces' bridge), interleaved,
``--repeats`` times. A cold local torchrun trial (no SLURM) is the reference.

**The namespaces share this machine's cores** (two here): a 2-node trial computes on the same cores as a
1-node one, so its numbers say what going through srun, a second torchrun and a rendezvous over a network
costs, not what a second machine gains. Read the ratios, not the seconds.

Per trial: time to first step (launch -> the first step done, as rank 0 records it) and overhead (wall
time minus the training loop's span: srun, imports, rendezvous, building, teardown; ``TrialResult
.overhead_s``), both over the 1-node SLURM trial's, and the throughput ratio.

Needs root and the Debian packages of the test cluster (slurmctld slurmd slurm-client munge iproute2).

    sudo python benchmarks/multinode.py            # about 10 minutes on 2 cores
    sudo python benchmarks/multinode.py --quick    # smoke run: about 2 minutes
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import (
    MLP,
    REPO,
    RUNS,
    Trials,
    console,
    default_out,
    interleaved,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    ratio,
    stage,
    warn_if_busy,
    write_json,
)

sys.path.insert(0, str(REPO))  # tests._netns_cluster

ARMS = ("slurm-1-node", "slurm-2-nodes", "local-torchrun")
WORLD_SIZE = 2
THREADS_PER_RANK = 1


def record(result: Any) -> dict[str, Any]:
    overhead = result.overhead_s
    return {
        "outcome": result.outcome.value,
        "reason": result.reason,
        "hosts": result.hosts,
        "wall_s": round(result.wall_s, 4),
        "training_span_s": round(result.training_span_s, 4),
        "overhead_s": None if overhead is None else round(overhead, 4),
        "overhead_ratio": None if overhead is None or not result.wall_s else round(overhead / result.wall_s, 5),
        "time_to_first_step_s": result.time_to_first_step_s,
        "throughput_samples_s": result.throughput_samples_s,
        "steps": result.steps,
        "trial_dir": result.trial_dir,
    }


def limits(max_steps: int, warmup: int, span_s: float) -> dict[str, Any]:
    return {"warmup_steps": warmup, "max_steps": max_steps, "max_seconds": 3 * span_s + 180, "hang_seconds": 60}


class Runner:
    """One trial of the MLP at world size 2 through one of the arms' launchers."""

    def __init__(self, runs_dir: Path) -> None:
        from autotune.spec import LauncherSpec
        from autotune.trial_runner import LocalLauncher, make_launcher

        def slurm(nodes: int) -> Any:  # the launcher a study file's `launcher: {kind: slurm, nodes: N}` makes
            return make_launcher(SimpleNamespace(launcher=LauncherSpec(kind="slurm", nodes=nodes), source=__file__))

        self.trials = Trials(MLP, runs_dir)
        self.launchers = {"slurm-1-node": slurm(1), "slurm-2-nodes": slurm(2), "local-torchrun": LocalLauncher()}
        self.count = 0

    def run(self, arm: str, limits_: dict[str, Any]) -> Any:
        from autotune.spec import TrialLimits
        from autotune.trial_runner import TrialPlan, run_trial

        # One thread per rank in every arm: each node sizes its ranks' threads to the cores it sees, and the
        # namespaces see the same cores, so "auto" would give a 2-node trial twice the threads of a 1-node one.
        config = self.trials.config({"world_size": WORLD_SIZE, "threads_per_rank": THREADS_PER_RANK})
        plan = TrialPlan(config=config, entrypoint=MLP.entrypoint,
                         args=dict(MLP.args), base_dir=str(REPO), limits=TrialLimits(**limits_))
        self.count += 1
        trial_dir = self.trials.runs_dir / f"{self.count:03d}-{arm}"
        shutil.rmtree(trial_dir, ignore_errors=True)  # nothing of an earlier run's trial in its folder
        return run_trial(plan, trial_dir, self.launchers[arm])


def summarize(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for arm, trials in zip(ARMS, runs, strict=True):
        ok = [t for t in trials if t["outcome"] == "complete"]
        rows.append({
            "arm": arm,
            "trials": len(trials),
            "complete": len(ok),
            "hosts": sorted({h for t in ok for h in t["hosts"]}),
            "time_to_first_step_s": median([t["time_to_first_step_s"] for t in ok if t["time_to_first_step_s"]]),
            "overhead_s": median([t["overhead_s"] for t in ok if t["overhead_s"] is not None]),
            "overhead_ratio": median([t["overhead_ratio"] for t in ok if t["overhead_ratio"] is not None]),
            "wall_s": median([t["wall_s"] for t in ok]),
            "throughput_samples_s": median([t["throughput_samples_s"] for t in ok if t["throughput_samples_s"]]),
            "runs": trials,
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: short trials, one repeat")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/multinode.json)")
    parser.add_argument("--repeats", type=int, help="trials per arm (default 5; quick 1)")
    parser.add_argument("--span-s", type=float, help="training span per trial in seconds (default 10; quick 2)")
    args = parser.parse_args(argv)
    from tests._netns_cluster import NetnsCluster, missing_requirements

    reason = missing_requirements()
    if reason:
        raise SystemExit(reason)
    repeats = args.repeats or (1 if args.quick else 5)
    span_s = args.span_s or (2.0 if args.quick else 10.0)
    warmup = 3
    out = args.out or default_out("multinode", args.quick)
    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    with stage("starting a 2-node SLURM cluster of network namespaces"):
        t0 = time.monotonic()
        cluster = NetnsCluster(nodes=2).start()
        cluster_start_s = time.monotonic() - t0
    os.environ.update(cluster.env())
    # The local arm leases cores from a board of its own: not waiting for other autotune trials on this
    # machine (the SLURM arms never lease; SLURM allocates).
    os.environ["AUTOTUNE_LEASE_DIR"] = str(RUNS / "multinode-leases")
    try:
        runner = Runner(RUNS / "multinode")
        with stage("probe: the step time of a 2-node trial"):
            probe = runner.run("slurm-2-nodes", limits(20, warmup, 60))
            measured = probe.steps - warmup
            if probe.outcome.value != "complete" or measured <= 0 or probe.training_s <= 0:
                raise SystemExit(f"the probe trial failed: {probe.outcome} {probe.reason}")
            max_steps = warmup + max(5, math.ceil(span_s / (probe.training_s / measured)))
        console.print(f"  {1000 * probe.training_s / measured:.1f} ms/step -> max_steps {max_steps}")

        def run(arm: str, repeat: int) -> dict[str, Any]:
            rec = record(runner.run(arm, limits(max_steps, warmup, span_s)))
            console.print(f"  {arm:15s} #{repeat + 1}: {rec['outcome']}, first step {rec['time_to_first_step_s']} s, "
                          f"overhead {rec['overhead_s']} s ({pct(rec['overhead_ratio'])}), hosts {rec['hosts']}")
            return rec

        with stage(f"{len(ARMS)} arms x {repeats} repeats, interleaved"):
            runs = interleaved(list(ARMS), repeats, run)
    finally:
        t0 = time.monotonic()
        cluster.stop()
        cluster_stop_s = time.monotonic() - t0
    rows = summarize(runs)
    one = rows[0]
    for row in rows:
        row["time_to_first_step_vs_1_node"] = ratio(row["time_to_first_step_s"], one["time_to_first_step_s"])
        row["overhead_vs_1_node"] = ratio(row["overhead_s"], one["overhead_s"])
        row["throughput_vs_1_node"] = ratio(row["throughput_samples_s"], one["throughput_samples_s"])
    print_table(
        "1 node vs 2 nodes (SLURM, world size 2; the namespaces share this machine's cores)",
        ["arm", "complete", "time to first step s", "x 1 node", "overhead s", "x 1 node", "overhead / wall",
         "throughput x 1 node"],
        [[r["arm"], f"{r['complete']}/{r['trials']}", r["time_to_first_step_s"], r["time_to_first_step_vs_1_node"],
          r["overhead_s"], r["overhead_vs_1_node"], pct(r["overhead_ratio"]), r["throughput_vs_1_node"]]
         for r in rows],
        caption=machine_caption(machine),
    )
    console.print(f"cluster start {cluster_start_s:.1f} s, stop {cluster_stop_s:.1f} s")
    write_json(out, "multinode",
               {"world_size": WORLD_SIZE, "repeats": repeats, "span_s": span_s, "max_steps": max_steps,
                "warmup_steps": warmup, "workload": MLP.entrypoint, "workload_args": dict(MLP.args),
                "threads_per_rank": THREADS_PER_RANK, "cores_shared_by_the_nodes": machine["nproc"]},
               {"arms": rows, "probe": record(probe), "cluster_start_s": round(cluster_start_s, 2),
                "cluster_stop_s": round(cluster_stop_s, 2)},
               machine, started)


if __name__ == "__main__":
    main()
