"""Input-bound workloads: the default configuration (num_workers 0) against DataLoader workers, side by side.

The file-reading reference workloads (autotune.workloads.images: JPEG files decoded and augmented in
``__getitem__``; autotune.workloads.text_shards: tokenised shard files streamed through an IterableDataset)
are meant to be input-bound at the default configuration, as real pipelines are on many GPU nodes. This
script measures it with the real trial runner (the warm launcher, one rank): the default configuration
(num_workers 0, base batch, fp32) and the same with ``--workers`` DataLoader workers, ``--repeats`` trials
each, interleaved, all with the same trial length. Before the trials, in this process, one sample's
decoding + augmentation and one sample's training step (forward, backward, AdamW, one thread) are timed
apart: their ratio is the share of a num_workers-0 step spent loading data, roughly.

A third arm, the default with ``threads_per_rank: 1`` (the workers' arm gets one thread: ``auto`` leaves a
rank its cores less its workers), is the control: on a loaded machine a two-thread step suffers more than a
one-thread one, and the gain over this arm is the input pipeline's alone.

Reported: per arm the median throughput and spread ((max - min) / median), the median share of a step spent
waiting for data (the step anatomy: the issue's target has the default above 50%, the workers below 20%), the
gain (workers median / default median), the gain over the one-thread default, and the target (>= 1.5x on the
images workload), with the machine's CPU flags.

    python benchmarks/input_bound.py                           # images: about 4 minutes on 2 cores
    python benchmarks/input_bound.py --workload text_shards
    python benchmarks/input_bound.py --quick                   # smoke run: about a minute
    python benchmarks/input_bound.py --arg file_size=320 --chosen batch_size=64   # another balance, another arm
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
    RUNS,
    Trials,
    WorkloadRef,
    check,
    console,
    default_out,
    fmt,
    interleaved,
    machine_caption,
    machine_facts,
    median,
    print_table,
    spread,
    warn_if_busy,
    write_json,
)

GAIN_TARGET = 1.5
WORKLOADS = {
    "images": WorkloadRef("autotune.workloads.images:build"),
    "text_shards": WorkloadRef("autotune.workloads.text_shards:build"),
}
LIMITS = {"warmup": "fixed", "warmup_steps": 5, "max_steps": 40, "report_every": 5, "max_seconds": 300}
LIMITS_QUICK = {"warmup": "fixed", "warmup_steps": 2, "max_steps": 10, "report_every": 2, "max_seconds": 120}


def cpu_flags() -> list[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    return []


def key_values(pairs: list[str], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value read as YAML (``320`` an int, ``true`` a bool)."""
    import yaml

    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: {option} {pair!r}: expected KEY=VALUE")
        parsed[key] = yaml.safe_load(value)
    return parsed


