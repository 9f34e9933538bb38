"""Refine the top of a recorded landscape: its leading configurations measured again, each beside the baseline.

One 20-step reading of a configuration of the large grid wanders 15% (the log-ratio of its two recordings,
landscape_large.json and _repeat.json, has a standard deviation of 0.21), so the recordings cannot say which of
its leaders is best: the best by their geometric mean is 7% ahead of the next, inside that noise. This script
measures the configurations whose geometric mean is within ``--within`` of the best (and the baseline, the
default configuration a study starts from) again, in ``--rounds`` rounds of a seeded order. Each configuration
runs between two runs of the baseline, back to back, and reads as its throughput over the geometric mean of
those two, so the machine's drift between the readings cancels; a configuration's refined ratio is the median
of its rounds. The trials are longer than the recording's (``--steps``, 60 by default) so that a window's noise
counts less.

The result (landscape_large_refined.json) gives each refined configuration its ratio to the baseline and its
spread over rounds; ``drift_decisions.py --landscape large --truth refined`` reads the grid at the two
recordings' geometric mean, the refined configurations at their ratio times the baseline's geometric mean.

    python benchmarks/landscape_refine.py --within 0.65 --rounds 6   # landscape_large_refined.json: ~26 min
    python benchmarks/landscape_refine.py --quick               # smoke run: 2 configurations, 1 round, short trials
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

from _common import (
    HERE,
    MLP,
    RUNS,
    Trials,
    console,
    default_out,
    machine_caption,
    machine_facts,
    pct,
    print_table,
    seeded_shuffle,
    stage,
    warn_if_busy,
    write_json,
)
from _landscapes import Landscape, study_space


def leaders(landscape: Landscape, within: float) -> list[dict[str, Any]]:
    """The complete configurations within ``within`` of the landscape's best, best first."""
    complete = [r for r in landscape.records.values() if r["outcome"] == "complete" and r["throughput_samples_s"]]
    near = [r for r in complete if r["throughput_samples_s"] >= within * landscape.best]
    return sorted(near, key=lambda r: -r["throughput_samples_s"])


def baseline_of(landscape: Landscape) -> dict[str, Any]:
    """The landscape's record of the baseline: its space's default configuration, as a study runs it first."""
    from autotune.objectives import config_key

    default = study_space(landscape.settings["grid"], landscape.settings["limits"]).default_config()
    return landscape.by_config()[config_key(default.model_dump())]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--landscape", type=Path, default=HERE / "landscape_large.json")
    parser.add_argument("--repeat", type=Path, default=HERE / "landscape_large_repeat.json")
    parser.add_argument("--within", type=float, default=0.7, help="refine configurations within this of the best")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60, help="steps of each refining trial (warm-up 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of each round's order")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 configurations, 1 round, 12 steps")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rounds, steps = (1, 12) if args.quick else (args.rounds, args.steps)
    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    mean = Landscape.load(args.landscape).geometric_mean(Landscape.load(args.repeat))
    chosen = leaders(mean, args.within)[: 2 if args.quick else None]
    baseline = baseline_of(mean)
    limits = {"warmup_steps": 4, "max_steps": steps, "report_every": 4, "max_seconds": 20 + steps}
    console.print(f"refining {len(chosen)} configurations within {pct(args.within)} of the best "
                  f"({mean.best:,.0f} samples/s by the recordings' geometric mean) beside the baseline "
                  f"{baseline['label']}: {rounds} round(s) of {steps}-step trials")
    from autotune.search_space import TrialConfig

    readings: dict[str, list[dict[str, Any]]] = {r["config_key"]: [] for r in chosen}
    with Trials(MLP, RUNS / "landscape_refine") as trials:
        with stage("starting the warm launcher (one discarded trial)"):
            trials.run(TrialConfig.model_validate(baseline["config"]), {"warmup_steps": 1, "max_steps": 3})

        def reading(record: dict[str, Any], tag: str) -> float | None:
            result = trials.run(TrialConfig.model_validate(record["config"]), limits, tag=tag)
            value = result.throughput_samples_s if result.outcome.value == "complete" else None
            return float(value) if value else None

        for round_ in range(rounds):
            with stage(f"round {round_ + 1} of {rounds}"):
                before = reading(baseline, "baseline")
                for record in seeded_shuffle(chosen, args.seed * 1000 + round_):
                    value = reading(record, record["label"].replace(" ", "_"))
                    after = reading(baseline, "baseline")
                    anchor = math.sqrt(before * after) if before and after else None
                    ratio = value / anchor if value and anchor else None
                    readings[record["config_key"]].append(
                        {"samples_s": value, "baseline_before": before, "baseline_after": after, "ratio": ratio})
                    console.print(f"  {record['label']:56s} {value or 0:7,.0f} samples/s, baseline {before or 0:,.0f}"
                                  f" / {after or 0:,.0f}: {ratio or 0:.3f}x")
                    before = after
    base_value = float(baseline["throughput_samples_s"])
    refined = []
    for record in chosen:
        ratios = [r["ratio"] for r in readings[record["config_key"]] if r["ratio"]]
        ratio = statistics.median(ratios) if ratios else None
        refined.append({"label": record["label"], "config_key": record["config_key"], "knobs": record["knobs"],
                        "recorded_samples_s": record["throughput_samples_s"], "ratio": ratio,
                        "ratio_spread": (max(ratios) / min(ratios) - 1) if len(ratios) > 1 else None,
                        "samples_s": ratio * base_value if ratio else None, "readings": readings[record["config_key"]]})
    refined.sort(key=lambda r: -(r["ratio"] or 0))
    top = refined[0]["ratio"] or 1.0
    print_table(f"the landscape's leaders refined: median of {rounds} round(s), each between two baseline runs",
                ["configuration", "recordings' mean", "ratio to baseline", "of the refined best", "spread"],
                [[r["label"], r["recorded_samples_s"], r["ratio"], pct((r["ratio"] or 0) / top), pct(r["ratio_spread"])]
                 for r in refined], caption=machine_caption(machine))
    write_json(args.out or default_out("landscape_large_refined", args.quick), "landscape_refine",
               {"landscape": args.landscape.name, "repeat": args.repeat.name, "within": args.within,
                "rounds": rounds, "limits": limits, "seed": args.seed, "quick": args.quick,
                "baseline": {"label": baseline["label"], "config_key": baseline["config_key"],
                             "recordings_mean_samples_s": base_value}},
               {"configs": refined, "within_95_of_refined_best": sum((r["ratio"] or 0) >= 0.95 * top for r in refined),
                "within_90_of_refined_best": sum((r["ratio"] or 0) >= 0.9 * top for r in refined)},
               machine, started)


if __name__ == "__main__":
    main()
