"""Decisions under drift: replayed studies at the study-file defaults on a landscape whose truth is known, on a
machine whose speed drifts (a wave of ±12% and 8% lognormal noise a reading, as the 2-core VM's).

Each seed runs the real tuner (``autotune.tuner.Tuner`` with ``autotune.tuner.replay_runner``: its sampler,
pruner, baseline and confirmation; each reading of the landscape is one trial or one race block, and the
drift moves with every reading) on the quickstart's workload and a space of batch size x workers x ranks
(30 configurations). Reported: how often the choice is within 3% of the true best, how often the stated
speed-up's ~95% interval holds the true speed-up, the median half-width, and how the confirmation ended.
Run it once with ``confirm.method: race`` (the default) and once with ``reruns`` to compare the two.

    python benchmarks/drift_decisions.py                  # 20 seeds, race and reruns side by side (~1 minute)
    python benchmarks/drift_decisions.py --quick          # smoke run: 3 seeds
    python benchmarks/drift_decisions.py --methods race --n-trials 20 --second-looks 0   # the pruner's second
                                                           # looks off (default: a tenth of the trials)
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import check, default_out, machine_caption, machine_facts, make_spec, print_table, write_json

SPACE = {"batch_size": {"choices": [16, 32, 64, 128, 256]}, "num_workers": {"low": 0, "high": 2},
         "world_size": {"choices": [1, 2]}}


def truth(config: Any) -> float:
    """The true speed (samples/s): batch helps with diminishing returns, a worker 1.5x, a second one 3% less,
    two ranks 1.7x but 10% less at the largest batches."""
    c = dict(config)
    speed = 1000.0 * (c["batch_size"] / 32) ** 0.35 * (1.5 if c["num_workers"] >= 1 else 1.0)
    speed *= 0.97 if c["num_workers"] == 2 else 1.0
    speed *= 1.7 if c["world_size"] == 2 else 1.0
    return speed * (0.9 if c["batch_size"] >= 128 and c["world_size"] == 2 else 1.0)


def drifting(seed: int, noise: float, wave: float, period_s: float) -> Any:
    from autotune.tuner import Measured

    rng = random.Random(seed)
    clock = [0.0]

    def landscape(config: Any, repeat: int) -> Measured:
        value = truth(config.model_dump()) * (1 + wave * math.sin(2 * math.pi * clock[0] / period_s + seed))
        clock[0] += 0.6  # a reading takes its time: the drift moves between two readings
        return Measured(value * math.exp(rng.gauss(0, noise)), overhead_s=2.0)

    return landscape


def one(seed: int, method: str, folder: Path, noise: float, wave: float, n_trials: int = 10,
        second_looks: int | None = None) -> dict[str, Any]:
    from autotune.objectives import choose
    from autotune.tuner import NoLaunch, Tuner, replay_runner

    doc = {
        "name": f"drift-{method}-{seed}", "workload": {"entrypoint": "autotune.workloads.mlp:build",
                                                        "args": {"hidden": 64, "depth": 2}},
        "search_space": SPACE, "trial": {"warmup_steps": 5, "max_steps": 50},
        "sampler": {"name": "gp", "seed": seed}, "budget": {"n_trials": n_trials},
        "pruner": {"name": "best", "second_looks": second_looks},
        "confirm": {"top_k": 2, "method": method},
        "storage": f"sqlite:///{folder}/drift-{method}-{seed}.db",
    }
    spec = make_spec(doc, folder)
    summary = Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(drifting(seed, noise, wave, 60.0))).run()
    choice = choose(summary.study)
    assert choice.best is not None and choice.baseline is not None
    got, base = truth(choice.best.config), truth(choice.baseline.config)
    best = max(truth({"batch_size": b, "num_workers": w, "world_size": s})
               for b in (16, 32, 64, 128, 256) for w in (0, 1, 2) for s in (1, 2))
    width = choice.speedup_half_width
    stated = choice.speedup or 1.0
    race = summary.study.user_attrs.get("autotune_race") or {}
    return {
        "seed": seed, "method": method, "of_best": got / best, "speedup": stated, "true_speedup": got / base,
        "half_width": width, "held": width is not None and abs(math.log(stated / (got / base))) <= width,
        "rounds": len(race.get("rounds", [])), "stopped": race.get("stopped"), "statement": choice.statement(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.08)
    parser.add_argument("--wave", type=float, default=0.12)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 seeds")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--n-trials", type=int, default=10, help="each study's budget.n_trials (default 10)")
    parser.add_argument("--second-looks", type=int, help="pruner.second_looks (default: the study file's default)")
    parser.add_argument("--methods", nargs="+", default=["race", "reruns"], choices=["race", "reruns"])
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = 3 if args.quick else args.seeds
    started = time.monotonic()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            results[method] = [one(seed, method, Path(tmp), args.noise, args.wave, args.n_trials, args.second_looks)
                               for seed in range(seeds)]
    rows = []
    summary = {}
    for method, runs in results.items():
        widths = [r["half_width"] for r in runs if r["half_width"] is not None]
        within = sum(r["of_best"] >= 0.97 for r in runs) / len(runs)
        held = sum(r["held"] for r in runs) / len(runs)
        mid = statistics.median(widths) if widths else None
        summary[method] = {"within_3pct": within, "interval_held": held, "median_half_width": mid}
        rows.append([method, f"{within:.0%} {check(within >= 0.8)}", f"{held:.0%} {check(held >= 0.9)}",
                     f"{mid:.1%} {check(mid is not None and mid <= 0.10)}" if mid is not None else "-",
                     f"{statistics.median(r['rounds'] for r in runs):.0f}"])
    machine = machine_facts()
    print_table("decisions under drift (targets: >= 80% within 3%, >= 90% held, median half-width <= 10%)",
                ["confirmation", "choice within 3% of the best", "interval holds the truth", "median half-width",
                 "race rounds (median)"], rows, machine_caption(machine))
    write_json(args.out or default_out("drift_decisions", args.quick), "drift_decisions",
               {"seeds": seeds, "noise": args.noise, "wave": args.wave, "n_trials": args.n_trials,
                "second_looks": args.second_looks}, {"summary": summary, "runs": results},
               machine, started)


if __name__ == "__main__":
    main()