def per_sample_costs(workload: WorkloadRef, samples: int) -> dict[str, float]:
    """Milliseconds per sample of loading (the dataset's decoding and augmentation) and of training (forward,
    backward and an AdamW step on a batch of the base size, one thread), measured one after the other here."""
    import itertools

    import torch
    from torch.utils.data import default_collate

    from autotune.workload import is_stream, load_workload

    built = load_workload(workload.entrypoint, dict(workload.args))
    dataset = built.dataset()  # writes the files on the first run (not timed)
    torch.set_num_threads(1)

    def load(n: int) -> list[Any]:
        if is_stream(dataset):
            return list(itertools.islice(iter(dataset), n))
        return [dataset[i % len(dataset)] for i in range(n)]

    load(8)
    started = time.perf_counter()
    items = load(samples)
    load_ms = (time.perf_counter() - started) / samples * 1e3
    batch = default_collate(items[: built.base_batch_size])
    model = built.model()
    optimizer = built.optimizer(model.parameters(), built.base_lr)

    def step() -> None:
        built.loss(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad()

    step()
    steps = 20  # ~0.3 s at the defaults: five steps read 0.4-1.7 ms a sample at load 4
    started = time.perf_counter()
    for _ in range(steps):
        step()
    train_ms = (time.perf_counter() - started) / (steps * built.base_batch_size) * 1e3
    return {
        "load_ms_per_sample": load_ms,
        "train_ms_per_sample": train_ms,
        "load_share": load_ms / (load_ms + train_ms),
    }


def measure(
    workload: WorkloadRef, arms: dict[str, dict[str, Any]], repeats: int, limits: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    labels = list(arms)
    with Trials(workload, RUNS / "input_bound" / workload.name) as trials:
        trials.run(trials.config({}), {"warmup_steps": 1, "max_steps": 3}, "warm", tag="warm-up")

        def run(label: str, repeat: int) -> dict[str, Any]:
            result = trials.run(trials.config(arms[label]), limits, "warm", tag=label)
            console.print(
                f"  {label:9s} #{repeat + 1}: {result.outcome.value}, {fmt(result.throughput_samples_s)} samples/s"
            )
            anatomy = result.step_anatomy  # the issue's diagnosis: input-bound above 50% data wait, not below 20%
            return {
                "outcome": result.outcome.value,
                "throughput_samples_s": result.throughput_samples_s,
                "data_wait_share": anatomy.data_wait_share if anatomy is not None else None,
                "wall_s": round(result.wall_s, 3),
            }

        runs = interleaved(labels, repeats, run)
    return dict(zip(labels, runs, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="images")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the second arm (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="trials per arm (default 5; quick: 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: short trials, 2 repeats")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a workload argument (YAML value), e.g. --arg file_size=320; repeatable")
    parser.add_argument("--chosen", action="append", default=[], metavar="KNOB=VALUE",
                        help="a knob of the workers' arm besides num_workers (YAML value), e.g. --chosen batch_size=64")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.monotonic()
    machine = {**machine_facts(), "cpu_flags": cpu_flags()}
    warn_if_busy(machine)
    workload = WORKLOADS[args.workload]
    workload = WorkloadRef(workload.entrypoint, {**workload.args, **key_values(args.arg, "--arg")})
    repeats = args.repeats or (2 if args.quick else 5)
    limits = LIMITS_QUICK if args.quick else LIMITS
    costs = per_sample_costs(workload, 32 if args.quick else 128)
    console.print(
        f"{args.workload}: loading {costs['load_ms_per_sample']:.2f} ms/sample, training "
        f"{costs['train_ms_per_sample']:.2f} ms/sample (one thread): loading {costs['load_share']:.0%}"
    )
    # The control: the default with one torch thread, as the workers' arm gets (threads_per_rank auto leaves a rank
    # its cores less its workers). On a loaded machine a two-thread step suffers more than a one-thread one; the
    # gain over this arm is the input pipeline's alone.
    arms = {
        "default": {},
        "default_1thread": {"threads_per_rank": 1},
        f"workers{args.workers}": {"num_workers": args.workers, **key_values(args.chosen, "--chosen")},
    }
    runs = measure(workload, arms, repeats, limits)
    stats: dict[str, dict[str, Any]] = {}
    for label, arm_runs in runs.items():
        values = [r["throughput_samples_s"] for r in arm_runs if r["outcome"] == "complete"]
        waits = [r["data_wait_share"] for r in arm_runs if r.get("data_wait_share") is not None]
        stats[label] = {"median": median(values), "spread": spread(values), "values": values,
                        "data_wait_share": median(waits) if waits else None, "runs": arm_runs}
    base, chosen = stats["default"]["median"], stats[f"workers{args.workers}"]["median"]
    gain = chosen / base if base and chosen else None
    control = stats["default_1thread"]["median"]
    gain_over_control = chosen / control if control and chosen else None
    target = GAIN_TARGET if args.workload == "images" else None
    rows = [[label, s["median"], s["spread"], " ".join(fmt(v) for v in s["values"]),
             "-" if s["data_wait_share"] is None else f"{s['data_wait_share']:.0%}"] for label, s in stats.items()]
    flags = set(machine["cpu_flags"])
    caption = (
        f"{machine_caption(machine)}; avx2 {'avx2' in flags}, avx512f {'avx512f' in flags}, amx {'amx_tile' in flags}"
    )
    print_table(
        f"{args.workload}: num_workers 0 against {args.workers} workers ({repeats} interleaved repeats)",
        ["arm", "median samples/s", "spread", "values", "data wait (median share of a step)"],
        rows,
        caption,
    )
    met = gain >= target if gain is not None and target is not None else None
    console.print(
        f"gain {fmt(gain)}x (target >= {target}x: {check(met)}); over the one-thread default {fmt(gain_over_control)}x"
    )
    settings = {
        "workload": args.workload,
        "entrypoint": workload.entrypoint,
        "args": dict(workload.args),
        "arms": arms,
        "repeats": repeats,
        "limits": limits,
        "quick": args.quick,
    }
    results = {
        "per_sample": costs,
        "arms": stats,
        "gain": gain,
        "gain_over_1thread_default": gain_over_control,
        "target": target,
        "met": met,
    }
    write_json(
        args.out or default_out(f"input_bound_{args.workload}", args.quick),
        "input_bound",
        settings,
        results,
        machine,
        started,
    )


if __name__ == "__main__":
    main()
