"""Memory predicted before launch: how well, and what it saves.

1. Prediction error on the recorded landscapes (landscape.json and landscape_repeat.json record every grid
   configuration's peak memory; fidelity_landscape.json records throughput only). After k = 3, 5 and 10
   trials, :class:`autotune.objectives.MemoryModel` fitted on those trials predicts every other
   configuration of the grid; reported: the median relative error over configurations and orders, and how
   often the truth lay within the model's own error. Two orders: the trials a real study ran (the tuner,
   default sampler, replayed: ``autotune.tuner.recorded_runner``), and seeded random orders of the grid.
2. Trial-seconds saved: the same replayed study (the real tuner, its default sampler and pruner, seeded)
   with ``constraints.max_memory_mb`` set so that a third of the space exceeds it, with the prediction
   and without it (``constraints.predict_memory: false``: every trial launched). Reported per seed: trials
   launched over the budget, configurations not launched, trial-seconds of the study, the configuration
   chosen. A trial's cost is its recorded wall time; pruned, or stopped over the budget (as the monitor
   stops it at the window over the budget), the seconds to that window plus its teardown. Two landscapes:
   the recorded CPU one (its peak is the rank's host memory, dominated by DataLoader workers: 1/3 of the
   grid, ``num_workers=2``, is over the budget), and the same recording with a GPU-like memory that grows
   with the batch (``gpu_memory``: 1 GB + 12 MB a sample, half with bf16, +150 MB at world size 2). In
   both the budget lies between the grid's peaks so that a third of the configurations exceed it.

Targets (issue 19.2): median error <= 10% after 5 trials; at most one launched trial over budget per study.

    python benchmarks/memory_prediction.py --seeds 4  # the recorded run: about 15 minutes on 2 busy cores
    python benchmarks/memory_prediction.py --quick    # 2 seeds, 10-trial studies
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    HERE,
    check,
    default_out,
    fmt,
    machine_facts,
    make_spec,
    pct,
    print_table,
    quiet_optuna,
    read_json,
    stage,
    write_json,
)
from _landscapes import Landscape, pruned_cost

from autotune.objectives import MemoryModel, MemoryPoint, config_key
from autotune.search_space import TrialConfig

LANDSCAPES = ("landscape.json", "landscape_repeat.json")
TRIALS_SEEN = (3, 5, 10)
TARGET_ERROR = 0.10


# ------------------------------------------------------------------------------------------------ memory
def gpu_memory(config: dict[str, Any]) -> float:
    """A GPU-like peak per rank: 1 GB of weights and optimizer state, 12 MB of activations a sample (half with
    bf16); world size 2 under DDP adds the gradient buckets (+150 MB)."""
    activations = 12.0 * config["batch_size"] * (0.5 if config.get("amp") == "bf16" else 1.0)
    return 1000.0 + activations + (150.0 if config.get("world_size", 1) > 1 else 0.0)


def with_memory(records: dict[str, dict[str, Any]], memory: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """The recording with every window's and trial's peak replaced by ``memory(config)``."""
    out = {}
    for key, record in records.items():
        r = copy.deepcopy(record)
        peak = memory(r["config"])
        r["peak_memory_mb"] = peak
        for w in r.get("windows") or []:
            w["peak_memory_mb"] = peak
        out[key] = r
    return out


def budget_for_third(records: dict[str, dict[str, Any]]) -> float:
    """A budget just under the peak of the grid's top third (so a third of the configurations exceed it)."""
    peaks = sorted(r["peak_memory_mb"] for r in records.values())
    cut = len(peaks) - len(peaks) // 3
    return round((peaks[cut - 1] + peaks[cut]) / 2, 1)


def today(record: dict[str, Any]) -> str:
    """A recorded configuration's key as today's tuner writes it (knobs added since take their defaults)."""
    return config_key(TrialConfig.model_validate(record["config"]).model_dump())


# -------------------------------------------------------------------------------------------- prediction
def errors_after(order: list[dict[str, Any]], everything: list[dict[str, Any]], k: int
                 ) -> tuple[list[float], list[bool]]:
    """Relative errors (and whether within the model's own error) for every configuration not among the
    first ``k`` trials of ``order``, predicted from those."""
    seen = order[:k]
    model = MemoryModel(MemoryPoint(r["config"], r["peak_memory_mb"]) for r in seen)
    keys = {r["config_key"] for r in seen}
    errors, covered = [], []
    for r in everything:
        if r["config_key"] in keys:
            continue
        p = model.predict(r["config"])
        if p is None:
            continue
        miss = abs(p.mb - r["peak_memory_mb"])
        errors.append(miss / r["peak_memory_mb"])
        covered.append(miss <= p.error_mb)
    return errors, covered


