"""A small decoder-only transformer on synthetic tokens: the reference workload of the parallel mesh.

Every piece the mesh needs is here: attention heads and blocks that split across tensor-parallel ranks (a
``tp_plan`` of separate q, k, v projections, colwise, and an output projection, rowwise; the MLP's two layers
the same way), ``pipeline_split`` points at the blocks, the loss a pipeline computes on its last stage
(``pipeline_loss``), and a ``parallelize`` hook that applies the plan and gives each attention module its local
head count. No dropout: a parallel run trains the very model a one-rank run does, step for step.

The model's forward follows torchtitan's contract for pipeline stages: a top-level module that is ``None`` is
skipped and ``blocks`` may hold only some of the blocks, so a stage is the model with the other stages' modules
removed, and a later stage takes the previous stage's activations in place of the tokens.

Data: token sequences drawn from a fixed random bigram chain (``seed``), so the loss falls as the model learns
the chain. Entry point: ``autotune.workloads.gpt:build``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.errors import WorkloadError
from autotune.workload import Workload
from autotune.workloads._common import check_sizes, seeded_model

__all__ = ["GPT", "Attention", "BigramTokens", "Block", "build", "parallelize"]

TP_PLAN = {
    "blocks.*.attn.q": "colwise",
    "blocks.*.attn.k": "colwise",
    "blocks.*.attn.v": "colwise",
    "blocks.*.attn.proj": "rowwise",
    "blocks.*.mlp.fc1": "colwise",
    "blocks.*.mlp.fc2": "rowwise",
}
"""The tensor-parallel plan: each head's projections on one rank (colwise), the output projections summed
across the ranks (rowwise)."""


class BigramTokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``samples`` sequences of ``seq + 1`` tokens from a fixed random bigram chain (``seed`` fixes the chain and,
    with ``split``, every sequence: the held-out split draws others from the same chain). An item is
    ``(tokens[:-1], tokens[1:])``: the inputs and the next-token targets."""

    def __init__(self, samples: int, vocab: int, seq: int, seed: int, split: int = 0) -> None:
        self.samples, self.vocab, self.seq, self.seed = samples, vocab, seq, seed
        chain = torch.Generator().manual_seed(seed)
        table = torch.softmax(torch.randn(vocab, vocab, generator=chain) * 3.0, dim=-1)  # a few likely successors
        generator = torch.Generator().manual_seed(seed + 1_000_003 * (split + 1))  # the split's own sequences
        # every sequence at once, one position at a time (a few ms): indexing is then free in any rank or worker
        tokens = torch.empty(samples, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(vocab, (samples,), generator=generator)
        cdf, draws = table.cumsum(dim=-1), torch.rand(seq, samples, 1, generator=generator)
        for t in range(seq):
            tokens[:, t + 1] = torch.searchsorted(cdf[tokens[:, t]], draws[t]).squeeze(1).clamp_(max=vocab - 1)
        self.tokens = tokens

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.samples:
            raise IndexError(f"index {index} out of range for {self.samples} samples")
        row = self.tokens[index]
        return row[:-1], row[1:]


class Attention(nn.Module):
    """Causal self-attention with separate q, k, v projections. The head count used is the local one, derived
    from the projections' (possibly sharded) output width: ``heads`` is the model's, kept in step by
    :func:`parallelize`."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:  # (batch, local heads, seq, head_dim)
            return t.view(batch, seq, -1, self.head_dim).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block: the unit of activation checkpointing, FSDP and the pipeline's splits."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Embed(nn.Module):
    def __init__(self, vocab: int, dim: int, seq: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tokens(tokens) + self.positions(positions)


class GPT(nn.Module):
    """Embeddings, ``layers`` :class:`Block` s (``blocks.0`` ...), a final norm and the vocabulary head."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed: nn.Module | None = Embed(vocab, dim, seq)
        self.blocks = nn.ModuleDict({str(i): Block(dim, heads) for i in range(layers)})
        self.norm: nn.Module | None = nn.LayerNorm(dim)
        self.head: nn.Module | None = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:  # a later pipeline stage gets the previous stage's activations instead
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x) if self.head is not None else x


def next_token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position, in float32."""
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())


def lm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, target = batch
    return next_token_loss(model(inputs), target)


def parallelize(model: nn.Module, mesh: Any, config: Any) -> nn.Module:
    """The tensor-parallel hook: :data:`TP_PLAN` over ``mesh["tp"]``, and each attention module told its local
    head count (its forward derives it from the sharded projections as well)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = mesh["tp"]
    if tp.size() == 1:  # a pipeline alone: nothing to split across ranks
        return model
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for name, block in (model.blocks.items() if isinstance(model, GPT) else []):
        attn = block.get_submodule("attn")
        if not isinstance(attn, Attention) or attn.heads % tp.size():
            raise ValueError(f"blocks.{name}.attn: {getattr(attn, 'heads', '?')} heads do not split over {tp.size()} "
                             "ranks; give a tensor_parallel that divides heads")
        plan = {key.removeprefix("blocks.*."): styles[style]() for key, style in TP_PLAN.items()}
        parallelize_module(block, tp, plan)
        attn.heads //= tp.size()
    return model


def build(
    vocab: int = 64,
    dim: int = 64,
    heads: int = 4,
    layers: int = 4,
    seq: int = 32,
    samples: int = 8192,
    seed: int = 0,
    hook: bool = True,
) -> Workload:
    """The decoder-only transformer reference workload.

    Args:
        vocab: token vocabulary (the bigram chain's states).
        dim: model width (divisible by ``heads``; by the tensor-parallel degree too, as is ``heads``).
        heads: attention heads.
        layers: transformer blocks; the pipeline may split before any block but the first.
        seq: tokens per sample.
        samples: sequences in the training set (the held-out set has ``samples // 16``).
        seed: fixes the chain, every sequence and the initial weights.
        hook: tensor parallelism through the ``parallelize`` hook (True) or the declarative ``tp_plan`` alone.
    """
    check_sizes("gpt", {"vocab": vocab, "dim": dim, "heads": heads, "layers": layers, "seq": seq,
                        "samples": samples, "seed": seed}, {"seed": 0})
    if dim % heads:
        raise WorkloadError(f"gpt: dim ({dim}) must be a multiple of heads ({heads})")
    data = functools.partial(BigramTokens, vocab=vocab, seq=seq, seed=seed)
    return Workload(
        model=functools.partial(seeded_model, seed, GPT, vocab, dim, heads, layers, seq),
        dataset=functools.partial(data, samples),
        loss=lm_loss,
        optimizer=functools.partial(torch.optim.AdamW, weight_decay=0.0),
        base_lr=1e-3,
        base_batch_size=16,
        checkpoint_modules=(Block,),
        eval_dataset=functools.partial(data, max(1, samples // 16), split=1),
        parallelize=parallelize if hook else None,
        tp_plan=TP_PLAN,
        pipeline_split=tuple(f"blocks.{i}" for i in range(1, layers)),
        pipeline_loss=next_token_loss,
    )

