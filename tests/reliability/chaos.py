"""A tiny workload whose knob values decide how it fails, so one grid study visits every fault.

The fault is chosen by the per-rank batch size the trial was given (``x.shape[0]`` in ``loss``), and the
NaN by the learning rate it was given (``optimizer(params, lr)``), so a search space of
``batch_size: {choices: [...]}`` x ``world_size`` x ``lr_scaling: linear`` visits each one:

===========  ===========================================================================================
batch size   what the last rank does from its ``at_step``-th loss call on
===========  ===========================================================================================
8, other    nothing (a healthy run)
10           raises RuntimeError (its message bracketed like a native library's)
12           hangs: sleeps, so with two ranks its peer waits inside DDP's gradient all-reduce
14           grows its memory by ``grow_mb`` a step, up to ``memory_cap_mb``, slowly (the monitor sees it)
18           kills itself with SIGSEGV
20           SIGKILLs its own DataLoader worker (as the kernel's OOM killer would); needs num_workers >= 1
any          the loss is NaN on every rank when the learning rate exceeds ``nan_above_lr``
===========  ===========================================================================================

``sleep_s``: every loss call sleeps this long (a slower, still healthy trial); with ``sleep_while``, only while
that file exists (a test makes a study's trials short again by deleting it).
``env_dump``: rank 0 writes its ``os.environ`` as JSON to this path (what a trial's processes can see).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

FAULTS = {8: "none", 10: "raise", 12: "hang", 14: "memory", 18: "segfault", 20: "worker_dies"}


class Points(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return x, x.sum(0, keepdim=True)


class Chaos:
    """``loss`` and ``optimizer`` of the workload; the optimizer tells it the learning rate."""

    def __init__(self, at_step: int, nan_above_lr: float, grow_mb: int, memory_cap_mb: int,
                 env_dump: str | None = None, sleep_s: float = 0.0, sleep_while: str | None = None) -> None:
        self.at_step, self.nan_above_lr, self.sleep_s = at_step, nan_above_lr, sleep_s
        self.sleep_while = sleep_while
        self.grow_mb, self.memory_cap_mb = grow_mb, memory_cap_mb
        self.env_dump = env_dump
        self.lr = 0.0
        self.calls = 0
        self.hoard: list[bytearray] = []

    def optimizer(self, params: object, lr: float) -> torch.optim.Optimizer:
        self.lr = lr
        return torch.optim.SGD(params, lr=lr)  # type: ignore[arg-type]

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(model(x).float(), y)
        self.calls += 1
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        if self.sleep_s and (self.sleep_while is None or os.path.exists(self.sleep_while)):
            time.sleep(self.sleep_s)
        if self.calls == 1 and rank == 0 and self.env_dump:
            Path(self.env_dump).write_text(json.dumps(dict(os.environ)))
        if self.lr > self.nan_above_lr:
            return loss * float("nan")
        fault = FAULTS.get(int(x.shape[0]), "none")
        if fault == "none" or self.calls < self.at_step or rank != world - 1:
            return loss
        if fault == "raise":
            # bracketed like the native errors of gloo or NCCL ("[/path/pair.cc:553] Connection closed ...")
            raise RuntimeError(f"[/src/chaos.cc:{rank}] injected failure on rank {rank}")
        if fault == "hang":
            time.sleep(3600)
        if fault == "memory":
            if len(self.hoard) * self.grow_mb < self.memory_cap_mb:
                block = bytearray(self.grow_mb * 2**20)
                block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not just reserved
                self.hoard.append(block)
            time.sleep(0.2)  # give the monitor time to see it
        if fault == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "worker_dies" and self.calls == self.at_step:
            for child in psutil.Process().children(recursive=True):
                child.kill()
        return loss


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def build(
    at_step: int = 3,
    nan_above_lr: float = 0.06,
    grow_mb: int = 128,
    memory_cap_mb: int = 4096,
    samples: int = 2048,
    width: int = 16,
    env_dump: str | None = None,
    sleep_s: float = 0.0,
    sleep_while: str | None = None,
) -> autotune.Workload:
    chaos = Chaos(at_step, nan_above_lr, grow_mb, memory_cap_mb, env_dump, sleep_s, sleep_while)
    return autotune.Workload(
        model=lambda: Net(width),
        dataset=lambda: Points(samples),
        loss=chaos.loss,
        optimizer=chaos.optimizer,
        base_lr=0.01,
        base_batch_size=8,
    )


def build_raises() -> autotune.Workload:
    raise RuntimeError("the dataset folder /data/imagenet is missing")


def build_wrong_type() -> dict[str, object]:
    return {"model": None}


def build_tiny_dataset() -> autotune.Workload:
    """Four samples: fewer than one batch of 8."""
    return build(samples=4)


def build_no_parameters() -> autotune.Workload:
    chaos = Chaos(3, 1e9, 1, 1)
    return autotune.Workload(
        model=lambda: nn.Identity(),
        dataset=lambda: Points(256),
        loss=lambda model, batch: nn.functional.mse_loss(model(batch[0]).sum(1, keepdim=True), batch[1]),
        optimizer=chaos.optimizer,
        base_lr=0.01,
        base_batch_size=8,
    )


def build_model_raises() -> autotune.Workload:
    """The model factory fails in the rank (the workload itself imports fine)."""

    def model() -> nn.Module:
        raise RuntimeError("checkpoint /weights/model.pt not found")

    return autotune.Workload(model=model, dataset=lambda: Points(256), loss=lambda m, b: m(b[0]).sum())


def build_loss_returns_float() -> autotune.Workload:
    """``loss`` returns a Python float instead of a scalar tensor."""
    return autotune.Workload(
        model=lambda: Net(16), dataset=lambda: Points(256),
        loss=lambda model, batch: float(nn.functional.mse_loss(model(batch[0]), batch[1])),
    )
