"""The gradient noise scale measured in a short trial against a long run's, and whether the short trial can
project the long run's (issue 33, item 5).

The lm workload (autotune.workloads.lm, its defaults: per-rank batch 32) at two DDP ranks, for each weight
seed in ``--seeds``: a trial of ``--short-steps`` (40) and a run of ``--long-steps`` (400), both with 5-step
windows, each measuring ``B_noise`` as every trial does (per-rank gradients against the all-reduced one,
pooled over the measured windows, a jackknife interval over windows). Target: the short trial's estimate
within a factor of 2 of the long run's. A one-rank trial with grad_accum 2 (same global batch) beside them.

Then the question behind the target: the noise scale grows as training goes on, so what should a short trial
report? For each seed, from the short trial's own windows (each window's estimate, the product's estimator on
that window alone): the fit of log B_noise on log step and on log loss (slope, R^2), and the power law in
step extrapolated to the long run, against what the long run measured: its pooled value, its last 50 steps,
and its run-effective noise scale ``B_eff`` (the one value whose efficiency equals the run's harmonic mean
of efficiency over its steps: ``1 / (B_eff + B0) = mean over steps of 1 / (B_noise(t) + B0)``, the same for
every batch, so it is the value goodput should use for a batch held through the run). The same fits on the
Pollux traces (six real jobs' whole runs, /work/shared/data/pollux-traces): fitted on the first 10% of each
trace's rows, against its end value and its run-effective value over the remaining rows (weighted by the
traces' progress). The estimates are not timings: the machine's load does not spoil them.

    python benchmarks/noise_scale.py            # 3 seeds: 2.5 min at load 3-4, 5 at load 6-10
    python benchmarks/noise_scale.py --quick    # smoke run: 1 seed, a short trial of 12 steps, a long one of 40
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    LM,
    RUNS,
    Trials,
    WorkloadRef,
    check,
    default_out,
    machine_caption,
    machine_facts,
    print_table,
    write_json,
)

from autotune.scale import NoiseEstimate, NoiseWindow, efficiency, estimate_noise_scale, noise_scale

TARGET_FACTOR = 2.0
EVERY = 5  # steps per window, short and long alike: the short trial's windows are the long run's first ones
BLOCK = 10  # windows per block of the long run's readings (50 steps)
TRACES = Path("/work/shared/data/pollux-traces")


def _limits(steps: int) -> dict[str, Any]:
    return {"warmup": "fixed", "warmup_steps": 5, "max_steps": steps, "report_every": EVERY, "max_seconds": 1800,
            "hang_seconds": 120}


def _row(label: str, seed: int, result: Any) -> dict[str, Any]:
    noise = result.gradient_noise_scale
    return {
        "trial": label, "seed": seed, "outcome": result.outcome.value, "steps": result.steps, "loss": result.loss,
        "noise_scale": None if noise is None else noise.value, "low": None if noise is None else noise.low,
        "high": None if noise is None else noise.high, "source": None if noise is None else noise.source,
        "batch_small": None if noise is None else noise.batch_small,
        "batch_big": None if noise is None else noise.batch_big,
        "windows": None if noise is None else noise.windows, "trial_dir": result.trial_dir,
    }


def readings(result: Any) -> list[dict[str, Any]]:
    """A trial's measured windows: step, steps, loss, and the two squared norms (the window record)."""
    return [{"step": w.step, "steps": w.gradient_noise.steps, "loss": w.loss, "small": w.gradient_noise.batch_small,
             "big": w.gradient_noise.batch_big, "sqr_small": w.gradient_noise.sqr_small,
             "sqr_big": w.gradient_noise.sqr_big} for w in result.windows if w.gradient_noise is not None]


def estimate_of(windows: Sequence[dict[str, Any]]) -> NoiseEstimate | None:
    """The product's estimator over these windows, pooled as a trial pools them."""
    if not windows:
        return None
    return estimate_noise_scale(windows[0]["small"], windows[0]["big"],
                                [NoiseWindow(w["steps"], w["sqr_small"], w["sqr_big"]) for w in windows])


def estimate(windows: Sequence[dict[str, Any]]) -> float | None:
    """B_noise over these windows (None: not resolved)."""
    e = estimate_of(windows)
    return None if e is None else e.value


