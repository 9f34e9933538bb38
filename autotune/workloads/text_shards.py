"""The tiny byte-level language model of :mod:`autotune.workloads.lm`, streamed from tokenised shards on disk.

The training text (the Python standard library's own source, as in ``lm``) is tokenised once into shard
files of ``shard_tokens`` uint16 tokens each (``shard-00000.bin`` ..., as nanoGPT-style pipelines store
them), written to a cache folder (by default ``$XDG_CACHE_HOME/autotune/workloads/text_shards-<hash>``).
The dataset is a stream (:class:`TokenShards`, a ``torch.utils.data.IterableDataset`` without ``len()``):
it reads windows of ``seq_len + 1`` tokens through memory maps, file after file, in an order shuffled per
epoch. It defines ``shard(num_shards, index)`` so that autotune hands each rank and DataLoader worker its
own windows (window ``j`` of the whole stream goes to reader ``j mod num_shards``) without reading the
others. The last shard is held out.

Entry point: ``autotune.workloads.text_shards:build``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from autotune.errors import WorkloadError
from autotune.workload import Workload
from autotune.workloads._common import cache_folder, check_sizes, seeded_model, write_once
from autotune.workloads.lm import Block, TinyLM, next_byte_loss, read_corpus

__all__ = ["TokenShards", "build", "write_shards"]

_MANIFEST = "shards.json"


def write_shards(folder: Path, max_bytes: int, shard_tokens: int) -> None:
    """The first ``max_bytes`` of standard-library source as uint16 token files of ``shard_tokens`` tokens
    (the last one shorter) and ``shards.json``: each file's name and token count, in order."""
    text, _ = read_corpus(max_bytes)
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
    shards = []
    for number, start in enumerate(range(0, len(tokens), shard_tokens)):
        name = f"shard-{number:05d}.bin"
        chunk = tokens[start : start + shard_tokens]
        chunk.tofile(folder / name)
        shards.append({"file": name, "tokens": len(chunk)})
    (folder / _MANIFEST).write_text(json.dumps(shards))


class TokenShards(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping ``(input, target)`` windows of ``seq_len`` tokens from the shard files of ``folder``.

    Window ``j`` counts over the shards in their written order (a shard's windows do not cross into the
    next); a pass reads the shards in an order drawn from ``(seed, epoch)``.

    Args:
        folder: the folder written by :func:`write_shards`.
        seq_len: tokens per window.
        shards: the shards read: a slice of the manifest (the held-out split reads the last one).
        seed: with the epoch, fixes the order the shards are read in.
    """

    def __init__(self, folder: Path, seq_len: int, shards: slice, seed: int) -> None:
        manifest = json.loads((folder / _MANIFEST).read_text())[shards]
        self.folder = folder
        self.seq_len = seq_len
        self.seed = seed
        self.epoch = 0
        self.files = [m["file"] for m in manifest]
        windows = [max(0, (m["tokens"] - 1) // seq_len) for m in manifest]
        self.first = np.concatenate([[0], np.cumsum(windows)]).astype(np.int64)  # each shard's first window

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.shard(1, 0)

    def shard(self, num_shards: int, index: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The windows ``j`` with ``j % num_shards == index``, shard file after shard file."""
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.files))
        for s in order:
            first, end = int(self.first[s]), int(self.first[s + 1])
            if end == first:
                continue
            tokens = np.memmap(self.folder / self.files[s], dtype=np.uint16, mode="r")
            for j in range(first + (index - first) % num_shards, end, num_shards):
                start = (j - first) * self.seq_len
                window = torch.from_numpy(tokens[start : start + self.seq_len + 1].astype(np.int64))
                yield window[:-1], window[1:]


def _stream(key: dict[str, Any], cache_dir: str | None, seq_len: int, seed: int, split: str) -> TokenShards:
    folder = write_once(
        cache_folder("text_shards", key, cache_dir),
        functools.partial(write_shards, max_bytes=key["max_bytes"], shard_tokens=key["shard_tokens"]),
    )
    count = len(json.loads((folder / _MANIFEST).read_text()))
    if count < 2:
        raise WorkloadError(
            f"text_shards: {key['max_bytes']} bytes make {count} shard of {key['shard_tokens']} tokens; at least "
            "two are needed (the last is held out): lower shard_tokens or raise max_bytes"
        )
    shards = slice(0, count - 1) if split == "train" else slice(count - 1, count)
    return TokenShards(folder, seq_len, shards, seed)


def build(
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    seq_len: int = 64,
    max_bytes: int = 1_000_000,
    shard_tokens: int = 65_536,
    cache_dir: str | None = None,
    seed: int = 0,
) -> Workload:
    """The text-shard streaming reference workload.

    Args:
        d_model: embedding width (a multiple of ``n_heads``).
        n_layers: number of transformer blocks (the activation-checkpointing unit).
        n_heads: attention heads per block.
        seq_len: tokens per training window.
        max_bytes: bytes of standard-library source tokenised into shards (the last shard held out).
        shard_tokens: tokens per shard file.
        cache_dir: where the shards are written once (default: the user's cache folder).
        seed: fixes the initial weights and the order the shards are read in.
    """
    sizes = {
        "d_model": d_model,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "seq_len": seq_len,
        "max_bytes": max_bytes,
        "shard_tokens": shard_tokens,
        "seed": seed,
    }
    check_sizes("text_shards", sizes, {"seed": 0, "shard_tokens": 2})
    if d_model % n_heads:
        raise WorkloadError(f"text_shards: d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
    if shard_tokens <= seq_len:
        raise WorkloadError(
            f"text_shards: shard_tokens ({shard_tokens}) must exceed seq_len ({seq_len}) to hold one window"
        )
    key = {"max_bytes": max_bytes, "shard_tokens": shard_tokens}
    stream = functools.partial(_stream, key, cache_dir, seq_len, seed)
    return Workload(
        model=functools.partial(seeded_model, seed, TinyLM, d_model, n_layers, n_heads, seq_len),
        dataset=functools.partial(stream, "train"),
        loss=next_byte_loss,
        base_lr=3e-3,
        base_batch_size=32,
        checkpoint_modules=(Block,),
        eval_dataset=functools.partial(stream, "eval"),
    )
