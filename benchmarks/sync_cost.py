"""Exposed synchronisation against its known cost: a two-rank DDP trial whose step is nearly all gradient
all-reduce (tests/trial_runner/sync_workload.py: 8 parameters of 4 MB, each read through one element, ~3 ms of
computation) reports ``sync_exposed_s``; before each step the same ranks all-reduce plain tensors of DDP's own
bucket layout in the same process group (launched one after the other and awaited, as DDP's reducer does):
that step's known cost. Each measured window's exposed sync a step is divided by the mean
known cost of the same window's steps (both the ranks' mean: a rank that arrives late at a collective waits
less in it, on both sides alike), so the two readings are seconds apart and a drifting machine moves both.

Target (issue 34): the median paired ratio within 20% of 1 at every bucket cap; the bucket cap changes the
number of all-reduces a step (DDP's layout), and the exposed time follows that layout's known cost.

    python benchmarks/sync_cost.py                  # 3 caps x 3 interleaved repeats of 64-step trials
    python benchmarks/sync_cost.py --quick          # smoke run: 2 caps x 1 repeat of 24 steps

Needs a quiet machine: at load 6-11 on 2 cores single windows scattered 0.6-3.8x; at load 4-6 the medians
were 0.87-1.22.
The JSON records the machine's CPU flags and its load at start and end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    REPO,
    RUNS,
    check,
    default_out,
    interleaved,
    machine_caption,
    machine_facts,
    median,
    print_table,
    stage,
    warn_if_busy,
    write_json,
)

sys.path.insert(0, str(REPO))
from tests.trial_runner.sync_workload import buckets, paired_ratios, rank_file

TARGET = 0.20
PARAMS, PARAM_MB = 8, 4.0
WORKLOAD = "tests/trial_runner/sync_workload.py:build"


def one_trial(launcher: Any, folder: Path, cap: int, steps: int) -> dict[str, Any]:
    from autotune.search_space import TrialConfig
    from autotune.spec import TrialLimits
    from autotune.trial_runner import Outcome, TrialPlan, run_trial

    reference = folder.with_suffix(".reference.jsonl")
    config = TrialConfig.create(base_lr=1e-4, base_batch_size=1, batch_size=1, world_size=2, bucket_cap_mb=cap,
                                gradient_as_bucket_view=True)
    limits = TrialLimits(warmup="fixed", warmup_steps=8, max_steps=steps, report_every=4, max_seconds=600)
    plan = TrialPlan(config=config, entrypoint=WORKLOAD, base_dir=str(REPO), limits=limits, trace=True,
                     args={"params": PARAMS, "param_mb": PARAM_MB, "reference": str(reference)})
    result = run_trial(plan, folder, launcher)
    if result.outcome is not Outcome.COMPLETE:
        raise SystemExit(f"trial {folder} did not complete: {result.reason}")
    readings = [json.loads(line)["s"] for rank in (0, 1)
                for line in rank_file(reference, rank).read_text().splitlines()]
    applied = json.loads((folder / "applied.json").read_text())
    exposed = [w.step_anatomy_mean.sync_exposed_s for w in result.windows if w.step_anatomy_mean is not None]
    return {
        "ratios": paired_ratios(result.windows, reference),
        "exposed_ms": 1000 * statistics.median(e for e in exposed if e is not None),
        "known_ms": 1000 * statistics.median(readings),
        "allreduces_per_step": (applied["allreduce_calls_total"] - 1) / max(1, applied["steps"] - 1),
        "throughput": result.throughput_samples_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caps", type=int, nargs="+", default=[25, 4, 1], help="bucket_cap_mb values")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="2 caps x 1 repeat of 24 steps")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    caps, repeats, steps = ([25, 1], 1, 24) if args.quick else (args.caps, args.repeats, args.steps)
    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    from autotune.trial_runner import WarmLauncher

    runs = RUNS / "sync_cost"
    runs.mkdir(parents=True, exist_ok=True)
    launcher = WarmLauncher()
    count = iter(range(1 << 20))
    try:
        with stage(f"{len(caps)} bucket caps x {repeats} interleaved repeats of {steps} steps"):
            per_cap = interleaved(caps, repeats, lambda cap, _r: one_trial(
                launcher, runs / f"{time.strftime('%H%M%S')}-{next(count):03d}-cap{cap}", cap, steps))
    finally:
        launcher.close()
    rows = []
    for cap, trials in zip(caps, per_cap, strict=True):
        ratios = [r for t in trials for r in t["ratios"]]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        rows.append({
            "bucket_cap_mb": cap, "buckets": buckets(PARAMS, PARAM_MB, cap),
            "allreduces_per_step": median([t["allreduces_per_step"] for t in trials]),
            "exposed_ms": median([t["exposed_ms"] for t in trials]),
            "known_ms": median([t["known_ms"] for t in trials]),
            "median_ratio": statistics.median(ratios), "ratio_p25": quartiles[0], "ratio_p75": quartiles[2],
            "trial_median_ratios": [statistics.median(t["ratios"]) for t in trials], "windows": len(ratios),
            "trials": trials,
        })
    print_table(
        f"exposed sync vs the known cost of the same all-reduces, {PARAMS} x {PARAM_MB:g} MB of gradients, "
        f"{repeats} interleaved repeats of {steps} steps",
        ["bucket_cap_mb", "all-reduces a step", "exposed (ms/step)", "known cost (ms)", "median ratio",
         "p25-p75", "per trial", "windows"],
        [[r["bucket_cap_mb"], f"{r['allreduces_per_step']:.1f}", f"{r['exposed_ms']:.1f}", f"{r['known_ms']:.1f}",
          f"{r['median_ratio']:.3f}", f"{r['ratio_p25']:.2f}-{r['ratio_p75']:.2f}",
          " ".join(f"{x:.2f}" for x in r["trial_median_ratios"]), r["windows"]] for r in rows],
        caption=machine_caption(machine),
    )
    met = all(abs(r["median_ratio"] - 1) <= TARGET for r in rows)
    worst = max(abs(r["median_ratio"] - 1) for r in rows)
    print(f"worst |median ratio - 1|: {worst:.1%} {check(met)} target <= {TARGET:.0%} (needs a quiet machine)")
    out = default_out("sync_cost", args.quick) if args.out is None else Path(args.out)
    write_json(out, "sync_cost", {"caps": caps, "repeats": repeats, "steps": steps, "params": PARAMS,
                                  "param_mb": PARAM_MB, "workload": WORKLOAD},
               {"rows": rows, "worst_deviation": worst, "met": met, "target": TARGET}, machine, started)


if __name__ == "__main__":
    main()
