"""A workload whose gradient noise scale is known.

Each sample is a point ``x`` of a fixed set around ``mu`` (spread ``sigma`` per coordinate); its loss is
``0.5 |w - x|^2``, so its gradient is ``w - x``. The optimizer never moves ``w`` (learning rate 0), so through
the whole run the true gradient is ``G = w - mean(x)`` and the per-sample covariance's trace is the points'
total variance: ``B_noise = tr(Sigma) / |G|^2`` exactly (:func:`true_noise_scale`). ``noise_scale`` sets it
(through ``mu``). Each sample also costs compute that leaves the loss alone (a layer whose output enters it
with weight zero, so its gradients are zero), and each step waits ``latency_s``: a bigger batch runs more
samples per second, as on a real model (``cost``: the layer's width, a multiple of 16).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

DIM, POINTS, SIGMA, COST = 16, 8192, 1.0, 128


def _points(noise_scale: float) -> torch.Tensor:
    mu = math.sqrt(DIM * SIGMA**2 / noise_scale / DIM)  # |G|^2 = DIM mu^2 = tr(Sigma) / noise_scale at w = 0
    generator = torch.Generator().manual_seed(0)
    return mu + SIGMA * torch.randn(POINTS, DIM, generator=generator)


def true_noise_scale(noise_scale: float) -> float:
    """The exact B_noise of the points ``build(noise_scale=...)`` trains on, at w = 0."""
    x = _points(noise_scale).double()
    mean = x.mean(0)
    return float(((x - mean) ** 2).sum(1).mean() / (mean**2).sum())


class Net(nn.Module):
    def __init__(self, cost: int = COST) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(DIM))
        self.cost = nn.Linear(cost, cost)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        work = self.cost(x.repeat(1, self.cost.in_features // DIM)).pow(2).mean()  # per-sample compute only
        return 0.5 * ((self.w - x) ** 2).sum(1).mean() + 0.0 * work


class Points(Dataset[torch.Tensor]):
    def __init__(self, noise_scale: float) -> None:
        self.x = _points(noise_scale)

    def __len__(self) -> int:
        return POINTS

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


def build(
    noise_scale: float = 32.0, latency_s: float = 0.0, base_batch_size: int = 16, cost: int = COST
) -> autotune.Workload:
    def optimizer(params: Any, lr: float) -> Any:
        return torch.optim.SGD(params, lr=0.0)  # w stays where |G|^2 is known

    def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        if latency_s:
            time.sleep(latency_s)
        return model(batch)

    return autotune.Workload(
        model=lambda: Net(cost), dataset=lambda: Points(noise_scale), loss=loss, optimizer=optimizer,
        base_lr=1e-3, base_batch_size=base_batch_size,
    )
