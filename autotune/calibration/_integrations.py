"""The chosen configuration in the terms of the trainers users already have: Hugging Face and Lightning.

Each is a table, knob -> keyword argument: adding a knob is one line in a table. A row's function returns
the argument's value, or :data:`SKIP` when the configuration leaves that argument at the trainer's own
default (prefetch without DataLoader workers, a DDP bucket under FSDP, ...). Neither library is imported
to build the keyword arguments (``to_lightning`` imports Lightning only for a DDP strategy object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.search_space import TrialConfig

SKIP = object()

_PRECISION = {"off": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
_HF_FSDP = {"fsdp": "full_shard", "fsdp_no_reshard": "shard_grad_op"}


def _workers(value: Callable[[TrialConfig], Any]) -> Callable[[TrialConfig], Any]:
    """A DataLoader-worker argument: only meaningful (and accepted) with num_workers > 0."""
    return lambda c: value(c) if c.num_workers > 0 else SKIP


def _ddp(value: Callable[[TrialConfig], Any]) -> Callable[[TrialConfig], Any]:
    """A DDP-only argument: left out under FSDP."""
    return lambda c: value(c) if getattr(c, "sharding", "ddp") == "ddp" and value(c) is not None else SKIP


# transformers.TrainingArguments keyword -> its value. world_size is torchrun's --nproc-per-node
# (Calibration.torchrun_args()), not an argument of TrainingArguments.
HF_TRAINING_ARGUMENTS: tuple[tuple[str, Callable[[TrialConfig], Any]], ...] = (
    ("per_device_train_batch_size", lambda c: c.batch_size),
    ("gradient_accumulation_steps", lambda c: c.grad_accum),
    ("learning_rate", lambda c: c.lr),
    ("dataloader_num_workers", lambda c: c.num_workers),
    ("dataloader_prefetch_factor", _workers(lambda c: c.prefetch_factor)),
    ("dataloader_persistent_workers", lambda c: c.num_workers > 0),
    ("dataloader_pin_memory", lambda c: c.pin_memory),
    ("dataloader_drop_last", lambda c: True),
    ("bf16", lambda c: c.amp == "bf16"),
    ("fp16", lambda c: c.amp == "fp16"),
    ("gradient_checkpointing", lambda c: c.activation_checkpointing),
    ("ddp_bucket_cap_mb", _ddp(lambda c: c.bucket_cap_mb)),
    ("use_cpu", lambda c: c.device == "cpu"),
    ("torch_compile", lambda c: getattr(c, "compile", "off") != "off"),
    ("torch_compile_mode", lambda c: c.compile if getattr(c, "compile", "off") != "off" else SKIP),
    ("fsdp", lambda c: _HF_FSDP.get(getattr(c, "sharding", "ddp"), SKIP)),
)

# lightning.Trainer keyword -> its value (the strategy is added by lightning_kwargs: it may be an object).
LIGHTNING_TRAINER: tuple[tuple[str, Callable[[TrialConfig], Any]], ...] = (
    ("precision", lambda c: _PRECISION[c.amp]),
    ("accumulate_grad_batches", lambda c: c.grad_accum),
    ("devices", lambda c: c.world_size),
    ("accelerator", lambda c: "gpu" if c.device == "cuda" else "cpu"),
)

# DDP keyword -> value, for Lightning's DDPStrategy (and anything else that takes DDP's arguments).
DDP_ARGUMENTS: tuple[tuple[str, Callable[[TrialConfig], Any]], ...] = (
    ("bucket_cap_mb", lambda c: c.bucket_cap_mb),
    ("gradient_as_bucket_view", lambda c: getattr(c, "gradient_as_bucket_view", None) or SKIP),
    ("static_graph", lambda c: getattr(c, "static_graph", None) or SKIP),
)


def _apply(table: tuple[tuple[str, Callable[[TrialConfig], Any]], ...], config: TrialConfig) -> dict[str, Any]:
    out = {}
    for name, value_of in table:
        value = value_of(config)
        if value is not SKIP:
            out[name] = value
    return out


def hf_training_arguments(config: TrialConfig) -> dict[str, Any]:
    kwargs = _apply(HF_TRAINING_ARGUMENTS, config)
    if "gradient_checkpointing" in kwargs and "activation_checkpointing" in _hf_fields():
        # transformers 5 renamed it (the old name warns, and goes in v6)
        kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing")
    return kwargs


def _hf_fields() -> set[str]:
    """The fields of the installed transformers.TrainingArguments (none when transformers is absent)."""
    try:
        import dataclasses

        from transformers import TrainingArguments
    except ImportError:
        return set()
    return {f.name for f in dataclasses.fields(TrainingArguments)}


def lightning_kwargs(config: TrialConfig, dataloader: dict[str, Any]) -> dict[str, Any]:
    trainer = _apply(LIGHTNING_TRAINER, config)
    sharding = getattr(config, "sharding", "ddp")
    if sharding != "ddp":
        trainer["strategy"] = "fsdp"
    elif config.world_size > 1:
        from lightning.pytorch.strategies import DDPStrategy

        trainer["strategy"] = DDPStrategy(**_apply(DDP_ARGUMENTS, config))
    else:
        trainer["strategy"] = "auto"
    return {"trainer": trainer, "dataloader": dict(dataloader), "lr": config.lr}
