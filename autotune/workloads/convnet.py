"""A small residual ConvNet classifying synthetic images, with real augmentation in ``__getitem__``.

Each class has a fixed template (a few coloured, oriented sine gratings drawn from ``seed``); an item is
its class template at a random contrast plus pixel noise, then augmented like CIFAR training images:
reflect-padded random crop, horizontal flip and additive noise. The randomness of an item, augmentation
included, comes from a generator seeded with ``(seed, index)``, so an index always gives the same item
while the CPU cost of the pipeline stays that of a real one.

Entry point: ``autotune.workloads.convnet:build``.
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

__all__ = ["Block", "ConvNet", "PatternImages", "build"]

_GRATINGS = 3


class PatternImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``samples`` (image, label) pairs: float32 ``3 x image_size x image_size`` and an int64 label.

    Args:
        samples: number of items.
        num_classes: number of classes (one template each).
        image_size: height and width of the images.
        seed: fixes the templates and every item.
        offset: index of the first item; a held-out split uses ``offset=samples``.
        augment: random crop, flip and noise (off for the held-out split).
    """

    def __init__(
        self,
        samples: int,
        num_classes: int,
        image_size: int,
        seed: int,
        offset: int = 0,
        augment: bool = True,
    ) -> None:
        self.samples = samples
        self.num_classes = num_classes
        self.image_size = image_size
        self.seed = seed
        self.offset = offset
        self.augment = augment
        self.pad = max(1, image_size // 8)
        rng = np.random.default_rng([seed, 0])
        grid = np.arange(image_size) / image_size
        yy, xx = np.meshgrid(grid, grid, indexing="ij")
        templates = np.zeros((num_classes, 3, image_size, image_size))
        for c in range(num_classes):
            for _ in range(_GRATINGS):
                freq = rng.uniform(1.0, 4.0)
                angle = rng.uniform(0.0, math.pi)
                phase = rng.uniform(0.0, 2 * math.pi)
                colour = rng.standard_normal(3)
                wave = np.sin(2 * math.pi * freq * (math.cos(angle) * xx + math.sin(angle) * yy) + phase)
                templates[c] += colour[:, None, None] * wave
        templates /= templates.std(axis=(1, 2, 3), keepdims=True) + 1e-6
        self.templates = templates.astype(np.float32)

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.samples:
            raise IndexError(f"index {index} out of range for {self.samples} samples")
        rng = np.random.default_rng([self.seed, 1, self.offset + index])
        label = int(rng.integers(self.num_classes))
        shape = self.templates.shape[1:]
        image = self.templates[label] * rng.uniform(0.5, 1.5) + rng.standard_normal(shape, dtype=np.float32)
        if self.augment:
            p, size = self.pad, self.image_size
            padded = np.pad(image, ((0, 0), (p, p), (p, p)), mode="reflect")
            top, left = rng.integers(0, 2 * p + 1, size=2)
            image = padded[:, top : top + size, left : left + size]
            if rng.random() < 0.5:
                image = image[:, :, ::-1]
            image = image + 0.2 * rng.standard_normal(shape, dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32)), torch.tensor(label)


class Block(nn.Module):
    """Two 3x3 convolutions with GroupNorm and ReLU, plus a shortcut: the unit activation checkpointing wraps.

    GroupNorm rather than BatchNorm: recomputing a checkpointed block must not update running statistics
    twice, and the result must not depend on the per-rank batch size the tuner varies.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(math.gcd(out_channels, 8), out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(math.gcd(out_channels, 8), out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if in_channels != out_channels:
            self.shortcut = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ConvNet(nn.Module):
    """A stem convolution, then ``depth`` :class:`Block` s, each doubling the channels and halving the size.

    Channels stop growing at 8x ``width`` and the size stops shrinking at 4 pixels.
    """

    def __init__(self, width: int, depth: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.GroupNorm(math.gcd(width, 8), width), nn.ReLU()
        )
        layers: list[nn.Module] = []
        channels, size = width, image_size
        for i in range(depth):
            out = width * 2 ** min(i, 3)
            layers.append(Block(channels, out))
            if size >= 8:
                layers.append(nn.AvgPool2d(2))
                size //= 2
            channels = out
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


def cross_entropy_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of one batch, computed in float32 (also under bf16 autocast)."""
    images, labels = batch_on(model, batch)
    return F.cross_entropy(model(images).float(), labels)


def build(
    width: int = 8,
    depth: int = 3,
    image_size: int = 32,
    samples: int = 10_000,
    num_classes: int = 10,
    seed: int = 0,
) -> Workload:
    """The ConvNet reference workload.

    Args:
        width: channels of the stem and the first block (each later block doubles them, up to 8x).
        depth: number of residual :class:`Block` s (the activation-checkpointing unit).
        image_size: height and width of the square RGB images.
        samples: items in the training set (the held-out set has ``samples // 10``, at least 1).
        num_classes: number of classes.
        seed: fixes the data, the templates and the initial weights.
    """
    sizes = {"width": width, "depth": depth, "image_size": image_size, "samples": samples, "num_classes": num_classes,
             "seed": seed}
    check_sizes("convnet", sizes, {"seed": 0, "num_classes": 2, "image_size": 8})
    data = functools.partial(PatternImages, num_classes=num_classes, image_size=image_size, seed=seed)
    return Workload(
        model=functools.partial(seeded_model, seed, ConvNet, width, depth, image_size, num_classes),
        dataset=functools.partial(data, samples),
        loss=cross_entropy_loss,
        base_lr=2e-3,
        base_batch_size=32,
        checkpoint_modules=(Block,),
        eval_dataset=functools.partial(data, max(1, samples // 10), offset=samples, augment=False),
    )
