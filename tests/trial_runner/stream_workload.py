"""Workloads over streams of numbered samples, whose every training batch is written down by the rank that
trains on it: ``seen/rank<R>.jsonl`` in ``record_dir``, one line per batch, in order. On the held-out set
(the same stream) the loss of a batch is the mean of its numbers, so the held-out loss is (n - 1) / 2 exactly
when every number is evaluated once.

``kind``: ``plain`` (a torch IterableDataset autotune reads through its every-P-th-item rule), ``sharded``
(one that defines ``shard(num_shards, index)``), ``hf`` (a Hugging Face ``datasets`` stream over local
parquet files in ``record_dir/parquet``, written by the test).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import IterableDataset

import autotune


class Numbers(IterableDataset[torch.Tensor]):
    """0, 1, ..., n - 1, as float tensors of one element; no ``len()``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (torch.tensor([float(i)]) for i in range(self.n))


class ShardedNumbers(Numbers):
    """Numbers that skip cheaply: share ``index`` of ``num_shards`` is computed, never read and dropped."""

    def shard(self, num_shards: int, index: int) -> Iterator[torch.Tensor]:
        return (torch.tensor([float(i)]) for i in range(index, self.n, num_shards))


def _hf_stream(folder: Path) -> Any:
    from datasets import load_dataset

    files = sorted(str(p) for p in (folder / "parquet").glob("*.parquet"))
    stream = load_dataset("parquet", data_files=files, split="train", streaming=True)
    return stream.with_format("torch")


def _recorder(record_dir: Path):  # type: ignore[no-untyped-def]
    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        x = batch["x"].float().unsqueeze(1) if isinstance(batch, dict) else batch
        out = model(x)
        if not model.training:  # held out: the mean of the numbers, whatever the model learned
            return x.mean() + 0.0 * out.mean()
        seen = record_dir / "seen"
        seen.mkdir(exist_ok=True)
        with (seen / f"rank{os.environ.get('RANK', '0')}.jsonl").open("a") as f:
            f.write(json.dumps([int(v) for v in x.flatten().tolist()]) + "\n")
        return (out - 1.0).pow(2).mean()

    return loss


def build(record_dir: str, kind: str = "plain", n: int = 64) -> autotune.Workload:
    folder = Path(record_dir)
    if kind == "hf":
        dataset: Any = lambda: _hf_stream(folder)  # noqa: E731
    else:
        cls = ShardedNumbers if kind == "sharded" else Numbers
        dataset = lambda: cls(n)  # noqa: E731
    return autotune.Workload(
        model=lambda: nn.Linear(1, 1),
        dataset=dataset,
        loss=_recorder(folder),
        base_lr=1e-3,
        base_batch_size=4,
        eval_dataset=dataset,
    )