def replay_study(landscape: Landscape, records: dict[str, dict[str, Any]], seed: int, n_trials: int,
                 budget: float | None, predict: bool) -> dict[str, Any]:
    """One replayed study (the real tuner, default sampler and pruner, seeded): per trial what it cost."""
    from autotune.tuner import NoLaunch, Tuner, recorded_runner

    by_config = {today(r): r for r in records.values()}

    def lookup(config: TrialConfig) -> dict[str, Any]:
        return by_config[config_key(config.model_dump())]

    with tempfile.TemporaryDirectory(prefix="autotune-memory-") as folder:
        extra: dict[str, Any] = {"confirm": {"top_k": 0}, "storage": f"sqlite:///{folder}/replay.db"}
        document = landscape.document(f"memory-{seed}", {"seed": seed}, n_trials, **extra)
        if budget is not None:
            # Without the prediction: the study file's switch, every trial launched and measuring for itself.
            document["constraints"] = {"max_memory_mb": budget, "predict_memory": predict}
        spec = make_spec(document, Path(folder))
        summary = Tuner(spec, launcher=NoLaunch(), run_trial=recorded_runner(lookup)).run(n_trials=n_trials)
        trials = []
        for t in summary.study.get_trials(deepcopy=False):
            a = t.user_attrs
            record = lookup(TrialConfig.model_validate(a["config"]))
            launched = a.get("launched") is not False
            cost = float(a.get("wall_s") or 0.0) if launched else 0.0
            if launched and a.get("outcome") in ("pruned", "oom") and a.get("steps"):
                at = next((w for w in record["windows"] if int(w["step"]) >= int(a["steps"])), None)
                cost = pruned_cost(record, at) if at is not None else cost
            trials.append({
                "number": t.number, "config_key": a.get("config_key"), "outcome": a.get("outcome"),
                "launched": launched, "over_budget": budget is not None and record["peak_memory_mb"] > budget,
                "cost_s": round(cost, 4), "predicted_memory_mb": a.get("predicted_memory_mb"),
                "peak_memory_mb": a.get("peak_memory_mb"), "reason": a.get("reason"),
            })
        chosen = summary.best.config_key if summary.best is not None else None
        return {"seed": seed, "trials": trials, "chosen": chosen}


