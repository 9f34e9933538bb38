"""Does a longer trial measure more precisely? The scatter of repeated trials against their length.

A few configurations of studies/hf_gpt2.yaml's GPT-2 (issue 16's real model), each run ``--repeats`` times
at each of ``--lengths`` (max_steps; the study file's other trial settings: the steady warm-up, its reporting
windows), every (configuration, length) pair once per round, rounds in a seeded order, so that the machine's
drift hits every length alike. Reported per configuration and length: the measured seconds of a trial
(after its warm-up), the coefficient of variation of the repeats' throughput (the run-to-run scatter), and
beside it the trials' own estimate of that scatter: the median relative standard error of a trial's mean
over its windows (its ``throughput_spread``, the ~95% interval of that mean which the pruner's margin and the
summary use, divided by its Student's t).

If the scatter fell as the measured time grew, a trial that runs longer (or a floor on the measured seconds)
would rank near-equal configurations better; if it does not, the noise is run-to-run, and only repeated,
interleaved runs (the confirmation stage) average it out.

    python benchmarks/trial_scatter.py            # 3 configurations x lengths 20 50 100 x 5 repeats: ~12 minutes
    python benchmarks/trial_scatter.py --quick    # smoke run: one configuration of a smaller GPT-2, lengths 6 and 10,
                                                  # 2 repeats
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
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
    seeded_shuffle,
    stage,
    warn_if_busy,
    write_json,
)

CONFIGS: list[dict[str, Any]] = [{"batch_size": 32}, {"batch_size": 16, "world_size": 2},
                                 {"batch_size": 64, "world_size": 2}]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: one configuration of a smaller GPT-2, 6 and 10 steps, 2 repeats")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/trial_scatter.json)")
    parser.add_argument("--lengths", type=int, nargs="+", help="max_steps of the trials (default 20 50 100)")
    parser.add_argument("--repeats", type=int, help="trials per configuration and length (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of each round's order")
    args = parser.parse_args(argv)
    quick = args.quick
    lengths = args.lengths or ([6, 10] if quick else [20, 50, 100])
    repeats = args.repeats or (2 if quick else 5)
    configs = CONFIGS[:1] if quick else CONFIGS
    out = args.out or default_out("trial_scatter", quick)
    workload, short = hf_study(quick)
    if quick:
        short.update(warmup_steps=1)

    from autotune.trial_result import t975

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    runs: list[dict[str, Any]] = []
    with Trials(workload, RUNS / "trial_scatter") as trials:
        with stage("starting the warm launcher (one discarded trial)"):
            trials.run(trials.config({}), {"warmup_steps": 1, "max_steps": 3}, "warm", tag="warm-up")
        pairs = [(c, n) for c in configs for n in lengths]
        with stage(f"{len(pairs)} (configuration, length) pairs x {repeats} rounds"):
            for round_ in range(repeats):
                for config, steps in seeded_shuffle(pairs, args.seed + round_):
                    limits = {**short, "max_steps": steps, "max_seconds": max(60.0, steps * 3.0)}
                    result = trials.run(trials.config(config), limits, "warm", tag=f"n{steps}")
                    runs.append({
                        "config": config, "max_steps": steps, "round": round_, "outcome": result.outcome.value,
                        "samples_s": result.throughput_samples_s, "measured_s": result.training_s,
                        "warmup_steps_used": result.warmup_steps_used, "settled": result.settled,
                        "throughput_spread": result.throughput_spread, "windows": len(result.windows),
                        "standard_error": None if result.throughput_spread is None or len(result.windows) < 2
                        else result.throughput_spread / t975(len(result.windows) - 1),
                        "machine_load": result.machine_load,
                    })
                    console.print(f"  round {round_}: {config} {steps} steps: {fmt(result.throughput_samples_s)} "
                                  f"samples/s over {result.training_s:.1f} s")
    rows: list[dict[str, Any]] = []
    for config in configs:
        for steps in lengths:
            mine = [r for r in runs if r["config"] == config and r["max_steps"] == steps
                    and r["outcome"] == "complete" and r["samples_s"]]
            values = [r["samples_s"] for r in mine]
            errors = [r["standard_error"] for r in mine if r["standard_error"] is not None]
            rows.append({
                "config": config, "max_steps": steps, "trials": len(values),
                "measured_s": median([r["measured_s"] for r in mine]),
                "warmup_steps_used": median([r["warmup_steps_used"] for r in mine if r["warmup_steps_used"]]),
                "samples_s_median": median(values), "samples_s": values, "cv": cv(values),
                "standard_error_median": median(errors),
            })
    print_table(
        "Scatter of repeated trials by length (HF GPT-2)",
        ["configuration", "max_steps", "trials", "measured s", "warm-up steps", "samples/s (median)",
         "run-to-run CV", "a trial's own standard error"],
        [[", ".join(f"{k}={v}" for k, v in r["config"].items()), r["max_steps"], r["trials"], r["measured_s"],
          r["warmup_steps_used"], r["samples_s_median"], fmt(r["cv"]),
          fmt(r["standard_error_median"])] for r in rows],
        caption=machine_caption(machine),
    )
    by_length = {steps: median([r["cv"] for r in rows if r["max_steps"] == steps and r["cv"] is not None])
                 for steps in lengths}
    console.print("median run-to-run CV by length: " + ", ".join(f"{n} steps {fmt(v)}" for n, v in by_length.items()))
    write_json(out, "trial_scatter",
               {"quick": quick, "entrypoint": workload.entrypoint, "workload_args": dict(workload.args),
                "trial": short, "lengths": lengths, "repeats": repeats, "configs": configs, "seed": args.seed},
               {"rows": rows, "runs": runs, "cv_by_length": {str(k): v for k, v in by_length.items()}},
               machine, started)


if __name__ == "__main__":
    main()
