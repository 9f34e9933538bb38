"""A map-style dataset is read through one DataLoader iteration for the whole trial: epochs follow each other
(each reshuffled, each rank's share once, the remainder dropped) and DataLoader workers prefetch across an
epoch's end, where a new iteration per epoch would start them empty (timed as a wait for data)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.utils.data import Dataset

from autotune.search_space import TrialConfig
from autotune.trial_runner._data import train_data

N = 22  # 11 a rank at 2 ranks: two batches of 4 and 3 left over each epoch


class Logged(Dataset[torch.Tensor]):
    """The numbers 0..n-1; each item appends its index to a file as it is loaded (from any worker process)."""

    def __init__(self, n: int, log: Path) -> None:
        self.n, self.log = n, log

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        with self.log.open("a") as f:
            f.write(f"{index}\n")
        return torch.tensor(index)


def _loaded(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_epochs_follow_each_other_each_reshuffled_each_share_once(tmp_path: Path) -> None:
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=4, batch_size=4, world_size=2)
    shares = []
    for rank in range(2):
        data = train_data(Logged(N, tmp_path / f"log{rank}"), config, rank=rank, world_size=2, seed=0, collate_fn=None)
        batches = data.batches()
        epochs = [[[int(v) for v in next(batches)] for _ in range(2)] for _ in range(3)]  # 2 full batches an epoch
        shares.append(epochs)
    for epoch in range(3):
        numbers = [v for rank in shares for batch in rank[epoch] for v in batch]
        assert all(len(batch) == 4 for rank in shares for batch in rank[epoch])
        assert len(set(numbers)) == 16  # each sample at most once an epoch over the ranks, 3 a rank dropped
    assert shares[0][0] != shares[0][1] and shares[0][1] != shares[0][2]  # each epoch its own shuffle
    assert data.applied["sampler"] == "DistributedSampler" and data.applied["batch_size"] == 4


def test_a_worker_prefetches_the_next_epochs_batches_before_they_are_asked_for(tmp_path: Path) -> None:
    log = tmp_path / "log"
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=4, batch_size=4, num_workers=1, prefetch_factor=2)
    data = train_data(Logged(8, log), config, rank=0, world_size=1, seed=0, collate_fn=None)  # 2 batches an epoch
    batches = data.batches()
    first_epoch = [next(batches) for _ in range(2)]
    assert sorted(int(v) for batch in first_epoch for v in batch) == list(range(8))
    deadline = time.monotonic() + 30
    while _loaded(log) < 16 and time.monotonic() < deadline:  # the worker's two prefetched batches: epoch 1
        time.sleep(0.05)
    assert _loaded(log) == 16, f"{_loaded(log)} items loaded: the next epoch's batches were not prefetched"
    second_epoch = sorted(int(v) for _ in range(2) for v in next(batches))
    assert second_epoch == list(range(8))
