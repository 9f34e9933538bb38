"""A small CNN classifying image files: JPEG (or PNG) files read, decoded and augmented in ``__getitem__``.

The files are written once to a cache folder (:func:`write_images`; by default under the user's cache,
``$XDG_CACHE_HOME/autotune/workloads/images-<hash of the arguments>``; 1,000 JPEGs of 384 pixels take
about 50 MB), each a ``file_size`` square RGB image of its class pattern (the coloured gratings of
:mod:`autotune.workloads.convnet`) at a random contrast, with pixel noise. An item opens its file, decodes
it with Pillow and augments it as image classification training does: a random resized crop to
``crop_size`` (35-100% of the area, aspect 3/4-4/3), a horizontal flip and brightness/contrast jitter
(Pillow's ``ImageEnhance``, as torchvision's ``ColorJitter`` on an image). An item is the crop's uint8
pixels: the loss (:func:`image_loss`) converts the batch to float and normalises it in the rank, on the
model's device, as GPU pipelines do, so DataLoader workers hand over a quarter of float32's bytes. The
randomness of an item comes from ``(seed, index)``.

The decoding and augmentation cost CPU time per sample and the model is small, so with ``num_workers: 0``
most of a step waits for data, as on many GPU nodes, and DataLoader workers pay off. The defaults are
set for a 2-core CPU machine: loading a sample (decoding a 384-pixel JPEG, cropping, resizing to 64
pixels, augmenting) costs about 1.5-2 times training on it with one thread (benchmarks/input_bound.py
measures both), so the default configuration, loading and training in turn, waits for data most of a step,
and two workers decoding on the two cores feed the rank. The balance is the point: where loading costs
much more than training (a smaller ``width``, a larger ``file_size``, a smaller ``crop_size``), the two
cores cannot decode fast enough for any configuration, and the best one still waits for data.

Entry point: ``autotune.workloads.images:build``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.errors import WorkloadError
from autotune.workload import Workload
from autotune.workloads._common import batch_on, cache_folder, check_sizes, seeded_model, write_once
from autotune.workloads.convnet import PatternImages, cross_entropy_loss

__all__ = ["ImageFiles", "SmallCNN", "Stage", "build", "image_loss", "write_images"]

_SUFFIX = {"jpeg": ".jpg", "png": ".png"}
_LABELS = "labels.json"
_MEAN, _STD = 0.5, 0.25


def write_images(folder: Path, samples: int, num_classes: int, file_size: int, image_format: str, seed: int) -> None:
    """``samples`` image files (``00000.jpg`` ...) and ``labels.json`` (their classes, in order) in ``folder``."""
    from PIL import Image

    templates = PatternImages(1, num_classes, file_size, seed).templates
    labels = []
    for index in range(samples):
        rng = np.random.default_rng([seed, 1, index])
        label = int(rng.integers(num_classes))
        noise = rng.standard_normal(templates.shape[1:], dtype=np.float32)
        image = templates[label] * rng.uniform(0.5, 1.5) + 0.25 * noise
        pixels = (image.transpose(1, 2, 0) * 40.0 + 128.0).clip(0, 255).astype(np.uint8)
        path = folder / f"{index:05d}{_SUFFIX[image_format]}"
        if image_format == "jpeg":
            Image.fromarray(pixels).save(path, "JPEG", quality=90)
        else:
            Image.fromarray(pixels).save(path, "PNG", compress_level=1)
        labels.append(label)
    (folder / _LABELS).write_text(json.dumps(labels))


class ImageFiles(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """The image files of a folder written by :func:`write_images`, decoded and augmented per item.

    Args:
        folder: the folder of the files.
        crop_size: height and width of the images returned.
        seed: with the index, fixes an item's augmentation.
        start, stop: the range of files read (a held-out split reads the last ones).
        augment: random resized crop, flip and jitter (off: a centre crop of the whole image, resized).
    """

    def __init__(
        self, folder: Path, crop_size: int, seed: int, start: int = 0, stop: int | None = None, augment: bool = True
    ) -> None:
        self.paths = sorted(p for p in folder.iterdir() if p.suffix in _SUFFIX.values())
        self.labels: list[int] = json.loads((folder / _LABELS).read_text())
        stop = len(self.paths) if stop is None else stop
        self.paths, self.labels = self.paths[start:stop], self.labels[start:stop]
        self.crop_size = crop_size
        self.seed = seed
        self.start = start
        self.augment = augment

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The image as uint8 (3, crop_size, crop_size) and its class: the loss converts and normalises it in
        the rank, after the batch arrives, so workers hand over a quarter of float32's bytes."""
        from PIL import Image, ImageEnhance

        if not 0 <= index < len(self.paths):
            raise IndexError(f"index {index} out of range for {len(self.paths)} images")
        with Image.open(self.paths[index]) as file:
            image = file.convert("RGB")
        size = self.crop_size
        if self.augment:
            rng = np.random.default_rng([self.seed, 2, self.start + index])
            image = image.resize((size, size), Image.Resampling.BILINEAR, box=_random_box(image.size, rng))
            if rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))
            image = ImageEnhance.Contrast(image).enhance(rng.uniform(0.7, 1.3))
        else:
            image = image.resize((size, size), Image.Resampling.BILINEAR)
        pixels = torch.from_numpy(np.asarray(image).copy())
        return pixels.permute(2, 0, 1).contiguous(), torch.tensor(self.labels[index])


