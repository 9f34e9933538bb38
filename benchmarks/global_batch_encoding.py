"""How a held global batch is searched: one categorical param over the feasible splits (autotune's ``batch_split``)
against the three knobs sampled freely with the infeasible combinations failed without a measurement.

Replayed studies through the real tuner (no trial runs) on a synthetic landscape of the split and the DataLoader
workers: faster with more ranks and with micro-batches up to 64, slower with accumulation. Each study holds the
global batch 256 over per-rank batch {8..256 in powers of two}, grad_accum {1, 2, 4, 8}, world_size {1, 2} and
num_workers {0, 1, 2}: 8 feasible splits (24 configurations) of 120 combinations. Printed per sampler and encoding:
the trials that measured something, and the best feasible throughput found against the landscape's best.

    python benchmarks/global_batch_encoding.py            # gp and tpe, 5 seeds, 12 trials
    python benchmarks/global_batch_encoding.py --quick    # tpe, 2 seeds, 8 trials
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from _common import RUNS, console, default_out, fresh_study_file, machine_facts, print_table, write_json

HELD = 256
SEARCH = {
    "batch_size": {"choices": [8, 16, 32, 64, 128, 256]}, "grad_accum": {"choices": [1, 2, 4, 8]},
    "world_size": {"choices": [1, 2]}, "num_workers": {"low": 0, "high": 2}, "lr_scaling": "none",
}


def speed(batch_size: int, grad_accum: int, world_size: int, workers: int) -> float:
    return 1000.0 * min(batch_size, 64) / 64 * world_size**0.5 / (1 + 0.1 * grad_accum) + 10.0 * workers


def landscape(config: Any, repeat: int) -> Any:
    from autotune.trial_runner import Outcome
    from autotune.tuner import Measured

    if config.global_batch != HELD:  # the free encoding's infeasible combination: failed, nothing measured
        return Measured(1.0, outcome=Outcome.CRASHED, fail_after_windows=0)
    return Measured(speed(config.batch_size, config.grad_accum, config.world_size, config.num_workers))


def best_possible() -> float:
    return max(speed(HELD // (g * w), g, w, n) for g in (1, 2, 4, 8) for w in (1, 2) for n in (0, 1, 2)
               if 8 <= HELD // (g * w) <= 256)


def one_study(sampler: str, encoding: str, seed: int, n_trials: int, folder: Path) -> dict[str, Any]:
    import optuna

    from autotune.tuner import NoLaunch, Tuner, replay_runner
    from autotune.workload_check import load_spec

    name = f"{encoding}-{sampler}-{seed}"
    document: dict[str, Any] = {
        "name": name, "workload": {"entrypoint": "autotune.workloads.mlp:build", "args": {"hidden": 16, "depth": 1}},
        "search_space": SEARCH, "trial": {"warmup_steps": 2, "max_steps": 20, "report_every": 3},
        "sampler": {"name": sampler, "seed": seed}, "pruner": {"name": "none"}, "confirm": {"top_k": 0},
        "budget": {"n_trials": n_trials}, "warm_start": False,
        # the free encoding's baseline must be feasible too: 256 x 1 x 1
        "baseline": {"batch_size": HELD},
    }
    if encoding == "batch_split":
        document["constraints"] = {"global_batch": HELD}
    path = fresh_study_file(document, folder / name)
    Tuner(load_spec(str(path)), launcher=NoLaunch(), run_trial=replay_runner(landscape)).run()
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path.parent / (name + '.db')}")
    trials = study.get_trials(deepcopy=False)
    measured = [t.user_attrs.get("throughput_samples_s") for t in trials if t.user_attrs.get("outcome") == "complete"]
    return {"sampler": sampler, "encoding": encoding, "seed": seed, "trials": len(trials),
            "measured": len(measured), "best_found": max(m for m in measured if m) if measured else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: tpe, 2 seeds, 8 trials")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/global_batch_encoding.json)")
    args = parser.parse_args(argv)
    samplers, seeds, n_trials = (["tpe"], 2, 8) if args.quick else (["gp", "tpe"], 5, 12)
    out = args.out or default_out("global_batch_encoding", args.quick)
    started = time.monotonic()
    machine = machine_facts()
    top = best_possible()
    studies = []
    for sampler in samplers:
        for encoding in ("batch_split", "free"):
            for seed in range(seeds):
                studies.append(one_study(sampler, encoding, seed, n_trials, RUNS / "global_batch_encoding"))
                console.print(f"  {studies[-1]}")
    rows = []
    for sampler in samplers:
        for encoding in ("batch_split", "free"):
            mine = [s for s in studies if s["sampler"] == sampler and s["encoding"] == encoding]
            ratios = [(s["best_found"] or 0.0) / top for s in mine]
            rows.append([sampler, encoding, f"{statistics.mean(s['measured'] for s in mine):.1f} of {n_trials}",
                         f"{statistics.median(ratios):.1%}", f"{min(ratios):.1%}",
                         sum(1 for r in ratios if r >= 0.97)])
    print_table(f"A held global batch ({HELD}), {seeds} seeds x {n_trials} replayed trials: one categorical param "
                "over the feasible splits (batch_split) vs the three knobs free, infeasible ones failed",
                ["sampler", "encoding", "trials measured", "best / landscape's best (median)", "worst",
                 "seeds within 3%"], rows)
    write_json(out, "global_batch_encoding",
               {"quick": args.quick, "held": HELD, "search_space": SEARCH, "n_trials": n_trials, "seeds": seeds,
                "samplers": samplers, "landscape_best": top},
               {"rows": rows, "studies": studies}, machine, started)


if __name__ == "__main__":
    main()
