"""A Hugging Face model as a user writes it: a small GPT2LMHeadModel built from a config (no download).

The text is the Python standard library's own source as bytes (vocabulary 256, as in
autotune.workloads.lm), cut into fixed windows; a sample is a dict, batches come from transformers'
``default_data_collator``, and the loss is the model output's ``.loss``. Requires ``pip install
'autotune[hf]'``. Used by studies/hf_gpt2.yaml.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

import autotune
from autotune.workloads.lm import stdlib_sources


class ByteWindows(Dataset):
    """``samples`` windows of ``seq_len`` bytes: ``{"input_ids", "labels"}`` (the model shifts labels)."""

    def __init__(self, seq_len: int, samples: int) -> None:
        need = seq_len * samples
        chunks, size = [], 0
        for path in stdlib_sources():
            data = path.read_bytes()
            chunks.append(data)
            size += len(data)
            if size >= need:
                break
        self.tokens = torch.from_numpy(np.frombuffer(b"".join(chunks)[:need], dtype=np.uint8).astype(np.int64))
        self.seq_len, self.samples = seq_len, samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        window = self.tokens[i * self.seq_len : (i + 1) * self.seq_len]
        return {"input_ids": window, "labels": window}


def build(n_layer: int = 2, n_embd: int = 128, n_head: int = 4, seq_len: int = 64,
          samples: int = 4096) -> autotune.Workload:
    config = GPT2Config(vocab_size=256, n_positions=seq_len, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        bos_token_id=0, eos_token_id=0)  # byte tokens: GPT-2's 50256 is outside the vocabulary

    def model() -> GPT2LMHeadModel:  # a factory: each rank builds its own
        net = GPT2LMHeadModel(config)
        net.loss_type = "ForCausalLM"  # name the loss transformers would pick anyway (and warn about)
        return net

    return autotune.Workload(
        model=model,
        dataset=lambda: ByteWindows(seq_len, samples),
        loss=lambda model, batch: model(**batch).loss,    # a ModelOutput: its .loss is the scalar
        collate_fn=default_data_collator,
        base_lr=6e-4,
        base_batch_size=16,
        checkpoint_modules=(GPT2Block,),
    )
