"""Warm start: trials until a study is within 95% of the grid's best, started warm from an earlier study or cold.

benchmarks/landscape.json and benchmarks/landscape_repeat.json are two recordings of the same grid (every
configuration measured once, on different days). Each seed runs, on one SQLite storage, the real tuner
(``autotune.tuner.Tuner``: its sampler, pruner, baseline, fingerprint and warm start; trials replayed from
a recording with ``autotune.tuner.recorded_runner``, no confirmation runs):

1. an *earlier* study on one recording (``--budget`` trials, autotune's defaults);
2. a *warm* study on the other recording, same workload and space: it warm-starts from the earlier one
   (the same fingerprint: same machine, same model), queuing up to 3 of its best configurations right
   after the baseline;
3. a *cold* study on that other recording with ``warm_start: false``, the same seed.

Reported per seed and direction (earlier on the repeat, measured on the first recording, and the other way
round): the 1-based trial (baseline included) of the first complete trial within 95% of that recording's
best, for the warm and the cold study, and the median over seeds. Target: warm <= 3 trials.

    python benchmarks/warm_start.py               # 5 seeds x 2 directions (~25 minutes at load 10-14 on 2 cores)
    python benchmarks/warm_start.py --seeds 2     # smaller
    python benchmarks/warm_start.py --quick       # smoke run: 1 seed x 2 directions
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    HERE,
    check,
    console,
    default_out,
    machine_caption,
    machine_facts,
    make_spec,
    median,
    print_table,
    quiet_optuna,
    stage,
    write_json,
)
from _landscapes import LEVEL, Landscape, Replay

TARGET = 3  # trials to the 95% level with a warm start, the baseline included


def run_study(landscape: Landscape, name: str, seed: int, budget: int, folder: Path, *, warm: bool
              ) -> tuple[Replay, dict[str, Any] | None]:
    """One study on ``landscape`` in the storage of ``folder``: its trials, and its warm-start record."""
    from autotune.tuner import WARM_START_ATTR, NoLaunch, Tuner, recorded_runner

    document = landscape.document(name, {"seed": seed}, budget, confirm={"top_k": 0},
                                  storage=f"sqlite:///{folder}/warm_start.db")
    document["warm_start"] = warm
    spec = make_spec(document, folder)
    summary = Tuner(spec, launcher=NoLaunch(), run_trial=recorded_runner(landscape.lookup())).run(n_trials=budget)
    return Replay.from_study(name, seed, summary.study), summary.study.user_attrs.get(WARM_START_ATTR)


def one_seed(earlier: Landscape, measured: Landscape, seed: int, budget: int) -> dict[str, Any]:
    level = LEVEL * measured.best
    with tempfile.TemporaryDirectory(prefix="autotune-warm-start-") as tmp:
        folder = Path(tmp)
        source, _ = run_study(earlier, f"earlier-{seed}", seed, budget, folder, warm=False)
        warm, record = run_study(measured, f"warm-{seed}", seed, budget, folder, warm=True)
        cold, _ = run_study(measured, f"cold-{seed}", seed, budget, folder, warm=False)
    return {
        "seed": seed, "earlier": earlier.path.name, "measured": measured.path.name,
        "earlier_best_within_budget": source.best_within(budget), "warm_trials_to_level": warm.reached(level),
        "cold_trials_to_level": cold.reached(level), "warm_best": warm.best_within(budget),
        "cold_best": cold.best_within(budget), "warm_line": (record or {}).get("line"),
        "warm_enqueued": (record or {}).get("enqueued"),
        "warm_cost_to_level_s": warm.cost_until(warm.reached(level) or budget),
        "cold_cost_to_level_s": cold.cost_until(cold.reached(level) or budget),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 seed x 2 directions")
    parser.add_argument("--seeds", type=int, help="seeds per direction (default 5; quick 1)")
    parser.add_argument("--budget", type=int, help="trials of each study (default 15)")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/warm_start.json)")
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 5)
    args.budget = args.budget or 15
    args.out = args.out or default_out("warm_start", args.quick)
    quiet_optuna()
    started = time.monotonic()
    machine = machine_facts()
    first = Landscape.load(HERE / "landscape.json")
    repeat = Landscape.load(HERE / "landscape_repeat.json")
    runs: list[dict[str, Any]] = []
    for earlier, measured in ((repeat, first), (first, repeat)):
        with stage(f"earlier study on {earlier.path.name}, measured on {measured.path.name}: {args.seeds} seeds"):
            for seed in range(args.seeds):
                runs.append(one_seed(earlier, measured, seed, args.budget))
                r = runs[-1]
                console.print(f"  seed {seed}: warm {r['warm_trials_to_level']}, cold {r['cold_trials_to_level']}"
                              f" — {r['warm_line']}")
    unreached = args.budget + 1  # a study that never got there counts as past its budget
    warm = [r["warm_trials_to_level"] or unreached for r in runs]
    cold = [r["cold_trials_to_level"] or unreached for r in runs]
    warm_median = median(warm)
    summary = {
        "runs": len(runs), "warm_trials_to_level_median": warm_median, "cold_trials_to_level_median": median(cold),
        "warm_trials_to_level_max": max(warm), "warm_within_target": sum(w <= TARGET for w in warm),
        "target_trials": TARGET, "target_met": bool(warm_median is not None and warm_median <= TARGET),
    }
    rows = [(f"{r['seed']} ({r['earlier']} -> {r['measured']})", r["warm_trials_to_level"], r["cold_trials_to_level"],
             r["warm_best"], r["cold_best"]) for r in runs]
    rows.append(("median", summary["warm_trials_to_level_median"], summary["cold_trials_to_level_median"], None, None))
    print_table(f"Trials to {LEVEL:.0%} of the grid's best (baseline included; budget {args.budget})",
                ["seed (earlier -> measured)", "warm", "cold", "warm best samples/s", "cold best samples/s"], rows,
                caption=machine_caption(machine))
    console.print(f"warm start <= {TARGET} trials: {check(summary['target_met'])} "
                  f"({summary['warm_within_target']} of {len(runs)} runs)")
    settings = {"quick": args.quick, "seeds": args.seeds, "budget": args.budget, "level": LEVEL,
                "target_trials": TARGET,
                "landscapes": [str(first.path.name), str(repeat.path.name)],
                "best_samples_s": {first.path.name: first.best, repeat.path.name: repeat.best}}
    write_json(args.out, "warm_start", settings, {"summary": summary, "runs": runs}, machine, started)


if __name__ == "__main__":
    main()
