"""The gradient noise scale measured in a short trial against a long run's (issue 33, item 5).

The lm workload (autotune.workloads.lm, its defaults: per-rank batch 32) at two DDP ranks: ``--short-repeats``
trials of 40 steps, then one run of 400 steps, each measuring ``B_noise`` as every trial does (per-rank
gradients against the all-reduced one, pooled over the measured windows, a jackknife interval over
windows). Target: every short trial's estimate within a factor of 2 of the long run's. The long run's
windows are also read one by one (each window's own estimate), to show how the noise scale moves as the loss
falls. A one-rank trial with grad_accum 2 (the micro-batches against the accumulated gradient, same global
batch) is measured beside them. The estimate is not a timing: the machine's load does not spoil it.

    python benchmarks/noise_scale.py            # 3 short trials, one long run, one grad_accum trial (5 min, load 6-9)
    python benchmarks/noise_scale.py --quick    # smoke run: 1 short trial of 12 steps, a long one of 40
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import LM, RUNS, Trials, check, default_out, machine_caption, machine_facts, print_table, write_json

from autotune.scale import NoiseWindow, estimate_noise_scale

TARGET_FACTOR = 2.0


def _limits(steps: int, every: int) -> dict[str, Any]:
    return {"warmup": "fixed", "warmup_steps": 5, "max_steps": steps, "report_every": every, "max_seconds": 1200,
            "hang_seconds": 120}


def _row(label: str, result: Any) -> dict[str, Any]:
    noise = result.gradient_noise_scale
    return {
        "trial": label, "outcome": result.outcome.value, "steps": result.steps, "loss": result.loss,
        "noise_scale": None if noise is None else noise.value, "low": None if noise is None else noise.low,
        "high": None if noise is None else noise.high, "source": None if noise is None else noise.source,
        "batch_small": None if noise is None else noise.batch_small,
        "batch_big": None if noise is None else noise.batch_big,
        "windows": None if noise is None else noise.windows, "trial_dir": result.trial_dir,
    }


def per_window(result: Any) -> list[dict[str, Any]]:
    """Each window's own estimate (its steps alone), with its loss: the noise scale over training."""
    out = []
    for w in result.windows:
        g = w.gradient_noise
        if g is None:
            continue
        e = estimate_noise_scale(g.batch_small, g.batch_big, [NoiseWindow(g.steps, g.sqr_small, g.sqr_big)])
        out.append({"step": w.step, "loss": w.loss, "noise_scale": None if e is None else e.value})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-repeats", type=int, default=3)
    parser.add_argument("--short-steps", type=int, default=40)
    parser.add_argument("--long-steps", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="1 short trial of 12 steps, a long one of 40")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    started = time.monotonic()
    repeats, short, long = (1, 12, 40) if args.quick else (args.short_repeats, args.short_steps, args.long_steps)
    machine = machine_facts()
    rows = []
    with Trials(LM, RUNS / "noise_scale") as trials:
        ddp = trials.config({"world_size": 2})
        for i in range(repeats):
            result = trials.run(ddp, _limits(short, 5), tag="short")
            rows.append(_row(f"short {i + 1} ({short} steps, 2 ranks)", result))
        long_result = trials.run(ddp, _limits(long, 25), tag="long")
        rows.append(_row(f"long ({long} steps, 2 ranks)", long_result))
        accum = trials.config({"world_size": 1, "grad_accum": 2})
        rows.append(_row(f"grad_accum 2 ({short} steps, 1 rank)", trials.run(accum, _limits(short, 5), tag="accum")))
    reference = rows[repeats]["noise_scale"]
    for r in rows:
        r["ratio_to_long"] = None if reference is None or r["noise_scale"] is None else r["noise_scale"] / reference
    ratios = [r["ratio_to_long"] for r in rows[:repeats]]
    met = bool(ratios) and all(x is not None and 1 / TARGET_FACTOR <= x <= TARGET_FACTOR for x in ratios)
    print_table(
        "gradient noise scale of the lm workload (samples), global batch 64",
        ["trial", "B_noise", "95% interval", "source (small/big batch)", "windows", "/ long run's", "final loss"],
        [[r["trial"], _num(r["noise_scale"]), f"{_num(r['low'])}-{_num(r['high'])}",
          f"{r['source']} ({r['batch_small']}/{r['batch_big']})", r["windows"], _num(r["ratio_to_long"], ".2f"),
          _num(r["loss"], ".3f")] for r in rows],
        caption=machine_caption(machine),
    )
    windows = per_window(long_result)
    print_table("the long run's windows, each on its own", ["step", "loss", "B_noise"],
                [[w["step"], _num(w["loss"], ".3f"), _num(w["noise_scale"])] for w in windows])
    print(f"short trials within {TARGET_FACTOR:g}x of the long run's: {check(met)}")
    out = default_out("noise_scale", args.quick) if args.out is None else args.out
    write_json(out, "noise_scale", {"workload": LM.entrypoint, "short_steps": short, "long_steps": long,
                                    "short_repeats": repeats},
               {"trials": rows, "long_windows": windows, "target_factor": TARGET_FACTOR, "met": met},
               machine, started)


def _num(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    main()
