"""Record a landscape: every configuration of a grid over the MLP workload's knobs, each measured once.

The grid (``_common.MLP_GRID``): batch_size {16, 32, 64, 128, 256} x num_workers {0, 1, 2} x amp {off, bf16}
x world_size {1, 2} = 60 configurations of the quickstart MLP, each run once as a short real trial with the
default (warm) launcher, in a seeded random order (so a machine that drifts does not favour one corner of
the grid). Saved per configuration: the knobs, the TrialConfig, the outcome, the final throughput, wall
time, time to first step, peak memory, and every reporting window (step, seconds since launch, throughput
so far, window throughput, memory, loss), so that search_efficiency.py can replay studies against it,
pruning included, and fidelity.py can pick its top configurations.

    python benchmarks/landscape.py            # full: 60 trials, about 3 minutes on 2 cores
    python benchmarks/landscape.py --quick    # smoke run: 12 configurations, short trials, under a minute
    python benchmarks/landscape.py --grid large [--seed 1 --out ...]  # 361 configurations, about 45 minutes
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    MLP_GRID,
    MLP_GRID_QUICK,
    console,
    default_out,
    grid_configs,
    machine_caption,
    machine_facts,
    pct,
    print_table,
    space_of_grid,
    warn_if_busy,
    write_json,
)
from _landscapes import measure_once, study_space

LIMITS = {"warmup_steps": 5, "max_steps": 50, "report_every": 5, "max_seconds": 120}  # the quickstart's trial
LIMITS_QUICK = {"warmup_steps": 2, "max_steps": 12, "report_every": 2, "max_seconds": 60}
#: The large grid (``--grid large``): the MLP grid's four knobs and the compute knobs that run on this CPU,
#: threads_per_rank {1, 2} and sharding {ddp, fsdp, fsdp_no_reshard}: 5 x 3 x 2 x 2 x 2 x 3 = 360
#: configurations. compile is left out: each new graph compiles for 10-20 s here and no compiled trial was
#: faster (calibration_gain.py), so it would double the recording for a knob that only ever loses.
MLP_GRID_LARGE: dict[str, list[Any]] = {
    **MLP_GRID,
    "threads_per_rank": [1, 2],
    "sharding": ["ddp", "fsdp", "fsdp_no_reshard"],
}
#: ``--grid large --quick``: a smoke run of the large grid's knobs (16 configurations).
MLP_GRID_LARGE_QUICK: dict[str, list[Any]] = {
    "batch_size": [16, 64],
    "world_size": [1, 2],
    "threads_per_rank": [1, 2],
    "sharding": ["ddp", "fsdp"],
}
#: The large grid's trials: 20 steps, capped at 12 s. A first try at 24 steps and 8 s timed out fp32
#: configurations that matter (batch 256 on two ranks: 512 samples a step at ~1,300 samples/s). bf16 runs
#: 10-33x slower than fp32 on this AVX2-only CPU (half the grid); over the cap a trial is a timeout, as it
#: would be in a study with that ``max_seconds``.
LIMITS_LARGE = {"warmup_steps": 4, "max_steps": 20, "report_every": 4, "max_seconds": 12}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 12 configurations, short trials")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/landscape.json)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the measuring order")
    parser.add_argument("--grid", choices=["standard", "large"], default="standard",
                        help="standard: 60 configurations; large: 361 (360 and the baseline), with threads_per_rank "
                        "and sharding (benchmarks/landscape_large.json)")
    args = parser.parse_args(argv)
    quick = args.quick
    large = args.grid == "large"
    grid = (MLP_GRID_LARGE_QUICK if quick else MLP_GRID_LARGE) if large else MLP_GRID_QUICK if quick else MLP_GRID
    limits = LIMITS_QUICK if quick else LIMITS_LARGE if large else LIMITS
    out = args.out or default_out("landscape_large" if large else "landscape", quick)

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    space = study_space(grid, limits)
    configs = grid_configs(grid)
    default = space.default_config()
    if not space.contains(default):  # threads_per_rank {1, 2}: the baseline runs auto, outside the grid;
        configs.append({name: getattr(default, name) for name in grid})  # a replayed study's first trial
    records = measure_once(space, configs, limits, args.seed, "landscape")
    measured = records
    complete = [r for r in measured if r["outcome"] == "complete" and r["throughput_samples_s"]]
    best = max(complete, key=lambda r: r["throughput_samples_s"]) if complete else None
    default_key = next(
        (r["config_key"] for r in measured if r["config"] == space.default_config().model_dump()), None
    )
    baseline = next((r for r in measured if r["config_key"] == default_key), None)
    ranked = sorted(measured, key=lambda r: -(r["throughput_samples_s"] or 0.0))
    top = best["throughput_samples_s"] if best else None
    print_table(
        f"Landscape: {len(measured)} configurations of {MLP.entrypoint}, one trial each "
        f"(warm-up {limits['warmup_steps']}, {limits['max_steps']} steps)",
        ["#", "configuration", "outcome", "samples/s", "of best", "wall s", "first step s", "peak MB", "loss"],
        [
            [i + 1, r["label"] + ("  (default)" if r is baseline else ""), r["outcome"], r["throughput_samples_s"],
             pct(r["throughput_samples_s"] / top) if top and r["throughput_samples_s"] else None, r["wall_s"],
             r["time_to_first_step_s"], r["peak_memory_mb"], r["loss"]]
            for i, r in enumerate(ranked)
        ],
        caption=machine_caption(machine),
    )
    near = [r for r in complete if top and r["throughput_samples_s"] >= 0.95 * top]
    summary = {
        "configs": len(measured),
        "complete": len(complete),
        "best": None if best is None else {"label": best["label"], "throughput_samples_s": top},
        "default": None if baseline is None else {"label": baseline["label"],
                                                  "throughput_samples_s": baseline["throughput_samples_s"]},
        "best_over_default": (top / baseline["throughput_samples_s"])
        if top and baseline and baseline["throughput_samples_s"] else None,
        "within_95_percent_of_best": len(near),
        "total_wall_s": round(sum(r["wall_s"] for r in measured), 1),
    }
    console.print(
        f"best {summary['best']}, default {summary['default']}, best/default "
        f"{summary['best_over_default'] and round(summary['best_over_default'], 2)}; "
        f"{len(near)} configuration(s) within 95% of the best"
    )
    write_json(
        out,
        "landscape",
        {"quick": quick, "seed": args.seed, "grid_name": args.grid, "workload": MLP.entrypoint,
         "workload_args": dict(MLP.args),
         "grid": grid, "search_space": space_of_grid(grid), "limits": limits, "launcher": "warm"},
        {"summary": summary, "configs": measured},
        machine,
        started,
    )


if __name__ == "__main__":
    main()
