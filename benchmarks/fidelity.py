"""Fidelity: do short trials predict the real run?

Takes the top ``--top`` configurations of a study (by default the live study of ``search_efficiency.py
--live``, whose trials are as long as the landscape's; ``--source landscape``: the landscape's top
configurations, measured once each) and runs each in one run as
short trials exactly as long as the landscape's (``--short-repeats``, 3 by default: their median is the
trial estimate, as the tuner's estimate of its choice is the median of its confirmation runs) and one long
run ``--factor`` times longer (max_steps and the reporting window scaled, the same warm-up), the long run
between the short ones, configurations in a seeded random order. Reported: Spearman's rank correlation
of throughput, short vs long (for the short trials of this run, and for the study's and the landscape's own
measurements), and the chosen configuration's (the source's best) long-run throughput against its trial
estimate.

``--workload hf`` measures a real third-party model instead: studies/hf_gpt2.yaml's workload (Hugging Face
GPT2LMHeadModel) at issue 16's eight configurations (batch 16-64, workers 0-2, one and two ranks), short
trials exactly as that study file's ``trial:`` section measures them (its defaults: the steady warm-up)
against runs ``--factor`` times longer, interleaved the same way. Also reported for every workload: the
median long/short of the two-rank configurations against the one-rank ones (a warm-up that ends before
steady state reads two ranks low), and how many short trials settled.

Targets: rho >= 0.9; the chosen configuration's long run within 5% of its trial estimate; the two-rank and
one-rank configurations' median long/short within 3% of each other.

    python benchmarks/fidelity.py               # full: 10 configurations, 10x longer, about 5 minutes on 2 cores
    python benchmarks/fidelity.py --workload hf # the HF GPT-2: 8 configurations, 10x longer
    python benchmarks/fidelity.py --workload hf --long-repeats 2  # two long runs each: their median
    python benchmarks/fidelity.py --quick       # smoke run: 3 configurations of the quick landscape, 3x longer
    python benchmarks/fidelity.py --quick --workload hf   # smoke run: 2 configurations of a smaller GPT-2, 8-step
                                                          # trials, 2x
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from _common import (
    HF_STUDY,
    RUNS,
    Trials,
    WorkloadRef,
    check,
    console,
    default_out,
    fmt,
    hf_study,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    ratio,
    read_json,
    seeded_shuffle,
    spearman,
    spread,
    stage,
    warn_if_busy,
    write_json,
)

RHO_TARGET = 0.9
ESTIMATE_TARGET = 0.05
RANK_BIAS_TARGET = 0.03
# Issue 16's eight configurations of the HF GPT-2 (quick: one of each world size).
HF_CONFIGS: list[dict[str, Any]] = [
    {"batch_size": 16}, {"batch_size": 32}, {"batch_size": 64}, {"batch_size": 32, "world_size": 2},
    {"batch_size": 64, "world_size": 2}, {"batch_size": 32, "num_workers": 2},
    {"batch_size": 64, "num_workers": 1, "world_size": 2}, {"batch_size": 16, "world_size": 2},
]
HF_QUICK = [{"batch_size": 16}, {"batch_size": 16, "world_size": 2}]


def scipy_spearman(x: list[float], y: list[float]) -> float | None:
    """scipy's value, as a cross-check of ours, when scipy is installed."""
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return None
    return float(spearmanr(x, y).statistic)


