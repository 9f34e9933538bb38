"""Workloads whose step time goes where the test says: to the data (each sample sleeps ``item_ms`` in
``__getitem__``) or to the gradient synchronisation (``layers`` square layers of ``width``: large gradients;
``batch`` rows of compute)."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune


class Slow(Dataset[torch.Tensor]):
    """Samples that cost ``item_ms`` each to make."""

    def __init__(self, n: int, width: int, item_ms: float) -> None:
        self.n, self.width, self.item_s = n, width, item_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.item_s:
            time.sleep(self.item_s)
        return torch.full((self.width,), float(i % 7) / 7)


def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).pow(2).mean()


def sgd(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr)  # one pass over the parameters: little optimizer time


def build(item_ms: float = 0.0, width: int = 16, layers: int = 1) -> autotune.Workload:
    return autotune.Workload(
        optimizer=sgd,
        model=lambda: nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))),
        dataset=lambda: Slow(4096, width, item_ms),
        loss=loss,
        base_lr=1e-4,
        base_batch_size=8,
    )
