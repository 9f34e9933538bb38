"""Is a zygote's first trial faster than its later ones? The baseline is always the first.

A study's warm launcher forks every trial from one zygote, and the baseline (the workload's default
configuration, the reference of the `best` pruner and the speed-up's denominator) is always its first fork.
If a first fork measured faster than later ones (fresher memory, a cache the later forks share), every
search trial would be pruned against a favoured reference and every speed-up understated. This runs the
default configuration of studies/hf_gpt2.yaml's GPT-2 (or `--workload mlp`, the quickstart's MLP) as the
study file measures it, `--pairs` times in each of two arms, alternating which goes first:

- `first`: a fresh warm launcher (a new zygote) each time, its first fork measured;
- `later`: one warm launcher for the whole run whose first fork is spent on a discarded trial, so every
  measured trial is a later fork, as a study's search trials are.

Reported: each arm's samples/s (median, min-max, run-to-run CV) and first over later.

    python benchmarks/first_fork.py              # 8 pairs of the GPT-2's default configuration: ~3 minutes
    python benchmarks/first_fork.py --workload mlp
    python benchmarks/first_fork.py --quick      # smoke run: 2 pairs of 6-step trials (the GPT-2 smaller)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    RUNS,
    Trials,
    console,
    cv,
    default_out,
    fmt,
    hf_study,
    machine_caption,
    machine_facts,
    median,
    print_table,
    ratio,
    stage,
    warn_if_busy,
    write_json,
)

#: The quickstart's trial section (studies/quickstart.yaml), for --workload mlp.
QUICKSTART_TRIAL = {"warmup_steps": 5, "max_steps": 50, "report_every": 5, "max_seconds": 120}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 pairs of 6-step trials (the GPT-2 smaller)")
    parser.add_argument("--workload", choices=["hf", "mlp"], default="hf", help="the GPT-2 (default) or the MLP")
    parser.add_argument("--pairs", type=int, help="trials per arm (default 8; quick 2)")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/first_fork[_mlp].json)")
    args = parser.parse_args(argv)
    quick = args.quick
    pairs = args.pairs or (2 if quick else 8)
    if pairs < 1:
        parser.error("--pairs: give 1 or more")
    if args.workload == "hf":
        workload, trial = hf_study(quick)
    else:
        workload, trial = MLP, dict(QUICKSTART_TRIAL)
    if quick:
        trial.update(warmup_steps=1, max_steps=6, report_every=2)
    out = args.out or default_out("first_fork" if args.workload == "hf" else "first_fork_mlp", quick)
    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    runs: list[dict[str, Any]] = []
    folder = RUNS / "first_fork"
    with Trials(workload, folder) as shared:
        default = shared.config({})
        with stage("the shared launcher's first fork (discarded)"):
            shared.run(default, trial, "warm", tag="spent")
        with stage(f"{pairs} pairs, alternating which arm goes first"):
            for pair in range(pairs):
                for arm in (("first", "later") if pair % 2 == 0 else ("later", "first")):
                    if arm == "later":
                        result = shared.run(default, trial, "warm", tag=f"later{pair}")
                    else:
                        with Trials(workload, folder) as fresh:
                            result = fresh.run(default, trial, "warm", tag=f"first{pair}")
                    runs.append({"pair": pair, "arm": arm, "outcome": result.outcome.value,
                                 "samples_s": result.throughput_samples_s, "measured_s": result.training_s,
                                 "machine_load": result.machine_load})
                    console.print(f"  pair {pair} {arm}: {fmt(result.throughput_samples_s)} samples/s")
    arms: dict[str, dict[str, Any]] = {}
    for arm in ("first", "later"):
        values = [r["samples_s"] for r in runs if r["arm"] == arm and r["outcome"] == "complete" and r["samples_s"]]
        arms[arm] = {"trials": len(values), "samples_s": values, "median": median(values), "cv": cv(values),
                     "min": min(values, default=None), "max": max(values, default=None)}
    first_over_later = ratio(arms["first"]["median"], arms["later"]["median"])
    print_table(
        f"A zygote's first fork against its later ones: the {args.workload.upper()} workload's default configuration, "
        f"{trial['max_steps']}-step trials",
        ["arm", "trials", "samples/s (median)", "min-max", "run-to-run CV"],
        [[arm, a["trials"], a["median"], f"{fmt(a['min'])}-{fmt(a['max'])}", fmt(a["cv"])] for arm, a in arms.items()],
        caption=machine_caption(machine),
    )
    console.print(f"first fork / later forks (medians): {fmt(first_over_later)}")
    write_json(out, "first_fork",
               {"quick": quick, "workload": args.workload, "entrypoint": workload.entrypoint,
                "workload_args": dict(workload.args), "trial": trial, "pairs": pairs},
               {"arms": arms, "first_over_later": first_over_later, "runs": runs}, machine, started)


if __name__ == "__main__":
    main()