def image_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of a batch of uint8 images, converted to float and normalised here, on the model's device."""
    images, labels = batch_on(model, batch)
    return cross_entropy_loss(model, ((images.float() / 255.0 - _MEAN) / _STD, labels))


def _random_box(size: tuple[int, int], rng: np.random.Generator) -> tuple[float, float, float, float]:
    """A crop box of 35-100% of the image's area at an aspect ratio of 3/4-4/3, placed at random."""
    width, height = size
    area = width * height * rng.uniform(0.35, 1.0)
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    w = min(width, math.sqrt(area * aspect))
    h = min(height, math.sqrt(area / aspect))
    left = rng.uniform(0, width - w)
    top = rng.uniform(0, height - h)
    return left, top, left + w, top + h


class Stage(nn.Module):
    """A 3x3 convolution with stride 2, GroupNorm and ReLU: halves the size (the activation-checkpointing unit)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.norm = nn.GroupNorm(math.gcd(out_channels, 8), out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(self.conv(x)))


class SmallCNN(nn.Module):
    """``depth`` :class:`Stage` s (channels ``width``, then doubling up to 4x), global average pooling, a
    linear head: small next to the decoding of its input."""

    def __init__(self, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        channels = [3] + [width * 2 ** min(i, 2) for i in range(depth)]
        self.stages = nn.Sequential(*(Stage(a, b) for a, b in itertools.pairwise(channels)))
        self.head = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(x).mean(dim=(2, 3)))


def _files(key: dict[str, Any], cache_dir: str | None) -> Path:
    folder = cache_folder("images", key, cache_dir)
    write = functools.partial(
        write_images,
        samples=key["samples"],
        num_classes=key["num_classes"],
        file_size=key["file_size"],
        image_format=key["image_format"],
        seed=key["seed"],
    )
    return write_once(folder, write)


def _dataset(key: dict[str, Any], cache_dir: str | None, crop_size: int, split: str) -> ImageFiles:
    folder = _files(key, cache_dir)
    held_out = max(1, key["samples"] // 10)
    if split == "train":
        return ImageFiles(folder, crop_size, key["seed"], stop=key["samples"] - held_out)
    return ImageFiles(folder, crop_size, key["seed"], start=key["samples"] - held_out, augment=False)


def build(
    width: int = 20,
    depth: int = 3,
    crop_size: int = 64,
    file_size: int = 384,
    samples: int = 1_000,
    num_classes: int = 10,
    image_format: Literal["jpeg", "png"] = "jpeg",
    cache_dir: str | None = None,
    seed: int = 0,
) -> Workload:
    """The image-file reference workload.

    Args:
        width: channels of the first :class:`Stage` (later ones double them, up to 4x).
        depth: number of stride-2 :class:`Stage` s (the activation-checkpointing unit).
        crop_size: height and width of the augmented images the model sees.
        file_size: height and width of the image files (the decoding cost grows with it).
        samples: image files written; the last tenth (at least one) is the held-out split.
        num_classes: number of classes.
        image_format: ``jpeg`` or ``png``.
        cache_dir: where the files are written once (default: the user's cache folder, see the module).
        seed: fixes the images, their augmentation and the initial weights.
    """
    sizes = {
        "width": width,
        "depth": depth,
        "crop_size": crop_size,
        "file_size": file_size,
        "samples": samples,
        "num_classes": num_classes,
        "seed": seed,
    }
    check_sizes("images", sizes, {"seed": 0, "num_classes": 2, "crop_size": 8, "file_size": 8, "samples": 2})
    if image_format not in _SUFFIX:
        raise WorkloadError(f"images: image_format must be 'jpeg' or 'png', got {image_format!r}")
    key = {
        "samples": samples,
        "num_classes": num_classes,
        "file_size": file_size,
        "image_format": image_format,
        "seed": seed,
    }
    data = functools.partial(_dataset, key, cache_dir, crop_size)
    return Workload(
        model=functools.partial(seeded_model, seed, SmallCNN, width, depth, num_classes),
        dataset=functools.partial(data, "train"),
        loss=image_loss,
        base_lr=2e-3,
        base_batch_size=32,
        checkpoint_modules=(Stage,),
        eval_dataset=functools.partial(data, "eval"),
    )
