"""A rank's training data: the DataLoader over the workload's dataset, with every data knob applied.

A map-style dataset is split by a DistributedSampler (shuffled, each pass a new epoch, the remainder that
does not fill the ranks' batches dropped), read through one DataLoader iteration for the whole trial
(:class:`EpochBatches`): DataLoader workers keep prefetching across an epoch's end, as they do within one,
where a new iteration per epoch would start them empty. On a small dataset at a large batch an epoch ends
every few steps, and each of those refills would be timed as a wait for data a real run pays once an epoch.

A stream (``is_stream``: a torch ``IterableDataset`` or a Hugging Face ``datasets.IterableDataset``) is read once
per pass across the ranks and their DataLoader workers:

- a Hugging Face stream is split by rank with ``datasets.distributed.split_dataset_by_node`` (whole shards
  when their count divides by the ranks, else every world_size-th example), and by worker by the stream
  itself (its shards, among the workers of a rank);
- a plain torch stream is read through :class:`StreamShare`: of P = world_size x max(1, num_workers)
  readers, reader p = rank x workers + worker keeps items p, p + P, p + 2P, ... of the stream's own order,
  which therefore must be the same in every process (seed any shuffle; ``set_epoch(epoch)`` is called
  first when the stream has it). Each reader then iterates the whole stream and skips the others' items;
  a stream that can skip cheaply (its files, its rows) defines ``shard(num_shards, index)`` returning the
  iterable of share ``index`` of ``num_shards``, and autotune calls that instead. (A stream that splits
  itself by worker or rank in ``__iter__`` would be split twice: that split belongs in ``shard()``.)

A reader's samples are batched by its own DataLoader worker, so up to batch_size - 1 of each worker's share
are left over at the end of a pass (drop_last: every batch holds batch_size samples). No ``len()`` is
taken: a pass ends when the stream does; a trial longer than one pass reads it again; a rank that gets no
full batch from a whole pass fails with :class:`DatasetTooSmall`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import IterableDataset

from autotune.search_space import TrialConfig
from autotune.trial_runner._records import LoaderFacts
from autotune.workload import is_stream

__all__ = [
    "DatasetTooSmall", "EpochBatches", "StreamShare", "TrainData", "batch_len", "eval_loader", "loader_facts",
    "to_device", "train_data",
]


class DatasetTooSmall(RuntimeError):
    """The dataset holds fewer samples per rank than one batch (or a stream gave a rank none in a pass)."""


class StreamShare(IterableDataset[Any]):
    """One rank's share of a plain torch stream, itself split among the rank's DataLoader workers.

    Reader ``rank * workers + worker`` of ``world_size * workers`` takes every such item of the stream (or,
    when the stream has ``shard(num_shards, index)``, what that returns). Each pass counts as an epoch in the
    process that iterates it (a persistent worker keeps its own count), handed to ``set_epoch`` when the
    stream has one.
    """

    def __init__(self, stream: Any, rank: int, world_size: int) -> None:
        self.stream = stream
        self.rank = rank
        self.world_size = world_size
        self.passes = 0

    def reader(self) -> tuple[int, int]:
        """``(index, count)`` of the reader iterating in this process."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.rank * workers + worker, self.world_size * workers

    def __iter__(self) -> Iterator[Any]:
        index, count = self.reader()
        set_epoch = getattr(self.stream, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.passes)
        self.passes += 1
        shard = getattr(self.stream, "shard", None)
        if callable(shard):
            return iter(shard(count, index))
        return itertools.islice(iter(self.stream), index, None, count)


class EpochBatches:
    """Endless batches of a map-style dataset's indices: epoch after epoch of a rank's DistributedSampler
    (``set_epoch`` before each), each epoch's last partial batch dropped. A DataLoader's ``batch_sampler``."""

    def __init__(self, sampler: Any, batch_size: int) -> None:
        self.sampler = sampler
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for epoch in itertools.count():
            self.sampler.set_epoch(epoch)
            indices = iter(self.sampler)
            while len(batch := list(itertools.islice(indices, self.batch_size))) == self.batch_size:
                yield batch


@dataclass
class TrainData:
    """The loader of one rank, the endless batches it gives and what was applied (for applied.json)."""

    loader: Any
    applied: dict[str, Any]
    too_short: str  # the DatasetTooSmall message when a pass gives no batch
    set_epoch: Callable[[int], None] | None = None
    epoch: int = 0

    def batches(self) -> Iterator[Any]:
        """Endless batches; each pass over the data is a new epoch (a stream's loader is iterated again each
        pass; a map-style dataset's is endless itself, :class:`EpochBatches`)."""
        while True:
            if self.set_epoch is not None:
                self.set_epoch(self.epoch)
            yielded = False
            for batch in self.loader:
                yielded = True
                yield batch
            if not yielded:
                raise DatasetTooSmall(self.too_short)
            self.epoch += 1


