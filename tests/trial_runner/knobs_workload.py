"""A small residual MLP for the knob tests: its Blocks are the checkpointing and FSDP unit.

``build(width=..., depth=...)``; at width 1024 and depth 8 (8.4 M parameters, 34 MB) the optimizer state
and gradients of a replicated model are large enough for sharding to show in a rank's peak memory.
"""

from __future__ import annotations

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
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.inp(x)))


class Points(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return x, x.sum(0, keepdim=True)


def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x).float(), y)


def build(width: int = 32, depth: int = 2, samples: int = 2048, shard_modules: bool = True) -> autotune.Workload:
    return autotune.Workload(
        model=lambda: Net(width, depth),
        dataset=lambda: Points(samples),
        loss=loss,
        base_lr=1e-3,
        base_batch_size=32,
        checkpoint_modules=(Block,),
        shard_modules=None if shard_modules else (),
    )
