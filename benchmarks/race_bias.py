"""Does a paced block read a configuration's speed as a whole trial does? Each entrant against itself.

The confirmation race states speed-ups above an independent referee's (benchmarks/README.md, section 11):
2.82x and 2.19x stated where whole trials read 2.04x and 1.87x. Either the winner reads high in its paced
blocks or the frozen-and-thawed baseline reads low. This script measures each configuration's paced reading
against its own whole-trial reading, interleaved round by round so that the machine's drift hits both alike:

- a round runs a whole trial of every configuration (the study's limits, in a shuffled order), then opens
  every configuration as a paced run at once (:class:`autotune.trial_runner.PacedRun`, the race's mechanism:
  all alive, one block each in a shuffled order per block round, the others frozen) for ``--blocks`` block
  rounds, and reads each configuration as the race does (all its block samples over all its block time);
- per configuration: the paced reading over the whole-trial reading of the same round (geometric mean over
  the rounds, ~95% interval); per chosen configuration: its speed-up over the baseline in each mode.

A ratio paced/whole that differs between the baseline and a chosen configuration is the race's bias.

    python benchmarks/race_bias.py                      # the choices of runs 0 and 4 of the 5-run series
    python benchmarks/race_bias.py --quick              # smoke run: one choice, 2 rounds of 3 blocks
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from _common import HERE, RUNS, default_out, machine_caption, machine_facts, print_table, write_json

QUICKSTART = HERE.parent / "studies" / "quickstart.yaml"
SERIES = HERE / "quickstart_referee_race_5runs.json"
T95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}


def interval(logs: list[float]) -> tuple[float, float]:
    """Geometric mean of exp(logs) and the relative ~95% half-width (Student t)."""
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan
    return math.exp(mean), T95.get(len(logs), 2.0) * statistics.stdev(logs) / math.sqrt(len(logs))


def paced_session(spec: Any, configs: dict[str, Any], whole: dict[str, float], launcher: Any, folder: Path,
                  blocks: int, rng: random.Random) -> dict[str, float]:
    """Every configuration paced at once, as in a race (one lease of the cores, all alive, one block each in a
    shuffled order per block round); each one's reading as the race takes it: its block samples over their time."""
    from autotune.trial_runner import PacedRun, plan_for
    from autotune.tuner import block_steps

    runs: dict[str, Any] = {}
    samples = dict.fromkeys(configs, 0.0)
    seconds = dict.fromkeys(configs, 0.0)
    with launcher.sharing(plan_for(spec, configs["baseline"], evaluate=False)):
        try:
            for name, config in configs.items():
                steps = block_steps(spec.confirm.block_s, whole[name], config)
                plan = plan_for(spec, config, evaluate=False).model_copy(update={"pace_steps": steps})
                runs[name] = PacedRun(launcher, plan, folder / f"paced-{name}")
                runs[name].start(float(spec.trial.max_seconds))
            for _ in range(blocks):
                for name in rng.sample(list(configs), len(configs)):
                    window = runs[name].block(60.0)
                    block_samples = runs[name].plan.pace_steps * configs[name].global_batch
                    samples[name] += block_samples
                    seconds[name] += block_samples / window.window_throughput_samples_s
        finally:
            for run in runs.values():
                run.close()
    return {name: samples[name] / seconds[name] for name in configs}


def one_round(spec: Any, configs: dict[str, Any], launcher: Any, folder: Path, blocks: int,
              rng: random.Random) -> dict[str, dict[str, float]]:
    """Whole trials of every configuration (shuffled), then a paced session of them all; each one's two readings."""
    from autotune.trial_runner import plan_for, run_trial

    whole: dict[str, float] = {}
    for name in rng.sample(list(configs), len(configs)):
        result = run_trial(plan_for(spec, configs[name], evaluate=False), folder / f"whole-{name}", launcher)
        whole[name] = float(result.throughput_samples_s or math.nan)
    paced = paced_session(spec, configs, whole, launcher, folder, blocks, rng)
    return {name: {"whole": whole[name], "paced": paced[name]} for name in configs}


def measure(choice: dict[str, Any], rounds: int, blocks: int, seed: int, index: int) -> dict[str, Any]:
    from autotune import load_spec
    from autotune.search_space import study_space
    from autotune.trial_runner import WarmLauncher

    spec = load_spec(str(QUICKSTART))
    space = study_space(spec)
    configs = {"baseline": space.default_config(spec.baseline),
               "chosen": space.default_config({**spec.baseline, **choice})}
    rng = random.Random(seed)
    launcher = WarmLauncher()
    readings = []
    try:
        for r in range(rounds):
            readings.append(one_round(spec, configs, launcher, RUNS / "race_bias" / f"{index}-{r}", blocks, rng))
            print(f"  round {r + 1}/{rounds}: " + ", ".join(
                f"{n} whole {v['whole']:.0f} paced {v['paced']:.0f}" for n, v in readings[-1].items()), flush=True)
    finally:
        launcher.close()
    out: dict[str, Any] = {"config": choice, "rounds": readings}
    for name in configs:
        out[f"{name}_paced_over_whole"] = interval([math.log(x[name]["paced"] / x[name]["whole"]) for x in readings])
    for mode in ("whole", "paced"):
        out[f"speedup_{mode}"] = interval([math.log(x["chosen"][mode] / x["baseline"][mode]) for x in readings])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs-from", type=Path, default=SERIES, help="a quickstart_referee.py JSON")
    parser.add_argument("--runs", type=int, nargs="+", default=[0, 4], help="which runs' choices to measure")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=8, help="block rounds of each paced session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: the first choice, 2 rounds of 3 blocks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs, rounds, blocks = ([args.runs[0]], 2, 3) if args.quick else (args.runs, args.rounds, args.blocks)
    started = time.monotonic()
    machine = machine_facts()
    studies = json.loads(args.configs_from.read_text())["results"]["studies"]
    results, rows = [], []
    for i in runs:
        print(f"run {i}'s choice (stated {studies[i]['speedup']:.2f}x):", flush=True)
        res = measure(studies[i]["config"], rounds, blocks, args.seed + i, i)
        res["stated"] = studies[i]["speedup"]
        results.append(res)
        (bv, bw), (cv, cw) = res["baseline_paced_over_whole"], res["chosen_paced_over_whole"]
        (wv, ww), (pv, pw) = res["speedup_whole"], res["speedup_paced"]
        rows.append([i, f"{res['stated']:.2f}x", f"{bv:.3f} ± {bw:.1%}", f"{cv:.3f} ± {cw:.1%}",
                     f"{wv:.2f}x ± {ww:.0%}", f"{pv:.2f}x ± {pw:.0%}"])
    print_table(f"paced blocks against whole trials, {rounds} interleaved rounds of {blocks} block rounds",
                ["run", "race stated", "baseline paced/whole", "chosen paced/whole", "speed-up (whole)",
                 "speed-up (paced)"], rows, machine_caption(machine))
    write_json(args.out or default_out("race_bias", args.quick), "race_bias",
               {"configs_from": str(args.configs_from), "runs": runs, "rounds": rounds, "blocks": blocks,
                "seed": args.seed}, results, machine, started)


if __name__ == "__main__":
    main()
