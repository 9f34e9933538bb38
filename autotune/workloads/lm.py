"""A tiny byte-level transformer language model trained on the Python standard library's own source.

The text needs no download: the ``.py`` files of the running interpreter's standard library (found with
``sysconfig.get_paths()["stdlib"]``), read in a fixed order (top-level modules sorted by name, then the
packages' files, ``site-packages`` excluded) up to ``max_bytes``. Tokens are bytes (vocabulary 256); an
item is one fixed-length window, ``(input, target)`` with the target shifted by one byte. The bytes after
the training text form the held-out split.

Entry point: ``autotune.workloads.lm:build``.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.errors import WorkloadError
from autotune.workload import Workload
from autotune.workloads._common import batch_on, check_sizes, seeded_model

__all__ = ["Block", "CausalSelfAttention", "StdlibText", "TinyLM", "build", "stdlib_sources"]

VOCAB_SIZE = 256
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


def stdlib_sources(root: Path | None = None) -> Iterator[Path]:
    """The standard library's ``.py`` files in a fixed order: top-level modules, then packages, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    yield from sorted(p for p in root.glob("*.py") if p.is_file())
    for package in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in _SKIP_DIRS):
        for folder, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(files):
                if name.endswith(".py"):
                    yield Path(folder, name)


def read_corpus(max_bytes: int) -> tuple[bytes, list[Path]]:
    """Up to ``max_bytes`` of standard-library source, files joined by a newline, and the files read."""
    chunks: list[bytes] = []
    paths: list[Path] = []
    size = 0
    for path in stdlib_sources():
        if size >= max_bytes:
            break
        try:
            text = path.read_bytes()
        except OSError:
            continue
        chunk = text[: max_bytes - size] + b"\n"
        chunks.append(chunk)
        paths.append(path)
        size += len(chunk)
    return b"".join(chunks)[:max_bytes], paths


class StdlibText(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Non-overlapping windows of standard-library source as int64 byte tokens.

    Item ``i`` is ``(text[i*L : i*L+L], text[i*L+1 : i*L+L+1])`` with ``L = seq_len``.

    Args:
        seq_len: tokens per window.
        max_bytes: bytes of training text.
        split: ``"train"`` (the first ``max_bytes``) or ``"eval"`` (the next ``max_bytes // 16``).
    """

    def __init__(self, seq_len: int, max_bytes: int, split: str = "train") -> None:
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        eval_bytes = max(max_bytes // 16, 4 * (seq_len + 1))
        text, paths = read_corpus(max_bytes + eval_bytes)
        text = text[:max_bytes] if split == "train" else text[max_bytes:]
        if len(text) < seq_len + 1:
            raise WorkloadError(
                f"lm: the standard library gave {len(text)} bytes for the {split} split, fewer than one "
                f"window of {seq_len + 1}; lower seq_len or raise max_bytes"
            )
        self.seq_len = seq_len
        self.split = split
        self.paths = paths
        self.text = text
        self.tokens = np.frombuffer(text, dtype=np.uint8)

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq_len

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} windows")
        start = index * self.seq_len
        window = torch.from_numpy(self.tokens[start : start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        heads = (batch, length, self.n_heads, dim // self.n_heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, dim))


class Block(nn.Module):
    """A pre-norm transformer block (attention, then a 4x GELU MLP): the activation-checkpointing unit."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Byte embeddings plus learned positions, ``n_layers`` :class:`Block` s, a norm and a linear head."""

    def __init__(self, d_model: int, n_layers: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB_SIZE, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, n_heads) for _ in range(n_layers)))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB_SIZE, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        return self.head(self.norm(self.blocks(x)))


def next_byte_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats) of one batch, computed in float32 (also under bf16 autocast)."""
    inputs, targets = batch_on(model, batch)
    logits = model(inputs).float()
    return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), targets.reshape(-1))


def build(
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    seq_len: int = 64,
    max_bytes: int = 1_000_000,
    seed: int = 0,
) -> Workload:
    """The tiny transformer language-model reference workload.

    Args:
        d_model: embedding width (a multiple of ``n_heads``).
        n_layers: number of transformer :class:`Block` s (the activation-checkpointing unit).
        n_heads: attention heads per block.
        seq_len: bytes per training window (the context length).
        max_bytes: bytes of standard-library source in the training split.
        seed: fixes the initial weights (the text is fixed by the Python installation).
    """
    sizes = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "seq_len": seq_len, "max_bytes": max_bytes,
             "seed": seed}
    check_sizes("lm", sizes, {"seed": 0})
    if d_model % n_heads:
        raise WorkloadError(f"lm: d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
    if max_bytes < seq_len + 1:
        raise WorkloadError(f"lm: max_bytes ({max_bytes}) must exceed seq_len ({seq_len}) to hold one window")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if not stdlib.is_dir():
        raise WorkloadError(f"lm: the standard library folder {stdlib} is missing; this workload reads it")
    return Workload(
        model=functools.partial(seeded_model, seed, TinyLM, d_model, n_layers, n_heads, seq_len),
        dataset=functools.partial(StdlibText, seq_len, max_bytes),
        loss=next_byte_loss,
        base_lr=3e-3,
        base_batch_size=32,
        checkpoint_modules=(Block,),
        eval_dataset=functools.partial(StdlibText, seq_len, max_bytes, split="eval"),
    )
