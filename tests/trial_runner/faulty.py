"""A tiny workload that can fail in every way a real one does, for the trial-runner tests.

``build(fault=..., rank=..., at_step=...)``: the fault fires inside ``loss`` on the given rank once that
many loss calls have happened (``rank=-1``: every rank).
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self, width: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.inp(x)))


class Points(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int, work: int, fault: str, rank: int) -> None:
        self.n, self.work, self.fault, self.rank = n, work, fault, rank

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(8, generator=g)
        for _ in range(self.work):  # a little CPU per sample
            x = torch.tanh(x * 1.01)
        if self.fault == "worker_dies" and i % 7 == 3 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return x, x.sum(0, keepdim=True)


class FaultyLoss:
    def __init__(self, fault: str, rank: int, at_step: int, grow_mb: int) -> None:
        self.fault, self.rank, self.at_step, self.grow_mb = fault, rank, at_step, grow_mb
        self.calls = 0
        self.hoard: list[bytearray] = []

    def __call__(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(model(x).float(), y)
        self.calls += 1
        me = int(os.environ.get("RANK", "0"))
        if self.fault != "none" and self.calls >= self.at_step and self.rank in (-1, me):
            if self.fault == "raise":
                raise RuntimeError(f"injected failure on rank {me}")
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "nan":
                loss = loss * float("nan")
            if self.fault == "memory":
                self.hoard.append(bytearray(self.grow_mb * 2**20))
                for block in self.hoard[-1:]:
                    block[:: 4096] = b"x" * len(block[::4096])
            if self.fault == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.fault == "slow":
                time.sleep(0.05)
            if self.fault == "ramp":  # a slow start that keeps speeding up: each step 20% less sleep
                time.sleep(0.4 * 0.8 ** self.calls)
        return loss


def build(
    fault: str = "none",
    rank: int = -1,
    at_step: int = 3,
    samples: int = 4096,
    work: int = 0,
    grow_mb: int = 64,
    width: int = 32,
) -> autotune.Workload:
    return autotune.Workload(
        model=lambda: Net(width),
        dataset=lambda: Points(samples, work, fault, rank),
        loss=FaultyLoss(fault, rank, at_step, grow_mb),
        base_lr=1e-2,
        base_batch_size=32,
        checkpoint_modules=(Block,),
    )
