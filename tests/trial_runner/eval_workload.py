"""A workload whose held-out loss is known exactly: on the eval set the loss of a batch is the mean of its
inputs, so the held-out loss is the mean of 0..N-1 whatever the model learned and however the set is split
over ranks (training gives the model a gradient; evaluation adds it with weight zero)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune


class Values(Dataset[torch.Tensor]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i)])


def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    if model.training:
        return (out - 1.0).pow(2).mean()
    return batch.mean() + 0.0 * out.mean()


def build(eval_samples: int = 10) -> autotune.Workload:
    return autotune.Workload(
        model=lambda: nn.Linear(1, 1), dataset=lambda: Values(256), loss=loss,
        eval_dataset=(lambda: Values(eval_samples)) if eval_samples else None,
        base_lr=1e-3, base_batch_size=4,
    )
