"""What the reference workloads share: checking their size arguments, seeded models, batches on the device."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from autotune.errors import WorkloadError

M = TypeVar("M", bound=nn.Module)


def check_sizes(workload: str, sizes: Mapping[str, Any], minimums: Mapping[str, int]) -> None:
    """Every one of ``sizes`` is an integer at least its minimum (1 unless ``minimums`` names another)."""
    for name, value in sizes.items():
        minimum = minimums.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise WorkloadError(f"{workload}: {name} must be an integer >= {minimum}, got {value!r}")


def seeded_model(seed: int, make: Callable[..., M], *args: Any) -> M:
    """``make(*args)`` with its initial weights drawn from ``seed``: the same in every trial, and the
    global RNG left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make(*args)


def batch_on(model: nn.Module, batch: Iterable[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The tensors of ``batch`` on the device of ``model``'s parameters."""
    device = next(model.parameters()).device
    return tuple(t.to(device, non_blocking=True) for t in batch)