def run_effective(values: Sequence[float], weights: Sequence[float], base: int) -> float:
    """The noise scale whose efficiency is the harmonic mean of the efficiencies over the run (weights: steps or
    progress). Independent of the batch: 1/E(B) = 1 + (B - B0) / (B_noise + B0), so its mean over the run is
    1 + (B - B0) * mean(1 / (B_noise + B0)); read off the product's efficiency at batch 2 B0."""
    batch = 2 * base
    mean_inverse = sum(w / efficiency(batch, v, base) for v, w in zip(values, weights, strict=True)) / sum(weights)
    return (batch - base) / (mean_inverse - 1) - base


def _fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: (a, b, R^2)."""
    b, a = np.polyfit(x, y, 1)
    resid = np.asarray(y) - (a + b * np.asarray(x))
    return float(a), float(b), float(1 - resid.var() / np.var(y))


def projection(short: Sequence[dict[str, Any]], long: Sequence[dict[str, Any]], base: int) -> dict[str, Any]:
    """The short trial's windows fitted (log B on log step, on log loss) and extrapolated, against the long run."""
    ok = [(w, v) for w in short if (v := estimate([w])) is not None]
    mid = [math.log(w["step"] - w["steps"] / 2) for w, _ in ok]
    logb = [math.log(v) for _, v in ok]
    a, b, r2_step = _fit(mid, logb)
    _, b_loss, r2_loss = _fit([math.log(w["loss"]) for w, _ in ok], logb)
    blocks = [long[i:i + BLOCK] for i in range(0, len(long), BLOCK)]
    block_values = [estimate(bl) for bl in blocks]
    weights = [sum(w["steps"] for w in bl) for bl in blocks]
    kept = [(v, wt) for v, wt in zip(block_values, weights, strict=True) if v is not None]
    effective = run_effective([v for v, _ in kept], [wt for _, wt in kept], base)
    law = [math.exp(a + b * math.log(bl[-1]["step"] - BLOCK * EVERY / 2)) for bl in blocks]
    end = long[-1]["step"]
    projected_end, projected_eff = math.exp(a + b * math.log(end)), run_effective(law, weights, base)
    pooled, last = estimate(long), block_values[-1]
    latest = estimate(short[len(short) // 2:])
    return {
        "short_pooled": estimate(short), "short_latest_half": latest, "long_pooled": pooled, "long_last_block": last,
        "long_effective": effective, "slope_step": b, "r2_step": r2_step, "slope_loss": b_loss, "r2_loss": r2_loss,
        "projected_end": projected_end, "projected_effective": projected_eff,
        "ratio_short_to_pooled": _ratio(estimate(short), pooled), "ratio_latest_to_pooled": _ratio(latest, pooled),
        "ratio_latest_to_effective": _ratio(latest, effective),
        "ratio_projected_end_to_last": _ratio(projected_end, last),
        "ratio_projected_effective": _ratio(projected_eff, effective),
        "pooled_law": pooled_law(short, end), "long_last_block_parts": _parts(estimate_of(blocks[-1])),
        "long_blocks": [{"step": bl[-1]["step"], "loss": bl[-1]["loss"], "noise_scale": v}
                        for bl, v in zip(blocks, block_values, strict=True)],
        "short_windows": [{"step": w["step"], "loss": w["loss"], "noise_scale": v} for w, v in ok],
    }


def pooled_law(short: Sequence[dict[str, Any]], end: int) -> dict[str, float]:
    """|G|^2 and tr(Sigma) each fitted as a power law in step over the short trial's windows (the product's
    estimates, window by window), pooled over steps 5 to ``end`` as a trial pools, and each law's value at
    ``end``: a projection of the long run's pooled estimate."""
    parts = [estimate_of([w]) for w in short]
    ok = [(w, e) for w, e in zip(short, parts, strict=True) if e is not None and e.grad_sqr > 0 and e.trace > 0]
    mid = [math.log(w["step"] - w["steps"] / 2) for w, _ in ok]
    ag, bg, _ = _fit(mid, [math.log(e.grad_sqr) for _, e in ok])
    at, bt, _ = _fit(mid, [math.log(e.trace) for _, e in ok])
    steps = np.log(np.arange(5, end) + 0.5)
    grad_sqr, trace = np.exp(ag + bg * steps), np.exp(at + bt * steps)
    return {"pooled": float(trace.mean() / grad_sqr.mean()), "grad_sqr_at_end": float(grad_sqr[-1]),
            "trace_at_end": float(trace[-1]), "noise_scale_at_end": float(trace[-1] / grad_sqr[-1])}


def _parts(e: NoiseEstimate | None) -> dict[str, float] | None:
    return None if e is None else {"grad_sqr": e.grad_sqr, "trace": e.trace}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _within(x: float | None) -> bool:
    return x is not None and 1 / TARGET_FACTOR <= x <= TARGET_FACTOR


def _trace_rows(path: Path) -> list[dict[str, float]]:
    rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(path.open())]
    return [r for r in rows if r["grad_sqr"] > 0 and r["grad_var"] > 0]


def trace_projection(rows: Sequence[dict[str, float]], base: int) -> dict[str, Any]:
    """One validation trace: B_noise per row (the product's noise_scale at the trace's variance scale, the
    smallest traced batch); the reading at 10% of the rows and the power law in step fitted on them, against the
    end value and the run-effective value over the remaining rows (weighted by progress)."""
    values = [noise_scale(r["grad_sqr"], r["grad_var"], base) for r in rows]
    n = len(rows)
    k = max(1, round(0.1 * n))
    progress = [r["progress"] - (rows[i - 1]["progress"] if i else 0.0) for i, r in enumerate(rows)]
    later = range(k, n)
    effective = run_effective([values[i] for i in later], [progress[i] for i in later], base)
    out: dict[str, Any] = {"rows": n, "fit_rows": k, "at_10pct": values[k - 1], "end": values[-1],
                           "effective": effective, "latest_to_end": values[k - 1] / values[-1],
                           "latest_to_effective": values[k - 1] / effective}
    if k >= 3:
        a, b, r2 = _fit([math.log(r["iteration"]) for r in rows[:k]], [math.log(v) for v in values[:k]])
        law = [math.exp(a + b * math.log(r["iteration"])) for r in rows]
        out.update(slope_step=b, r2_step=r2, projected_to_end=law[-1] / values[-1],
                   projected_to_effective=run_effective([law[i] for i in later], [progress[i] for i in later],
                                                        base) / effective)
        # |G|^2 and the variance each as a power law in step, pooled over the remaining rows (by progress)
        logs = [math.log(r["iteration"]) for r in rows]
        ag, bg, _ = _fit(logs[:k], [math.log(r["grad_sqr"]) for r in rows[:k]])
        av, bv, _ = _fit(logs[:k], [math.log(r["grad_var"]) for r in rows[:k]])
        pooled = sum(progress[i] * math.exp(av + bv * logs[i]) for i in later) / sum(
            progress[i] * math.exp(ag + bg * logs[i]) for i in later)
        out["pooled_law_to_effective"] = noise_scale(1.0, pooled, base) / effective
    return out


def traces(root: Path) -> dict[str, dict[str, Any]]:
    """Every job's traces (:func:`trace_projection`), and per job how many fall within 2x."""
    jobs: dict[str, dict[str, Any]] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = {int(re.findall(r"(\d+)\.csv$", p.name)[0]): p for p in folder.glob("validation-*.csv")}
        base = min(files)
        per = {batch: trace_projection(_trace_rows(files[batch]), base) for batch in sorted(files)}
        fitted = [t for t in per.values() if "projected_to_effective" in t]
        jobs[folder.name] = {
            "base_batch": base, "traces": per, "fitted": len(fitted),
            "latest_within": sum(_within(t["latest_to_effective"]) for t in per.values()),
            "projected_within": sum(_within(t["projected_to_effective"]) for t in fitted),
            "projected_end_within": sum(_within(t["projected_to_end"]) for t in fitted),
            "pooled_law_within": sum(_within(t["pooled_law_to_effective"]) for t in fitted),
            "median_latest_to_effective": float(np.median([t["latest_to_effective"] for t in per.values()])),
            "median_projected_to_effective": (float(np.median([t["projected_to_effective"] for t in fitted]))
                                              if fitted else None),
        }
    return jobs


def measure(seeds: Sequence[int], short: int, long: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The trials (rows) and, per seed, the projection analysis."""
    rows, analyses = [], []
    for seed in seeds:
        with Trials(WorkloadRef(LM.entrypoint, {"seed": seed}), RUNS / "noise_scale") as trials:
            ddp = trials.config({"world_size": 2})
            short_result = trials.run(ddp, _limits(short), tag=f"short-seed{seed}")
            long_result = trials.run(ddp, _limits(long), tag=f"long-seed{seed}")
            rows += [_row(f"seed {seed}: {short} steps, 2 ranks", seed, short_result),
                     _row(f"seed {seed}: {long} steps, 2 ranks", seed, long_result)]
            if seed == seeds[0]:
                accum = trials.config({"world_size": 1, "grad_accum": 2})
                rows.append(_row(f"seed {seed}: {short} steps, 1 rank, grad_accum 2", seed,
                                 trials.run(accum, _limits(short), tag=f"accum-seed{seed}")))
            analyses.append({"seed": seed, **projection(readings(short_result), readings(long_result),
                                                        trials.base_batch_size)})
    return rows, analyses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the lm workload's weight seeds")
    parser.add_argument("--short-steps", type=int, default=40)
    parser.add_argument("--long-steps", type=int, default=400)
    parser.add_argument("--traces", type=Path, default=TRACES, help="the Pollux traces' folder")
    parser.add_argument("--quick", action="store_true", help="1 seed, a short trial of 12 steps, a long one of 40")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.monotonic()
    seeds, short, long = ([0], 12, 40) if args.quick else (args.seeds, args.short_steps, args.long_steps)
    machine = machine_facts()
    rows, analyses = measure(seeds, short, long)
    pooled = {a["seed"]: a["long_pooled"] for a in analyses}
    for r in rows:
        r["ratio_to_long"] = _ratio(r["noise_scale"], pooled.get(r["seed"]))
    short_rows = [r for r in rows if r["steps"] == short and r["source"] == "ddp"]
    met = bool(short_rows) and all(_within(r["ratio_to_long"]) for r in short_rows)
    print_table(
        "gradient noise scale of the lm workload (samples), global batch 64",
        ["trial", "B_noise", "95% interval", "source (small/big batch)", "windows", "/ long run's", "final loss"],
        [[r["trial"], _num(r["noise_scale"]), f"{_num(r['low'])}-{_num(r['high'])}",
          f"{r['source']} ({r['batch_small']}/{r['batch_big']})", r["windows"], _num(r["ratio_to_long"], ".2f"),
          _num(r["loss"], ".3f")] for r in rows],
        caption=machine_caption(machine),
    )
    print_table(
        f"what the {short}-step trial could report, against the {long}-step run (B_eff: run-effective)",
        ["seed", "pooled", "latest half", "long pooled", "long last 50", "long B_eff", "slope / R2 (log step)",
         "slope / R2 (log loss)", "power law: end / last 50", "power law: B_eff / B_eff", "latest / B_eff",
         "|G|2, tr laws pooled / long pooled"],
        [[a["seed"], _num(a["short_pooled"]), _num(a["short_latest_half"]), _num(a["long_pooled"]),
          _num(a["long_last_block"]), _num(a["long_effective"]), f"{a['slope_step']:.2f} / {a['r2_step']:.2f}",
          f"{a['slope_loss']:.2f} / {a['r2_loss']:.2f}", _num(a["ratio_projected_end_to_last"], ".2f"),
          _num(a["ratio_projected_effective"], ".2f"), _num(a["ratio_latest_to_effective"], ".2f"),
          _num(_ratio(a["pooled_law"]["pooled"], a["long_pooled"]), ".2f")]
         for a in analyses],
    )
    jobs = traces(args.traces) if args.traces.is_dir() else {}
    print_table(
        "Pollux traces: fitted on the first 10% of each trace's rows, against the rest's run-effective B_noise",
        ["job", "traces", "fitted (>= 3 rows)", "power law within 2x", "its median ratio", "end within 2x",
         "reading at 10% within 2x", "its median ratio", "|G|2, var laws pooled within 2x"],
        [[job, len(j["traces"]), j["fitted"], j["projected_within"], _num(j["median_projected_to_effective"], ".2f"),
          j["projected_end_within"], j["latest_within"], _num(j["median_latest_to_effective"], ".2f"),
          j["pooled_law_within"]]
         for job, j in jobs.items()],
    )
    print(f"short trials within {TARGET_FACTOR:g}x of the long run's: {check(met)}")
    out = default_out("noise_scale", args.quick) if args.out is None else args.out
    write_json(out, "noise_scale", {"workload": LM.entrypoint, "seeds": seeds, "short_steps": short,
                                    "long_steps": long, "window_steps": EVERY, "traces": str(args.traces)},
               {"trials": rows, "projections": analyses, "traces": jobs, "target_factor": TARGET_FACTOR,
                "met": met}, machine, started)


def _num(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    main()
