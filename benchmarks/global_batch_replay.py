"""Studies that hold a global batch, replayed on the landscape global_batch_landscape.py recorded (target 33.4(d)).

For each global batch of the recording and each seed: a study file with ``constraints.global_batch`` at that batch,
the recording's search space, workload and trial length, and autotune's default sampler and pruner (seeded), run by
the real Tuner with every trial replayed from its recorded windows (``autotune.tuner.recorded_runner``; no
confirmation runs, which need live ranks). The study's fastest split is its best complete trial; it is compared
with the grid's fastest (the best complete configuration of that global batch in the recording). Target: within 3%
of the grid's in at least 8 of 10 seeded replays.

    python benchmarks/global_batch_replay.py                     # 10 seeds x 2 global batches, 12 trials a study
    python benchmarks/global_batch_replay.py --landscape benchmarks/global_batch_landscape.quick.json --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import REPO, console, default_out, machine_facts, make_spec, print_table, write_json
from _landscapes import Landscape, Replay

WITHIN = 0.97  # the target: the study's fastest split within 3% of the grid's
SEEDS_MET = 8  # ... in at least 8 of 10 seeds


def grid_best(landscape: Landscape, total: int) -> tuple[float, str]:
    """The fastest complete configuration of ``total`` in the recording: its throughput and label."""
    rows = [r for r in landscape.records.values()
            if r["config"].get("global_batch") == total and r["outcome"] == "complete" and r["throughput_samples_s"]]
    if not rows:
        raise SystemExit(f"{landscape.path}: no complete configuration at global batch {total}")
    best = max(rows, key=lambda r: r["throughput_samples_s"])
    return float(best["throughput_samples_s"]), str(best.get("label", best["config_key"]))


def replay(landscape: Landscape, total: int, seed: int, n_trials: int) -> Replay:
    """One study holding ``total``, at autotune's defaults (the sampler seeded), replayed from the recording."""
    from autotune.tuner import NoLaunch, Tuner, recorded_runner

    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="autotune-replay-", dir=shm) as folder:
        document = landscape.document(f"held-{total}-{seed}", {"seed": seed}, n_trials, confirm={"top_k": 0},
                                      storage=f"sqlite:///{folder}/replay.db")
        document["constraints"] = {"global_batch": total}
        spec = make_spec(document, Path(folder))
        summary = Tuner(spec, launcher=NoLaunch(), run_trial=recorded_runner(landscape.lookup())).run(
            n_trials=n_trials)
        return Replay.from_study("autotune", seed, summary.study)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscape", type=Path, default=REPO / "benchmarks" / "global_batch_landscape.json",
                        help="a global_batch_landscape.py recording")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-trials", type=int, default=12, help="trials a study (the baseline included)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 6 trials")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/global_batch_replay.json)")
    args = parser.parse_args(argv)
    seeds, n_trials = (2, 6) if args.quick else (args.seeds, args.n_trials)
    started = time.monotonic()
    landscape = Landscape.load(args.landscape)
    totals = [int(t) for t in landscape.settings["global_batches"]]
    rows, results = [], []
    for total in totals:
        top, label = grid_best(landscape, total)
        ratios = []
        for seed in range(seeds):
            study = replay(landscape, total, seed, n_trials)
            found = study.best_within(len(study.states))
            ratios.append(found / top)
            results.append({"global_batch": total, "seed": seed, "best_found": found, "of_grid_best": found / top,
                            "pick": study.pick_within(len(study.states)), "trials": len(study.states),
                            "configs_tried": len(set(study.keys))})
            console.print(f"  global batch {total}, seed {seed}: {found:,.0f} samples/s, {found / top:.1%} of the "
                          "grid's")
        within = sum(r >= WITHIN for r in ratios)
        configs = sum(1 for r in landscape.records.values() if r["config"].get("global_batch") == total)
        met = within >= SEEDS_MET * seeds / 10
        rows.append([total, configs, f"{top:,.0f} ({label})", f"{sorted(ratios)[len(ratios) // 2]:.1%}",
                     f"{min(ratios):.1%}", f"{within} of {seeds}", "met" if met else "missed"])
    print_table(f"Held global batch, {seeds} seeds x {n_trials} replayed trials at autotune's defaults, against the "
                f"grid's fastest split ({args.landscape.name})",
                ["global batch", "configurations", "grid's fastest", "study's best / grid's (median)", "worst",
                 "within 3%", "target (8 of 10)"], rows)
    write_json(args.out or default_out("global_batch_replay", args.quick), "global_batch_replay",
               {"landscape": str(args.landscape), "seeds": seeds, "n_trials": n_trials, "within": WITHIN,
                "recorded_on": landscape.machine},
               {"rows": rows, "studies": results}, machine_facts(), started)


if __name__ == "__main__":
    main()
