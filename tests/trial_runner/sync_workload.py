"""A workload whose step is gradient synchronisation and little else, and which measures what that
synchronisation costs its steps itself, in the same ranks, seconds apart.

``build(params, param_mb, reference, warmup, block, work)``: ``params`` parameters of ``param_mb`` MB of fp32
each (32 MB of gradients a step by default), each used through one element: the backward's computation is
writing the gradients (a few ms), and the all-reduce of the rest is what the step waits for. ``work`` > 0
adds a ``work`` x ``work`` matrix product to the backward after each parameter's gradient: computation for
the earlier buckets' all-reduces to run beside, on the same cores. The optimizer zeroes the
gradients in place (it ignores ``set_to_none``), so they stay DDP's bucket views (``gradient_as_bucket_view``)
and DDP copies nothing into its buckets: a synchronising step does the same computation as one without, plus
the communication.

With ``reference`` (a file), the steps after the first ``warmup`` alternate in blocks of ``block`` steps
(a trial's reporting window) between DDP's synchronising steps and steps under ``no_sync()`` (the same
forward, backward and optimizer step, no all-reduce), and each rank appends ``{"step", "s", "sync",
"buckets"}`` to ``<reference>.rank<N>`` for every step: its wall-clock period (from its ``loss`` call to the
next step's, so the data, the backward, the optimizer step and the loop's own work) and whether it
synchronised. The known sync cost of a synchronising window is its steps' mean period less that of the
neighbouring windows without synchronisation: what the communication adds to a step, hidden parts excluded —
what exposed communication means.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

import autotune


class Busy(torch.autograd.Function):
    """The identity, whose backward first multiplies a ``work`` x ``work`` matrix by itself: computation in
    the backward between one parameter's gradient and the next, for the all-reduces to overlap."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, work: int) -> torch.Tensor:
        ctx.work = work
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        a = torch.full((ctx.work, ctx.work), 1e-3)
        torch.mm(a, a)
        return grad, None


class Grads(nn.Module):
    """``params`` large parameters, each read through its first element: large gradients, little compute
    (``work`` > 0: a matrix product in the backward after each parameter's gradient)."""

    def __init__(self, params: int, numel: int, work: int = 0) -> None:
        super().__init__()
        self.ps = nn.ParameterList(nn.Parameter(torch.zeros(numel)) for _ in range(params))
        self.work = work

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        terms = ((p[:1] * x).sum() for p in self.ps)
        if self.work:
            terms = (Busy.apply(t, self.work) for t in terms)
        return sum(terms, torch.zeros(()))


class Ones(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.ones(1)


class InPlaceSGD(torch.optim.SGD):
    """SGD whose ``zero_grad`` zeroes the gradients in place: they stay DDP's bucket views across steps."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=False)


class Reference:
    """Alternates synchronising blocks of steps with ``no_sync()`` ones and writes each step's period."""

    def __init__(self, path: str, warmup: int, block: int) -> None:
        self.path = Path(path) if path else None
        self.warmup, self.block = warmup, block
        self.step = 0
        self.last: tuple[float, bool] | None = None  # the previous step's start and whether it synchronised
        self.buckets = 0

    def syncs(self, step: int) -> bool:
        return step <= self.warmup or (step - self.warmup - 1) // self.block % 2 == 0

    def __call__(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        self.step += 1
        if self.path is None or not dist.is_initialized() or not hasattr(model, "no_sync"):
            return contextlib.nullcontext()
        now = time.perf_counter()
        if self.last is not None:
            if not self.buckets and self.step > 3:  # DDP's layout after its rebuild on the first steps
                data = model._get_ddp_logging_data()  # type: ignore[operator]
                self.buckets = len(str(data.get("rebuilt_bucket_sizes") or data["bucket_sizes"]).split(","))
            record = {"step": self.step - 1, "s": now - self.last[0], "sync": self.last[1], "buckets": self.buckets}
            # every rank writes its own file: the same work on each, so no rank arrives later at a collective
            with rank_file(self.path, dist.get_rank()).open("a") as f:
                f.write(json.dumps(record) + "\n")
        sync = self.syncs(self.step)
        self.last = (now, sync)
        return contextlib.nullcontext() if sync else model.no_sync()  # type: ignore[operator]


def rank_file(reference: Path, rank: int) -> Path:
    return reference.with_name(f"{reference.name}.rank{rank}")


def build(params: int = 8, param_mb: float = 4.0, reference: str = "", warmup: int = 8,
          block: int = 4, work: int = 0) -> autotune.Workload:
    timed = Reference(reference, warmup, block)

    def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        with timed(model):
            return model(batch[:1])

    def sgd(ps: Any, lr: float) -> torch.optim.Optimizer:
        return InPlaceSGD(ps, lr=lr)

    return autotune.Workload(
        optimizer=sgd,
        model=lambda: Grads(params, int(param_mb * (1 << 20)) // 4, work),
        dataset=Ones,
        loss=loss,
        base_lr=1e-4,
        base_batch_size=1,
    )


def readings(reference: Path, world_size: int = 2) -> list[dict[str, Any]]:
    return [json.loads(line) for rank in range(world_size)
            for line in rank_file(reference, rank).read_text().splitlines()]


def paired_costs(windows: Any, reference: Path, world_size: int = 2) -> list[tuple[float, float]]:
    """Per synchronising measured window: (its exposed sync a step, the ranks' mean ``step_anatomy_mean``;
    its known sync cost a step: the mean period of its steps, over both ranks, less the mean period of the
    steps of its neighbouring windows that did not synchronise). Windows without both neighbours' readings,
    or that mix the two kinds of step, are left out. Both sides are the ranks' mean."""
    steps = readings(reference, world_size)
    spans, first = [], 0
    for window in windows:
        inside = [r for r in steps if first < r["step"] <= window.step]
        kinds = {r["sync"] for r in inside}
        spans.append((window, statistics.fmean(r["s"] for r in inside) if len(kinds) == 1 else None,
                      kinds.pop() if len(kinds) == 1 else None))
        first = window.step
    pairs = []
    for before, (window, period, sync), after in zip(spans, spans[1:], spans[2:], strict=False):
        anatomy = window.step_anatomy_mean
        if (not sync or anatomy is None or anatomy.sync_exposed_s is None or before[2] is not False
                or after[2] is not False or before[1] is None or after[1] is None or period is None):
            continue
        pairs.append((anatomy.sync_exposed_s, period - (before[1] + after[1]) / 2))
    return pairs


def sync_steps(steps: int, warmup: int, block: int) -> int:
    """How many of a trial's ``steps`` synchronise under :func:`build`'s alternation."""
    return sum(Reference("", warmup, block).syncs(step) for step in range(1, steps + 1))


def buckets(params: int, param_mb: float, bucket_cap_mb: int) -> int:
    """DDP's buckets for ``params`` equal parameters after its rebuild: filled in order until one reaches the cap
    (an explicit cap applies to the first bucket too)."""
    per_bucket = max(1, -(-bucket_cap_mb // param_mb))  # parameters until the bucket reaches the cap
    return int(-(-params // per_bucket))
