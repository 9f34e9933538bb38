"""Per-step wall times of long runs, one rank against two: where a trial's early steps lose time.

Runs each configuration once per repeat (interleaved) with a fixed 3-step warm-up and ``step_times`` on
(each rank writes its steps' end times and its memory readings' durations to ``steps.rank<N>.json``), then
prints per configuration: the first steps' times, the median step of steps 4-13 and of the last 20 over the
median of the whole tail, and the memory reading's cost. Used for issue 16 (benchmarks/README.md, fidelity).

    python benchmarks/step_times.py --workload hf --steps 250
    python benchmarks/step_times.py --quick
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from pathlib import Path
from typing import Any

from _common import MLP, RUNS, Trials, WorkloadRef, console, default_out, machine_facts, print_table, write_json

HF = WorkloadRef("studies/hf_gpt2.py:build", {"n_layer": 2, "n_embd": 128, "n_head": 4, "seq_len": 64})
CONFIGS = [{"batch_size": 32, "world_size": 1}, {"batch_size": 32, "world_size": 2},
           {"batch_size": 16, "world_size": 2}, {"batch_size": 64, "world_size": 1}]


def step_durations(trial_dir: Path) -> dict[str, Any]:
    """Each rank's step durations (s; the first from its predecessor's end, so steps 2..N) and readings."""
    import json

    out = {}
    for path in sorted(trial_dir.glob("steps.rank*.json")):
        data = json.loads(path.read_text())
        ends = data["step_end"]
        out[path.stem.split(".")[-1]] = {"steps": [b - a for a, b in itertools.pairwise(ends)],
                                         "memory_read_s": data["memory_read_s"]}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: the MLP, 2 configurations, 30 steps")
    parser.add_argument("--workload", choices=["hf", "mlp"], default="hf")
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    workload = MLP if args.quick or args.workload == "mlp" else HF
    steps = 30 if args.quick else args.steps
    configs = CONFIGS[:2] if args.quick else CONFIGS
    started, machine = time.monotonic(), machine_facts()
    rows, records = [], []
    from autotune.spec import TrialLimits
    from autotune.trial_runner import TrialPlan, run_trial

    with Trials(workload, RUNS / "step_times") as trials:
        trials.run(trials.config({}), {"warmup_steps": 1, "max_steps": 3}, "warm", tag="warm-up")
        for repeat in range(args.repeats):
            for knobs in configs:
                config = trials.config(knobs)
                plan = TrialPlan(config=config, entrypoint=workload.entrypoint, args=dict(workload.args),
                                 base_dir=str(Path(__file__).resolve().parent.parent), step_times=True,
                                 limits=TrialLimits(warmup="fixed", warmup_steps=3, max_steps=steps,
                                                    max_seconds=3600, hang_seconds=120))
                trial_dir = RUNS / "step_times" / f"{workload.name}-{repeat}-{config.short().replace(' ', '_')}"
                load = os.getloadavg()[0]
                result = run_trial(plan, trial_dir, trials.launcher("warm"))
                ranks = step_durations(trial_dir)
                slowest = [max(v) for v in zip(*(r["steps"] for r in ranks.values()), strict=False)]
                tail = statistics.median(slowest[len(slowest) // 2:]) if slowest else None
                early = statistics.median(slowest[2:12]) if len(slowest) > 12 else None
                reads = [x for r in ranks.values() for x in r["memory_read_s"]]
                record: dict[str, Any] = {"knobs": knobs, "repeat": repeat, "outcome": result.outcome.value,
                          "throughput_samples_s": result.throughput_samples_s, "load_at_start": load,
                          "first_steps_s": [round(x, 4) for x in slowest[:6]], "early_over_tail":
                          early / tail if early and tail else None,
                          "last20_over_tail": statistics.median(slowest[-20:]) / tail if tail else None,
                          "tail_step_s": tail, "memory_read_ms_median": 1000 * statistics.median(reads)
                          if reads else None, "ranks": ranks}
                records.append(record)
                rows.append([config.short(), load, result.throughput_samples_s, record["first_steps_s"][:4],
                             tail, record["early_over_tail"], record["last20_over_tail"],
                             record["memory_read_ms_median"]])
                console.print(f"  {config.short()}: {result.outcome.value}, {result.throughput_samples_s}")
    print_table(f"Per-step wall times, {workload.name}, {steps} steps (slowest rank per step)",
                ["configuration", "load", "samples/s", "steps 2-5 s", "median step s (2nd half)",
                 "steps 4-13 / 2nd half", "last 20 / 2nd half", "memory read ms"], rows)
    write_json(args.out or default_out("step_times", args.quick), "step_times",
               {"workload": workload.name, "steps": steps, "repeats": args.repeats}, records, machine, started)


if __name__ == "__main__":
    main()
