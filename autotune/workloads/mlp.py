"""An MLP learning a fixed random teacher, with a per-sample transform that costs real CPU time.

Every item is generated from ``(seed, index)`` alone: a standard-normal raw vector goes through
``transform_cost`` rounds of feature mixing (a matrix-vector product, tanh, re-normalisation), and its
targets are the outputs of a fixed random two-layer "teacher" network applied to the mixed features.
The transform runs in ``__getitem__``, so with ``num_workers=0`` it is a large share of every training
step and DataLoader workers and prefetching change throughput, as they would with a real input pipeline.

Entry point: ``autotune.workloads.mlp:build``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.workload import Workload
from autotune.workloads._common import batch_on, check_sizes, seeded_model

__all__ = ["MLP", "Block", "TeacherDataset", "build"]

_TEACHER_HIDDEN = 64


class TeacherDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``samples`` (features, targets) pairs; item ``i`` depends only on ``seed`` and ``offset + i``.

    Args:
        samples: number of items.
        input_dim: length of the feature vector.
        output_dim: number of regression targets.
        transform_cost: rounds of feature mixing per item (each a few small numpy ops; 0: none).
        seed: fixes the mixing matrices, the teacher and every item.
        offset: index of the first item; a held-out split uses ``offset=samples``.
    """

    def __init__(
        self, samples: int, input_dim: int, output_dim: int, transform_cost: int, seed: int, offset: int = 0
    ) -> None:
        self.samples = samples
        self.input_dim = input_dim
        self.seed = seed
        self.offset = offset
        rng = np.random.default_rng([seed, 0])
        self.mixing = rng.standard_normal((transform_cost, input_dim, input_dim)) / math.sqrt(input_dim)
        self.teacher_in = rng.standard_normal((_TEACHER_HIDDEN, input_dim)) * (2.0 / math.sqrt(input_dim))
        self.teacher_out = rng.standard_normal((output_dim, _TEACHER_HIDDEN)) / math.sqrt(_TEACHER_HIDDEN)
        # Scale targets to unit variance over a fixed probe set, so losses compare across sizes. The probe is
        # mixed as one matrix (every rank of every trial builds this dataset: item by item it took 0.1 s).
        raw = np.stack([np.random.default_rng([seed, 2, k]).standard_normal(input_dim) for k in range(256)])
        probe = self._mix(raw.T).T
        self.target_scale = 1.0 / float(self._teacher(probe.T).std() + 1e-6)

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.samples:
            raise IndexError(f"index {index} out of range for {self.samples} samples")
        x = self._features(np.random.default_rng([self.seed, 1, self.offset + index]))
        y = self._teacher(x) * self.target_scale
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))

    def _features(self, rng: np.random.Generator) -> np.ndarray:
        return self._mix(rng.standard_normal(self.input_dim))

    def _mix(self, x: np.ndarray) -> np.ndarray:
        """The feature mixing of one raw vector, or of the columns of a matrix (each column on its own)."""
        for mix in self.mixing:
            x = x + np.tanh(mix @ x)
            x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)
        return x

    def _teacher(self, x: np.ndarray) -> np.ndarray:
        return self.teacher_out @ np.tanh(self.teacher_in @ x)


class Block(nn.Module):
    """A pre-norm residual MLP block, ``x + W2 gelu(W1 norm(x))``: the unit activation checkpointing wraps."""

    def __init__(self, dim: int, expansion: int = 2) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, expansion * dim)
        self.fc2 = nn.Linear(expansion * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class MLP(nn.Module):
    """Input projection, ``depth`` residual :class:`Block` s of width ``hidden``, a norm and a linear head."""

    def __init__(self, input_dim: int, hidden: int, depth: int, output_dim: int) -> None:
        super().__init__()
        self.inp = nn.Linear(input_dim, hidden)
        self.blocks = nn.Sequential(*(Block(hidden) for _ in range(depth)))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.inp(x))))


def mse_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean squared error of one batch, computed in float32 (also under bf16 autocast)."""
    x, y = batch_on(model, batch)
    return F.mse_loss(model(x).float(), y.float())


def build(
    hidden: int = 256,
    depth: int = 4,
    input_dim: int = 64,
    output_dim: int = 8,
    samples: int = 20_000,
    transform_cost: int = 16,
    seed: int = 0,
) -> Workload:
    """The MLP reference workload.

    Args:
        hidden: width of the residual blocks.
        depth: number of residual :class:`Block` s (the activation-checkpointing unit).
        input_dim: features per sample.
        output_dim: regression targets per sample.
        samples: items in the training set (the held-out set has ``samples // 10``, at least 1).
        transform_cost: rounds of per-sample feature mixing in ``__getitem__`` (about 10 us each on one
            core); the default (about 170 us per item) makes data loading more than half of a step at the
            base batch when ``num_workers`` is 0.
        seed: fixes the data, the teacher and the initial weights.
    """
    sizes = {"hidden": hidden, "depth": depth, "input_dim": input_dim, "output_dim": output_dim, "samples": samples,
             "transform_cost": transform_cost, "seed": seed}
    check_sizes("mlp", sizes, {"transform_cost": 0, "seed": 0})
    data = functools.partial(
        TeacherDataset, input_dim=input_dim, output_dim=output_dim, transform_cost=transform_cost, seed=seed
    )
    return Workload(
        model=functools.partial(seeded_model, seed, MLP, input_dim, hidden, depth, output_dim),
        dataset=functools.partial(data, samples),
        loss=mse_loss,
        base_lr=2e-3,
        base_batch_size=64,
        checkpoint_modules=(Block,),
        eval_dataset=functools.partial(data, max(1, samples // 10), offset=samples),
    )
