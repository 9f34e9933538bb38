"""A workload whose step is gradient synchronisation and little else, and which measures that synchronisation's
cost itself, in the same ranks and process group, every step.

``build(params, param_mb, reference)``: ``params`` parameters of ``param_mb`` MB of fp32 each (32 MB of
gradients a step by default), each used through one element: the backward's computation is writing the
gradients (a few ms), and the all-reduce of the rest is what the step waits for. With ``reference`` (a file),
each step's ``loss`` first all-reduces plain tensors of DDP's own bucket layout (the sizes DDP's logging data
reports, after its rebuild on the first steps), launched one after the other and awaited as DDP's reducer does,
each divided by the world size first as DDP's default hook does, and each rank appends ``{"step", "s",
"buckets"}`` to ``<reference>.rank<N>``: the known sync cost of that step, paired with the step that follows it
in the same window. That reference runs inside ``forward_backward_s`` (the step's computation), never inside
``sync_exposed_s``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

import autotune


class Grads(nn.Module):
    """``params`` large parameters, each read through its first element: large gradients, little compute."""

    def __init__(self, params: int, numel: int) -> None:
        super().__init__()
        self.ps = nn.ParameterList(nn.Parameter(torch.zeros(numel)) for _ in range(params))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(((p[:1] * x).sum() for p in self.ps), torch.zeros(()))


class Ones(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(1)


class Reference:
    """Times a plain all-reduce of DDP's bucket layout before each step (rank 0 writes it to ``path``)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self.step = 0
        self.buffers: list[torch.Tensor] = []

    def __call__(self, model: nn.Module) -> None:
        self.step += 1
        # the first steps: DDP's initial single bucket, rebuilt by the order of the gradients after them
        if self.path is None or not dist.is_initialized() or self.step <= 3 or not hasattr(model, "reducer"):
            return
        data = model._get_ddp_logging_data()  # type: ignore[operator]
        sizes = [int(b) // 4 for b in str(data.get("rebuilt_bucket_sizes") or data["bucket_sizes"]).split(",")]
        if [b.numel() for b in self.buffers] != sizes:
            self.buffers = [torch.ones(n) for n in sizes]
        world = dist.get_world_size()
        start = time.perf_counter()
        works = [dist.all_reduce(b.div_(world), async_op=True) for b in self.buffers]
        for work in works:
            assert work is not None
            work.wait()
        took = time.perf_counter() - start
        # every rank writes its own file: the same work on each, so no rank arrives later at the next collective
        with rank_file(self.path, dist.get_rank()).open("a") as f:
            f.write(json.dumps({"step": self.step, "s": took, "buckets": len(sizes)}) + "\n")


def rank_file(reference: Path, rank: int) -> Path:
    return reference.with_name(f"{reference.name}.rank{rank}")


def build(params: int = 8, param_mb: float = 4.0, reference: str = "") -> autotune.Workload:
    timed = Reference(reference)

    def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        timed(model)
        return model(batch[:1])

    def sgd(ps: Any, lr: float) -> torch.optim.Optimizer:
        return torch.optim.SGD(ps, lr=lr)

    return autotune.Workload(
        optimizer=sgd,
        model=lambda: Grads(params, int(param_mb * (1 << 20)) // 4),
        dataset=Ones,
        loss=loss,
        base_lr=1e-4,
        base_batch_size=1,
    )


def paired_ratios(windows: Any, reference: Path, world_size: int = 2) -> list[float]:
    """Per measured window: its exposed sync a step (the ranks' mean, ``step_anatomy_mean``) over the known
    cost of the same window's steps (the mean over its steps and the ranks of what build() wrote under
    ``reference``); windows without a reading are left out. Both sides are the ranks' mean: a rank that arrives
    late at a collective waits less in it, on both sides alike."""
    readings = [json.loads(line) for rank in range(world_size)
                for line in rank_file(reference, rank).read_text().splitlines()]
    ratios, first = [], 0
    for window in windows:
        steps = [r["s"] for r in readings if first < r["step"] <= window.step]
        first = window.step
        anatomy = window.step_anatomy_mean
        if steps and anatomy is not None and anatomy.sync_exposed_s is not None:
            ratios.append(anatomy.sync_exposed_s / (sum(steps) / len(steps)))
    return ratios


def buckets(params: int, param_mb: float, bucket_cap_mb: int) -> int:
    """DDP's buckets for ``params`` equal parameters after its rebuild: filled in order until one reaches the cap
    (an explicit cap applies to the first bucket too)."""
    per_bucket = max(1, -(-bucket_cap_mb // param_mb))  # parameters until the bucket reaches the cap
    return int(-(-params // per_bucket))
