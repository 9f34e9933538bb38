"""The training loop the peers of ``peer_ray.py`` run in each rank: a plain DDP loop over an autotune Workload.

This is what a user of Ray Tune or of a hand-written Optuna study writes for the quickstart's workload:
the same ``Workload`` objects autotune trains (model, dataset, loss, optimizer, base_lr), the same knobs
applied the same way (per-rank micro-batch, DataLoader workers and prefetch, bf16 autocast, learning-rate
scaling, ranks under DDP on gloo, intra-op threads as autotune's ``threads_per_rank: auto``), and the same
throughput definition: samples per second over whole wall-clock steps after the warm-up, data loading
included, windows timed by the wall clock (each boundary's small reduction included), the slowest rank's
time per window.

Only torch and the workload are imported here, so that the do-it-yourself peer's cold ``torchrun`` pays
what a user's own training script would pay, nothing of autotune's tuner:

    python -m torch.distributed.run --standalone --nproc-per-node=2 benchmarks/_peer_train.py CONFIG.json

runs one trial from a config file and writes ``result.json`` (and ``metrics.jsonl``, one line a window)
beside it. ``peer_ray.py`` calls :func:`train` inside Ray Train's workers for the Ray Tune peer.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

Report = Callable[[dict[str, Any]], None]


def load_workload(entrypoint: str, args: Mapping[str, Any]) -> Any:
    """``module:function`` with keyword arguments, as a study file names the workload."""
    module, _, function = entrypoint.partition(":")
    return getattr(importlib.import_module(module), function)(**dict(args))


def learning_rate(base_lr: float, base_batch_size: int, global_batch: int, scaling: str) -> float:
    """``lr = base_lr * f(global_batch / base_batch_size)`` with f = 1, x or sqrt(x): autotune's rule."""
    x = global_batch / base_batch_size
    factor = {"none": 1.0, "linear": x, "sqrt": math.sqrt(x)}[scaling]
    return base_lr * factor


def window_of(warmup_steps: int, max_steps: int, report_every: int | None) -> int:
    """Steps per reporting window: the study's ``report_every``, else about 8 windows a trial (autotune's)."""
    return report_every if report_every else max(1, (max_steps - warmup_steps) // 8)


def _batches(loader: Any, sampler: Any) -> Iterator[Any]:
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train(config: Mapping[str, Any], rank: int, world_size: int, wrap: Callable[[torch.nn.Module], Any],
          report: Report) -> dict[str, Any]:
    """One rank's trial. ``config``: ``knobs`` (batch_size, num_workers, prefetch_factor, amp, lr_scaling,
    world_size), ``workload`` ({entrypoint, args}), ``warmup_steps``, ``max_steps``, ``window`` and
    ``started_at`` (epoch seconds when the trial was launched). The process group is up. ``wrap`` turns the
    model into what trains (DDP, or Ray's ``prepare_model``); ``report`` gets every measured window on every
    rank, the same numbers everywhere. Returns the last window's record."""
    from torch.utils.data import DataLoader, DistributedSampler

    knobs = dict(config["knobs"])
    batch_size = int(knobs.get("batch_size", 64))
    num_workers = int(knobs.get("num_workers", 0))
    amp = str(knobs.get("amp", "off"))
    # threads_per_rank: auto, as autotune applies it: this rank's share of the cores less its workers.
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, cores // world_size - num_workers))

    workload = load_workload(config["workload"]["entrypoint"], config["workload"]["args"])
    torch.manual_seed(0)
    model = wrap(workload.model())
    global_batch = batch_size * world_size
    lr = learning_rate(workload.base_lr, workload.base_batch_size, global_batch, str(knobs.get("lr_scaling", "none")))
    optimizer = workload.optimizer(model.parameters(), lr)
    dataset = workload.dataset()
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0, drop_last=True
    )
    extra: dict[str, Any] = {}
    if num_workers > 0:
        extra = {"prefetch_factor": int(knobs.get("prefetch_factor") or 2), "persistent_workers": True}
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers, drop_last=True,
                        collate_fn=workload.collate_fn, **extra)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if amp == "bf16" else contextlib.nullcontext

    warmup, max_steps, window = int(config["warmup_steps"]), int(config["max_steps"]), int(config["window"])
    started_at = float(config["started_at"])
    batches = _batches(loader, sampler)
    training_started = time.time()
    first_step_at: float | None = None
    mark = time.perf_counter()
    measured_s = 0.0
    measured_samples = 0
    window_steps = 0
    last: dict[str, Any] = {}
    for step in range(1, max_steps + 1):
        with autocast():
            loss = workload.loss(model, next(batches))
        loss.float().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 1:
            first_step_at = time.time()
        measuring = step > warmup
        window_steps += measuring
        if not (step in (warmup, max_steps) or (measuring and (step - warmup) % window == 0)):
            continue
        now = time.perf_counter()
        elapsed, mark = (now - mark if measuring else 0.0), now
        slowest = torch.tensor([elapsed])
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if not measuring or window_steps == 0:
            continue
        measured_s += float(slowest.item())
        measured_samples += window_steps * global_batch
        window_steps = 0
        last = {
            "step": step,
            "throughput_samples_s": measured_samples / measured_s if measured_s > 0 else 0.0,
            "loss": float(loss.detach().float().item()),
            "training_span_s": time.time() - training_started,
            "time_to_first_step_s": (first_step_at or time.time()) - started_at,
        }
        report(last)
    return last


def main(config_path: str) -> int:
    """The do-it-yourself peer's rank, under torchrun: trains one trial from ``config_path``; rank 0 writes
    metrics.jsonl (a line a window) and result.json beside it."""
    path = Path(config_path)
    config = json.loads(path.read_text())
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    metrics = path.with_name("metrics.jsonl")

    def wrap(model: torch.nn.Module) -> Any:
        if world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)

    def report(record: dict[str, Any]) -> None:
        if rank == 0:
            with metrics.open("a") as f:
                f.write(json.dumps(record) + "\n")

    try:
        last = train(config, rank, world_size, wrap, report)
        if rank == 0:
            path.with_name("result.json").write_text(json.dumps(last))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