def study_summary(with_p: dict[str, Any], without: dict[str, Any], records: dict[str, dict[str, Any]],
                  budget: float) -> dict[str, Any]:
    def over(study: dict[str, Any]) -> int:
        return sum(t["launched"] and t["over_budget"] for t in study["trials"])

    def seconds(study: dict[str, Any]) -> float:
        return round(sum(t["cost_s"] for t in study["trials"]), 3)

    feasible = [r for r in records.values() if r["peak_memory_mb"] <= budget and r["outcome"] == "complete"]
    best = max(feasible, key=lambda r: r["throughput_samples_s"])
    in_study = [abs(t["predicted_memory_mb"] - t["peak_memory_mb"]) / t["peak_memory_mb"]
                for t in with_p["trials"]
                if t["launched"] and t["predicted_memory_mb"] is not None and t["peak_memory_mb"]
                and t["outcome"] != "oom"]
    return {
        "seed": with_p["seed"],
        "launched_over_budget": over(with_p), "launched_over_budget_without": over(without),
        "not_launched": sum(not t["launched"] for t in with_p["trials"]),
        "not_launched_fitting_budget": sum(not t["launched"] and not t["over_budget"] for t in with_p["trials"]),
        "trial_seconds": seconds(with_p), "trial_seconds_without": seconds(without),
        "saved_s": round(seconds(without) - seconds(with_p), 3),
        "saved_fraction": round(1 - seconds(with_p) / seconds(without), 4) if seconds(without) else None,
        "chosen": with_p["chosen"], "chosen_without": without["chosen"],
        "same_choice": with_p["chosen"] == without["chosen"],
        "chosen_is_feasible_best": with_p["chosen"] == today(best),
        "feasible_best": today(best),
        "in_study_median_error": round(statistics.median(in_study), 4) if in_study else None,
        "reasons": [t["reason"] for t in with_p["trials"] if not t["launched"]][:3],
    }


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 10-trial studies")
    parser.add_argument("--seeds", type=int, help="replayed studies per case (default 5; quick 2)")
    parser.add_argument("--n-trials", type=int, help="trials per replayed study (default 15; quick 10)")
    parser.add_argument("--orders", type=int, default=50, help="random orders of the grid per landscape")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/memory_prediction.json)")
    args = parser.parse_args(argv)
    quiet_optuna()
    seeds = args.seeds or (2 if args.quick else 5)
    n_trials = args.n_trials or (10 if args.quick else 15)
    started = time.monotonic()
    machine = machine_facts()
    results: dict[str, Any] = {"prediction": {}, "studies": {}}

    # 1. prediction error on the recorded landscapes
    rows = []
    for name in LANDSCAPES:
        landscape = Landscape.load(HERE / name)
        everything = [r for r in landscape.records.values() if r.get("peak_memory_mb")]
        orders: dict[str, list[list[dict[str, Any]]]] = {"random": [], "tuner": []}
        for seed in range(args.orders):
            order = everything[:]
            random.Random(seed).shuffle(order)
            orders["random"].append(order)
        with stage(f"{name}: {seeds} replayed studies for the tuner's order"):
            for seed in range(seeds):
                study = replay_study(landscape, landscape.records, seed, max(TRIALS_SEEN), None, True)
                keys = list(dict.fromkeys(t["config_key"] for t in study["trials"]))
                now = landscape.by_config()
                orders["tuner"].append([now[k] for k in keys if k in now])
        entry: dict[str, Any] = {}
        for kind, runs in orders.items():
            for k in TRIALS_SEEN:
                errors, covered = [], []
                for order in runs:
                    e, c = errors_after(order, everything, k)
                    errors += e
                    covered += c
                med = statistics.median(errors) if errors else None
                entry[f"{kind}_{k}"] = {"median_error": med, "within_own_error": sum(covered) / len(covered)
                                        if covered else None, "predictions": len(errors)}
                rows.append([name, kind, k, pct(med), pct(entry[f"{kind}_{k}"]["within_own_error"]),
                             check(med is not None and med <= TARGET_ERROR) if k == 5 else ""])
        results["prediction"][name] = entry
    results["prediction"]["fidelity_landscape.json"] = "no peak memory recorded (throughput only): not used"
    print_table("Memory prediction: median relative error after k trials",
                ["landscape", "order", "k trials", "median error", "truth within own error", "<= 10% at 5"], rows)

    # 2. trial-seconds saved with a budget a third of the space exceeds
    base = Landscape.load(HERE / "landscape.json")
    cases = {"cpu (recorded host memory)": base.records,
             "gpu-like (memory grows with the batch)": with_memory(base.records, gpu_memory)}
    rows = []
    for case, records in cases.items():
        budget = budget_for_third(records)
        share = sum(r["peak_memory_mb"] > budget for r in records.values()) / len(records)
        per_seed = []
        with stage(f"{case}: budget {budget:.0f} MB ({share:.0%} of the grid over it), {seeds} seeds x 2 studies"):
            for seed in range(seeds):
                with_p = replay_study(base, records, seed, n_trials, budget, True)
                without = replay_study(base, records, seed, n_trials, budget, False)
                per_seed.append(study_summary(with_p, without, records, budget))
        results["studies"][case] = {"budget_mb": budget, "share_over_budget": round(share, 4),
                                    "n_trials": n_trials, "seeds": per_seed}
        for s in per_seed:
            rows.append([case, s["seed"], s["launched_over_budget"], s["launched_over_budget_without"],
                         s["not_launched"], s["not_launched_fitting_budget"], fmt(s["trial_seconds_without"]),
                         fmt(s["trial_seconds"]), pct(s["saved_fraction"]), "yes" if s["same_choice"] else "no",
                         pct(s["in_study_median_error"]), check(s["launched_over_budget"] <= 1)])
    print_table("Replayed studies with a memory budget: with the prediction against without",
                ["case", "seed", "over budget launched", "without", "not launched", "of them fitting",
                 "trial-s without", "trial-s with", "saved", "same choice", "in-study error", "<= 1 over"], rows)
    settings = {"quick": args.quick, "seeds": seeds, "n_trials": n_trials, "orders": args.orders,
                "trials_seen": list(TRIALS_SEEN), "landscapes": list(LANDSCAPES),
                "landscape_dates": {n: read_json(HERE / n).get("date") for n in LANDSCAPES}}
    out = args.out or default_out("memory_prediction", args.quick)
    write_json(out, "memory_prediction", settings, results, machine, started)


if __name__ == "__main__":
    main()
