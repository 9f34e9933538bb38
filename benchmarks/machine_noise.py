"""Is the run-to-run scatter of trials the machine's? One fixed training step, timed with nothing of autotune around it.

Repeated trials of one configuration scatter 9-19% here while a trial's own windows agree within 2-4%
(trial_scatter.py). That is either the trial's doing (a process's memory layout, its threads' placement, the
fork, the DataLoader) or the machine's (a virtual CPU whose speed changes under its guest). This times the
step of studies/hf_gpt2.yaml's GPT-2 (or `--workload mlp`, the quickstart's MLP) on one fixed batch, in a
process pinned to one core with one torch thread, no DataLoader and no autotune code on the timed path:

- `long`: `--long-runs` processes, each stepping for `--seconds`, timed in windows of `--window` seconds;
- `short`: `--short-runs` fresh processes, each warmed up for `--warm` seconds, then timed for one window;

interleaved (a long run, then its share of the short ones). Each window also records the process's CPU time
over its wall time and the machine's steal and busy shares (/proc/stat). Reported:

- the window-to-window CV inside a long run (changes faster than a run), and the CV of the long runs' means
  (slower drift between runs a minute apart);
- the CV across fresh processes: a trial's run-to-run scatter, were it only the machine's;
- the CV of the mean of k consecutive windows (k = 1, 2, 4, ...): how long a measurement must run here to
  scatter less than 5% or 3%;
- the lowest CPU share of a window (below 1: the process was descheduled) and the highest steal share.

    python benchmarks/machine_noise.py                 # GPT-2: 3 long runs of 30 s and 18 short ones, ~4 minutes
    python benchmarks/machine_noise.py --workload mlp
    python benchmarks/machine_noise.py --quick         # smoke run: the MLP, 2 long runs of 1.25 s, 2 short ones
    python benchmarks/machine_noise.py --from benchmarks/machine_noise.json   # re-read a run's windows
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    console,
    cv,
    default_out,
    fmt,
    hf_study,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    stage,
    warn_if_busy,
    write_json,
)

BATCH = 32


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def child(mode: str, entrypoint: str, args: dict[str, Any], seconds: float, window: float, warm: float) -> None:
    """Runs in its own process: step for ``seconds`` (long) or one window after ``warm`` (short); print the windows."""
    import torch
    from torch.utils.data import default_collate

    from autotune.workload import load_workload

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    workload = load_workload(entrypoint, args)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters(), workload.base_lr)
    dataset = workload.dataset()
    batch = (workload.collate_fn or default_collate)([dataset[i] for i in range(BATCH)])

    def step() -> None:
        workload.loss(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    while time.perf_counter() - started < warm:
        step()
    windows = []
    end = time.perf_counter() + (seconds if mode == "long" else window)
    while time.perf_counter() < end:
        stat0, cpu0, t0 = _cpu_times(), time.process_time(), time.perf_counter()
        steps = 0
        while time.perf_counter() - t0 < window:
            step()
            steps += 1
        stat1, cpu1, t1 = _cpu_times(), time.process_time(), time.perf_counter()
        delta = [b - a for a, b in zip(stat0, stat1, strict=True)]
        total = sum(delta) or 1
        windows.append({"samples_s": steps * BATCH / (t1 - t0), "cpu_share": (cpu1 - cpu0) / (t1 - t0),
                        "steal": delta[7] / total if len(delta) > 7 else 0.0,
                        "busy": (total - delta[3] - delta[4]) / total, "at": time.time()})
    print(json.dumps(windows))


def _run_child(mode: str, entrypoint: str, args: dict[str, Any], seconds: float, window: float,
               warm: float) -> list[dict[str, Any]]:
    cmd = [sys.executable, __file__, "--child", mode, "--entrypoint", entrypoint, "--args", json.dumps(args),
           "--seconds", str(seconds), "--window", str(window), "--warm", str(warm)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + warm + 300)
    if done.returncode != 0:
        raise SystemExit(f"error: a {mode} run failed:\n{done.stderr[-2000:]}")
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def block_cvs(runs: list[list[float]]) -> list[dict[str, Any]]:
    """The CV of the mean of k consecutive windows (non-overlapping blocks of every run, pooled), k = 1, 2, 4, ...
    while there are at least 4 blocks; and the CV of the ratio of each block to the next one in its run
    (``adjacent_ratio_cv``): two measurements taken back to back. Were the blocks independent it would be about
    √2 times the blocks' CV; a speed that drifts slowly makes it smaller, and a comparison of two
    configurations run back to back more precise than one of measurements taken minutes apart."""
    out: list[dict[str, Any]] = []
    k = 1
    while True:
        blocks = [[statistics.fmean(r[i:i + k]) for i in range(0, len(r) - k + 1, k)] for r in runs]
        means = [m for b in blocks for m in b]
        if len(means) < 4:
            return out
        ratios = [after / before for b in blocks for before, after in itertools.pairwise(b) if before]
        out.append({"windows": k, "blocks": len(means), "cv": cv(means), "adjacent_ratio_cv": cv(ratios)})
        k *= 2


def lag1(runs: list[list[float]]) -> float | None:
    """Lag-1 autocorrelation of the windows, each run centred on its own mean."""
    num = den = 0.0
    for r in runs:
        if len(r) < 3:
            continue
        mean = statistics.fmean(r)
        centred = [x - mean for x in r]
        num += sum(a * b for a, b in itertools.pairwise(centred))
        den += sum(x * x for x in centred)
    return num / den if den else None


def summarize(longs: list[list[dict[str, Any]]], shorts: list[dict[str, Any]], window: float) -> dict[str, Any]:
    values = [[w["samples_s"] for w in run] for run in longs]
    means = [statistics.fmean(v) for v in values if v]
    short_values = [w["samples_s"] for w in shorts]
    every = [w for run in longs for w in run] + shorts
    blocks = block_cvs(values)
    return {
        "window_s": window,
        "long_window_cv": [cv(v) for v in values],
        "long_window_cv_median": median([c for c in (cv(v) for v in values) if c is not None]),
        "long_means": means,
        "long_means_cv": cv(means),
        "short_samples_s": short_values,
        "short_cv": cv(short_values),
        "short_median": median(short_values),
        "lag1_autocorrelation": lag1(values),
        "block_cv": blocks,
        "seconds_for_cv_below": {str(t): next((b["windows"] * window for b in blocks
                                               if b["cv"] is not None and b["cv"] < t), None) for t in (0.05, 0.03)},
        "cpu_share_min": min((w["cpu_share"] for w in every), default=None),
        "steal_max": max((w["steal"] for w in every), default=None),
        "busy_median": median([w["busy"] for w in every]),
    }


def report(name: str, window: float, machine: dict[str, Any], results: dict[str, Any]) -> None:
    """Print a run's tables."""
    print_table(
        f"One fixed training step of the {name.upper()} workload (batch {BATCH}, one core, one thread), "
        f"windows of {window:g} s",
        ["measure", "value"],
        [["window-to-window CV inside a long run (median)", pct(results["long_window_cv_median"])],
         ["CV of the long runs' means", pct(results["long_means_cv"])],
         ["long runs' means (samples/s)", ", ".join(fmt(m) for m in results["long_means"])],
         ["CV across fresh short processes", pct(results["short_cv"])],
         ["lag-1 autocorrelation of windows", fmt(results["lag1_autocorrelation"], 2)],
         ["lowest CPU share of a window", fmt(results["cpu_share_min"])],
         ["highest steal share", fmt(results["steal_max"])]],
        caption=machine_caption(machine),
    )
    print_table("The mean of k consecutive windows", ["k", "seconds", "blocks", "CV", "back-to-back ratio CV",
                                                       "were they independent"],
                [[b["windows"], fmt(b["windows"] * window), b["blocks"], pct(b["cv"]), pct(b["adjacent_ratio_cv"]),
                  pct(b["cv"] * 2**0.5 if b["cv"] is not None else None)] for b in results["block_cv"]])
    below = results["seconds_for_cv_below"]
    console.print(f"measured seconds for a CV below 5%: {fmt(below['0.05'])}; below 3%: {fmt(below['0.03'])} "
                  "(-: not within a long run)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: the MLP, 2 long runs of 1.25 s, 2 short ones")
    parser.add_argument("--workload", choices=["hf", "mlp"], help="the GPT-2 (default; quick: the MLP) or the MLP")
    parser.add_argument("--long-runs", type=int, help="long runs (default 3; quick 2)")
    parser.add_argument("--short-runs", type=int, help="fresh short processes (default 18; quick 2)")
    parser.add_argument("--seconds", type=float, help="a long run's timed seconds (default 30; quick 1.25)")
    parser.add_argument("--window", type=float, help="a window's seconds (default 1.5; quick 0.25)")
    parser.add_argument("--warm", type=float, help="warm-up seconds before timing (default 1; quick 0.25)")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/machine_noise[_mlp].json)")
    parser.add_argument("--from", dest="source", type=Path,
                        help="re-read the windows of an earlier run's JSON (no runs) and rewrite its results")
    parser.add_argument("--child", choices=["long", "short"], help=argparse.SUPPRESS)
    parser.add_argument("--entrypoint", help=argparse.SUPPRESS)
    parser.add_argument("--args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    seconds = args.seconds or (1.25 if quick else 30.0)  # quick: 5 windows; a 4th starts unless 3 overran by 0.5 s
    window = args.window or (0.25 if quick else 1.5)
    warm = args.warm if args.warm is not None else (0.25 if quick else 1.0)
    if args.child:
        child(args.child, args.entrypoint, json.loads(args.args), seconds, window, warm)
        return
    if args.source:
        record = json.loads(args.source.read_text())
        old = record["results"]
        record["results"] = {**summarize(old["longs"], old["shorts"], record["settings"]["window"]),
                             "longs": old["longs"], "shorts": old["shorts"]}
        report(record["settings"]["workload"], record["settings"]["window"], record["machine"], record["results"])
        args.source.write_text(json.dumps(record, indent=2, default=str) + "\n")
        console.print(f"rewrote {args.source}'s results from its windows")
        return
    long_runs = args.long_runs or (2 if quick else 3)
    short_runs = args.short_runs if args.short_runs is not None else (2 if quick else 18)
    for name, value in (("--long-runs", long_runs), ("--seconds", seconds), ("--window", window)):
        if value <= 0:
            parser.error(f"{name}: give a positive number")
    if short_runs < 0 or warm < 0 or seconds < window:
        parser.error("--short-runs and --warm: 0 or more; --seconds: at least one --window")
    name = args.workload or ("mlp" if quick else "hf")
    workload = hf_study()[0] if name == "hf" else MLP
    out = args.out or default_out("machine_noise" if name == "hf" else "machine_noise_mlp", quick)
    machine = machine_facts()
    warn_if_busy(machine)
    started = time.monotonic()
    longs: list[list[dict[str, Any]]] = []
    shorts: list[dict[str, Any]] = []
    with stage(f"{long_runs} long runs of {seconds:g} s and {short_runs} short ones, interleaved"):
        for i in range(long_runs):
            longs.append(_run_child("long", workload.entrypoint, dict(workload.args), seconds, window, warm))
            share = short_runs // long_runs + (1 if i < short_runs % long_runs else 0)
            for _ in range(share):
                shorts += _run_child("short", workload.entrypoint, dict(workload.args), seconds, window, warm)
    results = summarize(longs, shorts, window)
    results["longs"], results["shorts"] = longs, shorts
    report(name, window, machine, results)
    write_json(out, "machine_noise",
               {"quick": quick, "workload": name, "entrypoint": workload.entrypoint,
                "workload_args": dict(workload.args), "batch": BATCH, "long_runs": long_runs,
                "short_runs": short_runs, "seconds": seconds,
                "window": window, "warm": warm},
               results, machine, started)


if __name__ == "__main__":
    main()
