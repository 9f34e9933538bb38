"""A rank's training data: the DataLoader built for a trial's knobs, endless batches, moving a batch to the device."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from autotune.search_space import TrialConfig
from autotune.trial_runner._records import LoaderFacts


class DatasetTooSmall(RuntimeError):
    """The dataset holds fewer samples per rank than one batch."""


def make_loader(
    dataset: Any, cfg: TrialConfig, rank: int, world_size: int, seed: int, collate_fn: Any
) -> tuple[DataLoader[Any], DistributedSampler[Any]]:
    """The trial's DataLoader over ``dataset`` (this rank's share, shuffled per epoch) and its sampler."""
    per_rank = len(dataset) // world_size
    if per_rank < cfg.batch_size:
        raise DatasetTooSmall(
            f"the dataset has {len(dataset)} samples: {per_rank} per rank, fewer than one batch of "
            f"{cfg.batch_size}; use a smaller batch_size or a larger dataset"
        )
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    kwargs: dict[str, Any] = {}
    if cfg.num_workers > 0:
        kwargs.update(prefetch_factor=cfg.prefetch_factor, persistent_workers=True)
    loader = DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.num_workers,
        pin_memory=cfg.pin_memory,
        drop_last=True,
        collate_fn=collate_fn,
        **kwargs,
    )
    return loader, sampler


def loader_facts(loader: DataLoader[Any], sampler: Any) -> LoaderFacts:
    """What applied.json records of the DataLoader as built."""
    return LoaderFacts(
        batch_size=loader.batch_size,
        num_workers=loader.num_workers,
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        pin_memory=loader.pin_memory,
        persistent_workers=loader.persistent_workers,
        sampler=type(sampler).__name__,
    )


def batches(loader: Any, sampler: Any) -> Iterator[Any]:
    """Endless batches; each pass over the data is a new epoch of the DistributedSampler."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise DatasetTooSmall("the DataLoader produced no batch")
        epoch += 1


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


def batch_len(batch: Any) -> int:
    """The samples in a batch: the first dimension of its first tensor (1 when it holds none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, (list, tuple)) and batch:
        return batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_len(next(iter(batch.values())))
    return 1
