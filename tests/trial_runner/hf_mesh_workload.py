"""A tiny Hugging Face Llama that carries its own tensor-parallel plan (``model._tp_plan``): no hook, no tp_plan."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from autotune import Workload
from autotune.workloads.gpt import BigramTokens


def _model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config)


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, target = batch
    logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())


def build() -> Workload:
    return Workload(model=_model, dataset=lambda: BigramTokens(4096, 64, 32, 0), loss=_loss, base_batch_size=16)