def study_top(db: Path, name: str, top: int, quick: bool, landscape: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``top`` configurations of a finished study, best first, by the throughput the study measured
    (the median of a configuration's complete trials; for one that was only pruned, its partial value)."""
    import optuna

    from autotune.objectives import config_key
    from autotune.search_space import TrialConfig

    if not db.exists():
        raise SystemExit(f"{db}: no live study; run `python benchmarks/search_efficiency.py --live"
                         f"{' --quick' * quick}` first, or pass --source landscape")
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    measured: dict[str, dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False):
        value, config = t.user_attrs.get("throughput_samples_s"), t.user_attrs.get("config")
        if not value or not config or t.user_attrs.get("outcome") not in ("complete", "pruned"):
            continue
        key = config_key(config)
        entry = measured.setdefault(key, {"config": config, "complete": [], "pruned": []})
        entry[t.user_attrs["outcome"]].append(float(value))
    rows = []
    for key, entry in measured.items():
        values = entry["complete"] or entry["pruned"]
        record = landscape.get(key)
        rows.append({
            "label": TrialConfig.model_validate(entry["config"]).short(),
            "config": entry["config"],
            "config_key": key,
            "study_samples_s": float(statistics.median(values)),
            "study_outcome": "complete" if entry["complete"] else "pruned",
            "throughput_samples_s": record["throughput_samples_s"] if record else None,
        })
    return sorted(rows, key=lambda r: -r["study_samples_s"])[:top]


def long_limits(short: dict[str, Any], factor: int) -> dict[str, Any]:
    """The short trial's limits ``factor`` times longer: max_steps and the reporting window scaled, the same
    warm-up settings (a steady warm-up then probes in the wider windows, up to half of the longer run)."""
    warmup, steps = short.get("warmup_steps", 3), short["max_steps"]
    return {
        **{k: v for k, v in short.items() if k in ("warmup", "settle_tolerance")},
        "warmup_steps": warmup,
        "max_steps": steps * factor,
        "report_every": (short.get("report_every") or max(1, (steps - warmup) // 8)) * factor,
        "max_seconds": float(short.get("max_seconds", 60)) * factor + 60,
        "hang_seconds": 60,
    }


def hf_setup(quick: bool, top: int | None) -> tuple[WorkloadRef, dict[str, Any], list[dict[str, Any]]]:
    """studies/hf_gpt2.yaml's workload and trial section (quick: a smaller GPT-2, 8-step trials) and issue 16's
    configurations."""
    workload, short = hf_study(quick)
    if quick:
        short.update(max_steps=8, warmup_steps=1, report_every=1)
    configs = (HF_QUICK if quick else HF_CONFIGS)[: top or None]
    return workload, short, [{"label": ", ".join(f"{k}={v}" for k, v in c.items()), "config": c,
                              "config_key": str(i), "throughput_samples_s": None} for i, c in enumerate(configs)]


def rank_bias(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Median long/short of the two-rank and of the one-rank configurations, and the first over the second."""
    by_world: dict[int, list[float]] = {}
    for r in rows:
        value = ratio(r["long_samples_s"], r["short_samples_s"])
        if value is not None:
            by_world.setdefault(int(r["world_size"]), []).append(value)
    one, two = median(by_world.get(1, [])), median(by_world.get(2, []))
    return {"one_rank": one, "two_ranks": two, "two_over_one": ratio(two, one)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: top 3 of the quick landscape, 3x longer")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/fidelity.json)")
    parser.add_argument("--landscape", type=Path, help="landscape JSON (default benchmarks/landscape.json)")
    parser.add_argument("--top", type=int, help="configurations (default 10; quick 3)")
    parser.add_argument("--factor", type=int, help="how many times longer the long run is (default 10; quick 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the measuring order")
    parser.add_argument("--source", choices=["study", "landscape"], default="study",
                        help="where the top configurations come from: the live study of search_efficiency.py "
                             "--live (default) or the landscape")
    parser.add_argument("--short-repeats", type=int, default=3,
                        help="short trials per configuration; their median is the trial estimate (default 3)")
    parser.add_argument("--long-repeats", type=int, default=1,
                        help="long runs per configuration, alternating with the short ones; their median is the "
                             "long-run figure (default 1)")
    parser.add_argument("--workload", choices=["mlp", "hf"], default="mlp",
                        help="mlp: the landscape's workload and a study's top configurations (default); hf: "
                             "studies/hf_gpt2.yaml's GPT-2 at issue 16's eight configurations")
    args = parser.parse_args(argv)
    quick = args.quick
    hf = args.workload == "hf"
    top = args.top or (3 if quick else 10)
    factor = args.factor or ((2 if hf else 3) if quick else 10)
    out = args.out or default_out("fidelity_hf" if hf else "fidelity", quick)

    from autotune.search_space import TrialConfig

    path = args.landscape or default_out("landscape", quick)
    landscape: dict[str, Any] = {}
    if hf:
        workload, short, chosen = hf_setup(quick, args.top)
        source_name = f"issue 16's configurations of {HF_STUDY.name}"
    elif not path.exists():
        raise SystemExit(f"{path}: no landscape recorded; run `python benchmarks/landscape.py{' --quick' * quick}` "
                         "first")
    else:
        landscape = read_json(path)
        workload = WorkloadRef(landscape["settings"]["workload"], landscape["settings"]["workload_args"])
        short = dict(landscape["settings"]["limits"])
    long = long_limits(short, factor)

    by_key = {r["config_key"]: r for r in landscape["results"]["configs"]} if landscape else {}
    if hf:
        pass  # the configurations are issue 16's
    elif args.source == "study":
        chosen = study_top(RUNS / "search_live" / "search-live.db", "search-live", top, quick, by_key)
        source_name = "the live study (search_efficiency.py --live)"
    else:
        complete = [r for r in by_key.values() if r["outcome"] == "complete" and r["throughput_samples_s"]]
        chosen = sorted(complete, key=lambda r: -r["throughput_samples_s"])[:top]
        source_name = path.name
    if len(chosen) < 2:
        raise SystemExit(f"{source_name}: fewer than 2 measured configurations")

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    rows: list[dict[str, Any]] = []
    loads: list[float] = []
    with Trials(workload, RUNS / "fidelity") as trials:
        with stage("starting the warm launcher (one discarded trial)"):
            trials.run(trials.config({}), {"warmup_steps": 1, "max_steps": 3}, "warm", tag="warm-up")
        with stage(f"{len(chosen)} configurations: a short trial ({short['max_steps']} steps) and a long one "
                   f"({long['max_steps']} steps) each"):
            for position, record in enumerate(seeded_shuffle(chosen, args.seed)):
                config = (trials.config(record["config"]) if hf else TrialConfig.model_validate(record["config"]))
                loads.append(os.getloadavg()[0])
                tag = record["label"].replace(" ", "_")
                # The short trial is repeated, as the tuner's confirmation runs repeat the best configurations
                # (its estimate is their median); the long runs go between the repeats.
                lengths = [("short", short)] * args.short_repeats
                if args.long_repeats == 1:
                    lengths.insert(len(lengths) // 2 if position % 2 == 0 else (len(lengths) + 1) // 2,
                                   ("long", long))
                else:  # short, long, short, long, ...: each long run between two short ones where it can be
                    lengths = [run for i in range(max(args.short_repeats, args.long_repeats))
                               for run in ([("short", short)] if i < args.short_repeats else [])
                               + ([("long", long)] if i < args.long_repeats else [])]
                measured: dict[str, list[Any]] = {"short": [], "long": []}
                for kind, limits in lengths:
                    measured[kind].append(trials.run(config, limits, "warm", tag=f"{kind}-{tag}"))
                shorts_run = [r.throughput_samples_s for r in measured["short"]
                              if r.outcome.value == "complete" and r.throughput_samples_s]
                long_run = measured["long"][0]
                longs_run = [r.throughput_samples_s for r in measured["long"]
                             if r.outcome.value == "complete" and r.throughput_samples_s]
                rows.append({
                    "label": record["label"],
                    "config_key": record["config_key"],
                    "world_size": config.world_size,
                    "short_settled": [r.settled for r in measured["short"]],
                    "short_warmup_steps": [r.warmup_steps_used for r in measured["short"]],
                    "short_spreads": [r.throughput_spread for r in measured["short"]],
                    "long_settled": [r.settled for r in measured["long"]],
                    "long_warmup_steps": [r.warmup_steps_used for r in measured["long"]],
                    "machine_load": [r.machine_load for r in (*measured["short"], *measured["long"])],
                    "landscape_samples_s": record["throughput_samples_s"],
                    "study_samples_s": record.get("study_samples_s"),
                    "study_outcome": record.get("study_outcome"),
                    "short_samples_s": median(shorts_run),
                    "short_runs_samples_s": shorts_run,
                    "short_spread": spread(shorts_run),
                    "long_samples_s": median(longs_run) if longs_run else None,
                    "long_runs_samples_s": longs_run,
                    "long_spread": spread(longs_run),
                    "short_outcomes": [r.outcome.value for r in measured["short"]],
                    "long_outcome": long_run.outcome.value,
                    "long_outcomes": [r.outcome.value for r in measured["long"]],
                    "long_wall_s": round(long_run.wall_s, 2),
                })
                console.print(f"  {record['label']:40s} landscape {fmt(record['throughput_samples_s'])}, short "
                              f"{fmt(rows[-1]['short_samples_s'])}, long {fmt(rows[-1]['long_samples_s'])} samples/s")
    source_key = "short_samples_s" if hf else "study_samples_s" if args.source == "study" else "landscape_samples_s"
    rows.sort(key=lambda r: -(r[source_key] or 0.0))
    ok = [r for r in rows if r["short_samples_s"] and r["long_samples_s"]]
    shorts = [r["short_samples_s"] for r in ok]
    longs = [r["long_samples_s"] for r in ok]
    in_landscape = [r for r in ok if r["landscape_samples_s"]]
    rho = spearman(shorts, longs)
    rho_landscape = spearman([r["landscape_samples_s"] for r in in_landscape],
                             [r["long_samples_s"] for r in in_landscape]) if len(in_landscape) > 1 else None
    rho_study = spearman([r["study_samples_s"] for r in ok], longs) if args.source == "study" and not hf else None
    bias = rank_bias(ok)
    bias_met = None if bias["two_over_one"] is None else abs(bias["two_over_one"] - 1) <= RANK_BIAS_TARGET
    settled = sum(bool(s) for r in rows for s in r["short_settled"])
    short_trials = sum(len(r["short_settled"]) for r in rows)
    best = rows[0]  # the configuration a study on these trials chooses
    estimate = ratio(best["long_samples_s"], best["short_samples_s"])
    estimate_landscape = ratio(best["long_samples_s"], best["landscape_samples_s"])
    print_table(
        f"Short ({short['max_steps']} steps, median of {args.short_repeats}) vs long ({long['max_steps']} steps) "
        f"trials, top {len(rows)} of {source_name}",
        ["configuration", "study samples/s", "landscape samples/s", "short samples/s", "long samples/s", "long/short",
         "short settled", "long s"],
        [[r["label"], r["study_samples_s"], r["landscape_samples_s"], r["short_samples_s"], r["long_samples_s"],
          ratio(r["long_samples_s"], r["short_samples_s"]),
          f"{sum(bool(s) for s in r['short_settled'])}/{len(r['short_settled'])}", r["long_wall_s"]] for r in rows],
        caption=machine_caption(machine) + f"; load average during the run {min(loads, default=0):.1f}-"
                                           f"{max(loads, default=0):.1f}",
    )
    rho_met = None if rho is None else rho >= RHO_TARGET
    estimate_met = None if estimate is None else abs(estimate - 1) <= ESTIMATE_TARGET
    print_table(
        "Fidelity",
        ["measure", "value", "target"],
        [
            ["Spearman rho, short (this run) vs long", fmt(rho), f">= {RHO_TARGET:g}: {check(rho_met)}"],
            ["Spearman rho, the study's trials vs long", fmt(rho_study), "-"],
            ["Spearman rho, landscape vs long", fmt(rho_landscape), "-"],
            [f"chosen ({best['label']}): long / short trial", fmt(estimate),
             f"within {pct(ESTIMATE_TARGET)}: {check(estimate_met)}"],
            ["chosen: long / landscape trial", fmt(estimate_landscape), "-"],
            ["median long/short: two ranks / one rank", f"{fmt(bias['two_ranks'])} / {fmt(bias['one_rank'])} = "
             f"{fmt(bias['two_over_one'])}", f"within {pct(RANK_BIAS_TARGET)}: {check(bias_met)}"],
            ["short trials settled", f"{settled}/{short_trials}", "-"],
        ],
    )
    write_json(
        out,
        "fidelity",
        {"quick": quick, "workload": args.workload, "entrypoint": workload.entrypoint, "workload_args":
         dict(workload.args), "source": "configs" if hf else args.source,
         "landscape": None if hf else str(path), "landscape_date": landscape.get("date"),
         "top": len(rows),
         "factor": factor, "short": short, "long": long, "seed": args.seed, "short_repeats": args.short_repeats,
         "long_repeats": args.long_repeats},
        {
            "configs": rows,
            "spearman_short_long": rho,
            "spearman_short_long_scipy": scipy_spearman(shorts, longs) if len(ok) > 1 else None,
            "spearman_landscape_long": rho_landscape,
            "spearman_study_long": rho_study,
            "chosen": best["label"],
            "chosen_long_over_short": estimate,
            "chosen_long_over_landscape": estimate_landscape,
            "rank_bias": bias,
            "short_settled": [settled, short_trials],
            "machine_load_avg_1m": [min(loads, default=0.0), max(loads, default=0.0)],
            "targets": {"rho": RHO_TARGET, "rho_met": rho_met, "estimate_within": ESTIMATE_TARGET,
                        "estimate_met": estimate_met, "rank_bias_within": RANK_BIAS_TARGET,
                        "rank_bias_met": bias_met},
        },
        machine,
        started,
    )


if __name__ == "__main__":
    main()