def _split_hf(dataset: Any, rank: int, world_size: int) -> Any:
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(dataset, rank=rank, world_size=world_size)


def _reader_dataset(dataset: Any, rank: int, world_size: int) -> tuple[Any, str]:
    """The dataset a rank's DataLoader reads for a stream, and how it was split."""
    if _is_hf(dataset):
        return _split_hf(dataset, rank, world_size), "datasets.distributed.split_dataset_by_node"
    how = "shard(num_shards, index)" if callable(getattr(dataset, "shard", None)) else "every P-th item"
    return StreamShare(dataset, rank, world_size), f"StreamShare: {how}"


def _is_hf(dataset: Any) -> bool:
    return type(dataset).__module__.split(".")[0] == "datasets"  # a Hugging Face datasets.IterableDataset


def train_data(dataset: Any, config: TrialConfig, rank: int, world_size: int, seed: int, collate_fn: Any) -> TrainData:
    """The DataLoader of one rank with the trial's data knobs (batch size, workers, prefetch, pin memory)."""
    from torch.utils.data import DataLoader, DistributedSampler

    kwargs: dict[str, Any] = {}
    if config.num_workers > 0:
        kwargs.update(prefetch_factor=config.prefetch_factor, persistent_workers=True)
    common = dict(num_workers=config.num_workers, pin_memory=config.pin_memory, collate_fn=collate_fn, **kwargs)
    if is_stream(dataset):
        readers, how = _reader_dataset(dataset, rank, world_size)
        workers = max(1, config.num_workers)
        loader = DataLoader(readers, batch_size=config.batch_size, drop_last=True, **common)
        too_short = (
            f"the stream gave rank {rank} no full batch of {config.batch_size} in a whole pass (it is split over "
            f"{world_size} rank(s) x {workers} DataLoader worker(s), each batching its own share); use a smaller "
            "batch_size or fewer num_workers, or a longer stream"
        )
        # A Hugging Face stream's epoch (its shuffle's seed) is shared with its persistent workers; a plain
        # stream's is counted by StreamShare where it is iterated.
        set_epoch = readers.set_epoch if _is_hf(readers) and hasattr(readers, "set_epoch") else None
        applied = {"sampler": None, "split": how}
        return TrainData(loader, {**_applied(loader, config), **applied}, too_short, set_epoch)
    size = len(dataset)
    per_rank = size // world_size
    if per_rank < config.batch_size:
        raise DatasetTooSmall(
            f"the dataset has {size} samples: {per_rank} per rank, fewer than one batch of "
            f"{config.batch_size}; use a smaller batch_size or a larger dataset"
        )
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    loader = DataLoader(dataset, batch_sampler=EpochBatches(sampler, config.batch_size), **common)
    applied = {"sampler": type(sampler).__name__}
    return TrainData(loader, {**_applied(loader, config), **applied}, "the DataLoader produced no batch")


def _applied(loader: Any, config: TrialConfig) -> dict[str, Any]:
    return {
        "batch_size": config.batch_size,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor if config.num_workers > 0 else None,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
    }


def eval_loader(dataset: Any, batch_size: int, rank: int, world_size: int, collate_fn: Any) -> Iterable[Any] | None:
    """The held-out loader of one rank, in order, without workers; None when there is nothing to evaluate.

    A map-style set: a DistributedSampler in order (it repeats a few samples so that the shares are equal). A
    stream: the rank's share as in training, every sample once, the last batch short.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    if is_stream(dataset):
        readers, _ = _reader_dataset(dataset, rank, world_size)
        return DataLoader(readers, batch_size=batch_size, collate_fn=collate_fn)
    if len(dataset) == 0:
        return None
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=False, drop_last=False
    )
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn)


def loader_facts(data: TrainData) -> LoaderFacts:
    """What applied.json records of the DataLoader as built (and, for a stream, how it was split)."""
    a = data.applied
    return LoaderFacts(
        batch_size=a["batch_size"], num_workers=a["num_workers"], prefetch_factor=a["prefetch_factor"],
        pin_memory=a["pin_memory"], persistent_workers=a["persistent_workers"], sampler=a["sampler"],
        split=a.get("split"),
    )


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
