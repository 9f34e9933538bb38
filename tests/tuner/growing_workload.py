"""A tiny workload whose peak memory grows with the batch: each sample becomes 2 MB of activations kept for
backward (about 12 MB a sample at peak on the CPU, measured), so a batch of 32 needs ~300 MB more than one of 4."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

WIDE = 2048  # each 256-wide sample is repeated this many times: 2 MB of float32 a sample


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.head = nn.Linear(256, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.repeat(1, WIDE) * self.w  # kept for backward: memory linear in the batch
        return wide.square().mean() + self.head(x).mean()


class Inputs(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((256,), float(i % 5) / 5)


def build() -> autotune.Workload:
    def optimizer(params: Any, lr: float) -> Any:
        return torch.optim.Adam(params, lr=lr)

    return autotune.Workload(
        model=Net, dataset=Inputs, loss=lambda model, batch: model(batch), optimizer=optimizer,
        base_lr=0.01, base_batch_size=4,
    )
