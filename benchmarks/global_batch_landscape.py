"""Record a landscape at held global batches: every feasible split batch_size x grad_accum x world_size of each
global batch, by DataLoader workers, each configuration measured once as a short real trial of the quickstart MLP.

The grid is what a study with ``constraints.global_batch`` searches: per-rank batch 8..256, grad_accum
{1, 2, 4, 8}, world_size {1, 2} and num_workers {0, 1, 2}, at global batches 64 and 256 (the feasible splits come
from the search space itself, ``SearchSpace.splits``): 7 and 8 splits, 45 configurations. Measured in a seeded
random order (a drifting machine favours no corner), with the default (warm) launcher; saved per configuration in
benchmarks/landscape.py's format (the knobs, the TrialConfig, the outcome, the throughput, every window), so that
studies holding either global batch can be replayed against it and their fastest split compared with the grid's.

    python benchmarks/global_batch_landscape.py            # 45 configurations, about 5 minutes on 2 cores
    python benchmarks/global_batch_landscape.py --quick    # smoke run: global batch 32, 3 splits x 1 worker count
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    default_out,
    machine_caption,
    machine_facts,
    make_spec,
    pct,
    print_table,
    study_document,
    warn_if_busy,
    write_json,
)
from _landscapes import measure_once

SEARCH: dict[str, Any] = {
    "batch_size": {"low": 8, "high": 256}, "grad_accum": {"choices": [1, 2, 4, 8]},
    "world_size": {"choices": [1, 2]}, "num_workers": {"low": 0, "high": 2},
}
SEARCH_QUICK: dict[str, Any] = {
    "batch_size": {"low": 8, "high": 32}, "grad_accum": {"choices": [1, 2]}, "world_size": {"choices": [1, 2]},
    "num_workers": 0,
}
HELD = (64, 256)
HELD_QUICK = (32,)
LIMITS = {"warmup_steps": 3, "max_steps": 15, "report_every": 3, "max_seconds": 90}
LIMITS_QUICK = {"warmup_steps": 2, "max_steps": 6, "report_every": 2, "max_seconds": 60}


def held_space(held: tuple[int, ...], search: dict[str, Any], limits: dict[str, Any]) -> Any:
    """The SearchSpace of a study holding ``held``, built as the tuner builds it (so configuration keys match)."""
    from autotune.search_space import study_space

    document = study_document("global-batch-landscape", MLP, search, limits)
    document["constraints"] = {"global_batch": {"choices": list(held)}}
    return study_space(make_spec(document))


def configurations(space: Any) -> list[dict[str, Any]]:
    """Every feasible split by every worker count of ``space``, as knob dicts."""
    workers = space.knobs["num_workers"]
    counts = range(workers.low, workers.high + 1) if hasattr(workers, "low") else [workers.value]
    return [{**split._asdict(), "num_workers": n} for split in space.splits for n in counts]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: global batch 32, short trials")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/global_batch_landscape.json)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the measuring order")
    args = parser.parse_args(argv)
    held, search, limits = (HELD_QUICK, SEARCH_QUICK, LIMITS_QUICK) if args.quick else (HELD, SEARCH, LIMITS)
    out = args.out or default_out("global_batch_landscape", args.quick)

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    space = held_space(held, search, limits)
    configs = configurations(space)
    measured = measure_once(space, configs, limits, args.seed, "global_batch_landscape")
    summary = _summary(measured, held)
    _print(measured, held, limits, machine)
    write_json(
        out,
        "global_batch_landscape",
        {"quick": args.quick, "seed": args.seed, "workload": MLP.entrypoint, "workload_args": dict(MLP.args),
         "global_batches": list(held), "search_space": search, "limits": limits, "launcher": "warm",
         "splits": [s.label for s in space.splits]},
        {"summary": summary, "configs": measured},
        machine,
        started,
    )


def _summary(measured: list[dict[str, Any]], held: tuple[int, ...]) -> dict[str, Any]:
    """Per global batch: the fastest configuration, the one-rank no-accumulation split's best, and how many are
    within 3% of the fastest (the target of a replayed study)."""
    out: dict[str, Any] = {}
    for total in held:
        rows = [r for r in measured if r["config"]["global_batch"] == total]
        done = [r for r in rows if r["outcome"] == "complete" and r["throughput_samples_s"]]
        best = max(done, key=lambda r: r["throughput_samples_s"]) if done else None
        top = best["throughput_samples_s"] if best else None
        plain = [r for r in done if r["knobs"]["world_size"] == 1 and r["knobs"]["grad_accum"] == 1]
        out[str(total)] = {
            "configs": len(rows), "complete": len(done),
            "best": None if best is None else {"label": best["label"], "throughput_samples_s": top},
            "best_one_rank_no_accumulation": max((r["throughput_samples_s"] for r in plain), default=None),
            "within_3_percent_of_best": sum(1 for r in done if top and r["throughput_samples_s"] >= 0.97 * top),
        }
    return out


def _print(measured: list[dict[str, Any]], held: tuple[int, ...], limits: dict[str, Any], machine: Any) -> None:
    for total in held:
        rows = sorted((r for r in measured if r["config"]["global_batch"] == total),
                      key=lambda r: -(r["throughput_samples_s"] or 0.0))
        top = rows[0]["throughput_samples_s"] if rows else None
        print_table(
            f"Global batch {total}: {len(rows)} configurations (split x workers) of {MLP.entrypoint}, one trial each "
            f"(warm-up {limits['warmup_steps']}, {limits['max_steps']} steps)",
            ["#", "batch_size x grad_accum x world_size", "workers", "outcome", "samples/s", "of best", "wall s"],
            [[i + 1, f"{r['knobs']['batch_size']}x{r['knobs']['grad_accum']}x{r['knobs']['world_size']}",
              r["knobs"]["num_workers"], r["outcome"], r["throughput_samples_s"],
              pct(r["throughput_samples_s"] / top) if top and r["throughput_samples_s"] else None, r["wall_s"]]
             for i, r in enumerate(rows)],
            caption=machine_caption(machine),
        )


if __name__ == "__main__":
    main()
