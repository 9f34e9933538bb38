"""Launch overhead: the share of a trial's wall time not spent training.

Per trial, overhead = wall time (launch -> every process gone) - the training loop's span (rank 0, warm-up
steps included), i.e. launch, imports, rendezvous, building the workload and teardown; the benchmark
reports ``overhead_s / wall_s``. The MLP quickstart workload at its default configuration runs with the
warm launcher (the default: ranks forked from an interpreter that imported torch) and with a cold
``torchrun`` per trial, at world sizes 1 and 2, interleaved, ``--repeats`` times each. ``max_steps`` is
chosen per world size (from a probe trial) so that the training span is about ``--span-s`` seconds.

The warm launcher's one-off cost, starting its zygote (the warm interpreter), is paid by the first trial
of a study only: it is measured separately, on fresh launchers, as the first trial against the second.

Target: overhead <= 5% of a 20 s trial at world size 2 with the default (warm) launcher.

    python benchmarks/overhead.py            # full: about 8 minutes on 2 cores
    python benchmarks/overhead.py --quick    # smoke run: about a minute
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    RUNS,
    LauncherKind,
    Trials,
    check,
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

TARGET_RATIO = 0.05
TARGET_WORLD_SIZE = 2
KINDS: tuple[LauncherKind, ...] = ("warm", "torchrun")


def record(result: Any, launch_s: float | None) -> dict[str, Any]:
    """The numbers of one trial that this benchmark reports. ``launch_s``: the launcher's launch() call (the
    zygote start on a fresh warm launcher, a wait for cores another trial holds, fork or exec)."""
    overhead = result.overhead_s
    return {
        "outcome": result.outcome.value,
        "launch_s": None if launch_s is None else round(launch_s, 4),
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
    return {
        "warmup_steps": warmup,
        "max_steps": max_steps,
        "max_seconds": 3 * span_s + 120,  # a generous cap: a slow trial is measured, not killed
        "hang_seconds": 60,
    }


def choose_steps(trials: Trials, world_size: int, span_s: float, warmup: int, probe_steps: int) -> dict[str, Any]:
    """Probe one trial (warm launcher) and pick max_steps for a training span of about ``span_s``."""
    config = trials.config({"world_size": world_size})
    result = trials.run(config, limits(probe_steps, warmup, 60), "warm", tag=f"probe-ws{world_size}")
    measured = result.steps - warmup
    if result.outcome.value != "complete" or measured <= 0 or result.training_s <= 0:
        raise SystemExit(f"the probe trial at world size {world_size} failed: {result.outcome} {result.reason}")
    step_s = result.training_s / measured  # measured steps only: the first steps are slower
    warmup_s = max(0.0, result.training_span_s - result.training_s)
    return {
        "world_size": world_size,
        "probe_step_s": round(step_s, 5),
        "max_steps": warmup + max(5, math.ceil((span_s - warmup_s) / step_s)),
        "probe": record(result, trials.last_launch_s("warm")),
    }


def zygote_cost(repeats: int, world_size: int) -> list[dict[str, Any]]:
    """On fresh warm launchers: the first trial (pays for starting the zygote) against the second."""
    out = []
    tiny = {"warmup_steps": 1, "max_steps": 4, "max_seconds": 180, "hang_seconds": 60}
    for i in range(repeats):
        with Trials(MLP, RUNS / "overhead" / f"zygote-{i}") as trials:
            config = trials.config({"world_size": world_size})
            first = record(trials.run(config, tiny, "warm", tag="first"), trials.last_launch_s("warm"))
            second = record(trials.run(config, tiny, "warm", tag="second"), trials.last_launch_s("warm"))
        out.append({"first": first, "second": second})
    return out


def summarize(arms: list[tuple[LauncherKind, int]], runs: list[list[dict[str, Any]]],
              steps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for (kind, world_size), trials in zip(arms, runs, strict=True):
        ok = [t for t in trials if t["outcome"] == "complete" and t["overhead_ratio"] is not None]
        ratios = [t["overhead_ratio"] for t in ok]
        rows.append(
            {
                "launcher": kind,
                "world_size": world_size,
                "max_steps": steps[world_size]["max_steps"],
                "trials": len(trials),
                "complete": len(ok),
                "training_span_s": median([t["training_span_s"] for t in ok]),
                "wall_s": median([t["wall_s"] for t in ok]),
                "overhead_s": median([t["overhead_s"] for t in ok]),
                "overhead_ratio": median(ratios),
                "overhead_ratio_min": min(ratios) if ratios else None,
                "overhead_ratio_max": max(ratios) if ratios else None,
                "time_to_first_step_s": median([t["time_to_first_step_s"] for t in ok if t["time_to_first_step_s"]]),
                "launch_s": median([t["launch_s"] for t in ok if t["launch_s"] is not None]),
                "throughput_samples_s": median([t["throughput_samples_s"] for t in ok if t["throughput_samples_s"]]),
                "runs": trials,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: short trials, one repeat")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/overhead.json)")
    parser.add_argument("--repeats", type=int, help="trials per launcher and world size (default 5; quick 1)")
    parser.add_argument("--span-s", type=float, help="training span per trial in seconds (default 20; quick 3)")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--zygote-repeats", type=int, help="fresh warm launchers timed (default 3; quick 1)")
    args = parser.parse_args(argv)
    quick = args.quick
    repeats = args.repeats or (1 if quick else 5)
    span_s = args.span_s or (3.0 if quick else 20.0)
    zygote_repeats = args.zygote_repeats if args.zygote_repeats is not None else (1 if quick else 3)
    warmup = 3
    out = args.out or default_out("overhead", quick)

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    with Trials(MLP, RUNS / "overhead" / "main") as trials:
        with stage("probing step times (the first probe also starts the warm launcher's zygote)"):
            steps = {ws: choose_steps(trials, ws, span_s, warmup, 12 if quick else 25) for ws in args.world_sizes}
        for ws, chosen in steps.items():
            console.print(f"  world size {ws}: {chosen['probe_step_s'] * 1000:.1f} ms/step -> "
                          f"max_steps {chosen['max_steps']}")
        arms: list[tuple[LauncherKind, int]] = [(kind, ws) for ws in args.world_sizes for kind in KINDS]

        def run(arm: tuple[LauncherKind, int], repeat: int) -> dict[str, Any]:
            kind, ws = arm
            config = trials.config({"world_size": ws})
            result = trials.run(config, limits(steps[ws]["max_steps"], warmup, span_s), kind, tag=f"{kind}-ws{ws}")
            rec = record(result, trials.last_launch_s(kind))
            console.print(
                f"  {kind:8s} ws={ws} #{repeat + 1}: {rec['outcome']}, wall {rec['wall_s']:.2f} s, "
                f"overhead {rec['overhead_s'] if rec['overhead_s'] is None else round(rec['overhead_s'], 2)} s "
                f"({pct(rec['overhead_ratio'])})"
            )
            return rec

        with stage(f"{len(arms)} arms x {repeats} repeats, interleaved"):
            runs = interleaved(arms, repeats, run)
    with stage(f"zygote start cost: {zygote_repeats} fresh warm launcher(s), first trial vs second"):
        zygote = zygote_cost(zygote_repeats, TARGET_WORLD_SIZE)

    rows = summarize(arms, runs, steps)
    by_arm = {(r["launcher"], r["world_size"]): r for r in rows}
    target_row = by_arm.get(("warm", TARGET_WORLD_SIZE))
    met = None if target_row is None or target_row["overhead_ratio"] is None else (
        target_row["overhead_ratio"] <= TARGET_RATIO
    )
    firsts = [z["first"] for z in zygote if z["first"]["time_to_first_step_s"]]
    seconds = [z["second"] for z in zygote if z["second"]["time_to_first_step_s"]]
    zygote_summary = {
        "world_size": TARGET_WORLD_SIZE,
        "first_time_to_first_step_s": median([z["time_to_first_step_s"] for z in firsts]),
        "later_time_to_first_step_s": median([z["time_to_first_step_s"] for z in seconds]),
        "first_launch_s": median([z["launch_s"] for z in firsts if z["launch_s"] is not None]),
        "later_launch_s": median([z["launch_s"] for z in seconds if z["launch_s"] is not None]),
        "first_overhead_s": median([z["overhead_s"] for z in firsts if z["overhead_s"] is not None]),
        "later_overhead_s": median([z["overhead_s"] for z in seconds if z["overhead_s"] is not None]),
    }
    # Time to first step does not count a wait for cores another trial holds (the launch time is reset
    # after a wait); wall time and launch() do. The one-off cost is read from the time to first step.
    one_off = None
    if zygote_summary["first_time_to_first_step_s"] is not None and zygote_summary["later_time_to_first_step_s"]:
        one_off = zygote_summary["first_time_to_first_step_s"] - zygote_summary["later_time_to_first_step_s"]
    zygote_summary["one_off_cost_s"] = one_off

    print_table(
        "Launch overhead per trial: (wall - training span) / wall, median over repeats",
        ["launcher", "ranks", "max_steps", "ok/trials", "span s", "wall s", "overhead s", "overhead",
         "min-max", "first step s", "launch() s"],
        [
            [r["launcher"], r["world_size"], r["max_steps"], f"{r['complete']}/{r['trials']}", r["training_span_s"],
             r["wall_s"], r["overhead_s"], pct(r["overhead_ratio"]),
             f"{pct(r['overhead_ratio_min'])}-{pct(r['overhead_ratio_max'])}", r["time_to_first_step_s"],
             r["launch_s"]]
            for r in rows
        ],
        caption=machine_caption(machine),
    )
    comparisons = []
    for ws in args.world_sizes:
        warm, cold = by_arm[("warm", ws)], by_arm[("torchrun", ws)]
        comparisons.append(
            {
                "world_size": ws,
                "overhead_s_torchrun_over_warm": ratio(cold["overhead_s"], warm["overhead_s"]),
                "time_to_first_step_torchrun_over_warm": ratio(cold["time_to_first_step_s"],
                                                               warm["time_to_first_step_s"]),
                "overhead_s_saved_by_warm": None if cold["overhead_s"] is None or warm["overhead_s"] is None
                else cold["overhead_s"] - warm["overhead_s"],
            }
        )
    print_table(
        "Cold torchrun against the warm launcher (same run, interleaved)",
        ["ranks", "overhead torchrun/warm", "first step torchrun/warm", "seconds saved per trial"],
        [[c["world_size"], c["overhead_s_torchrun_over_warm"], c["time_to_first_step_torchrun_over_warm"],
          c["overhead_s_saved_by_warm"]] for c in comparisons],
    )
    print_table(
        f"Warm launcher's one-off zygote start (fresh launchers, world size {TARGET_WORLD_SIZE}, median of "
        f"{len(zygote)})",
        ["trial", "time to first step s", "launch() s", "overhead s"],
        [
            ["first (starts the zygote)", zygote_summary["first_time_to_first_step_s"],
             zygote_summary["first_launch_s"], zygote_summary["first_overhead_s"]],
            ["second", zygote_summary["later_time_to_first_step_s"], zygote_summary["later_launch_s"],
             zygote_summary["later_overhead_s"]],
            ["one-off cost (first - second)", one_off, None, None],
        ],
    )
    target_value = None if target_row is None else target_row["overhead_ratio"]
    console.print(
        f"target: overhead <= {pct(TARGET_RATIO)} of a {span_s:g} s trial at world size {TARGET_WORLD_SIZE}, warm "
        f"launcher: {pct(target_value)} -> {check(met)}"
    )
    write_json(
        out,
        "overhead",
        {"quick": quick, "repeats": repeats, "span_s": span_s, "warmup_steps": warmup,
         "world_sizes": args.world_sizes, "zygote_repeats": zygote_repeats, "workload": MLP.entrypoint,
         "workload_args": dict(MLP.args), "config": "the workload's default (batch 64 per rank, no workers, fp32)"},
        {
            "steps": steps,
            "arms": rows,
            "torchrun_vs_warm": comparisons,
            "zygote": {"summary": zygote_summary, "runs": zygote},
            "target": {"overhead_ratio_max": TARGET_RATIO, "world_size": TARGET_WORLD_SIZE, "launcher": "warm",
                       "measured": target_value, "met": met},
        },
        machine,
        started,
    )


if __name__ == "__main__":
    main()
