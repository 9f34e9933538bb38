"""The chosen configuration in the terms of the trainers users already have: Hugging Face and Lightning.

Each is a table, keyword argument -> its value; a knob that is one keyword (a DDP argument, a TrainingArguments
one) comes from the knob table's ``ddp_argument=`` and ``hf_argument=``. A row's function returns
the argument's value, or :data:`SKIP` when the configuration leaves that argument at the trainer's own
default (prefetch without DataLoader workers, a DDP bucket under FSDP, ...). Neither library is imported
to build the keyword arguments (``to_lightning`` imports Lightning only for a DDP strategy object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.knobs import DDP_ARGUMENTS as DDP_KNOB_ARGUMENTS
from autotune.knobs import KNOBS
from autotune.search_space import TrialConfig

SKIP = object()

_PRECISION = {"off": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
_HF_FSDP = {"fsdp": "full_shard", "fsdp_no_reshard": "shard_grad_op"}


def _knob(name: str, *, when_not_default: bool = False) -> Callable[[TrialConfig], Any]:
    """A knob's value as it is; SKIP when the configuration leaves it unset (None: prefetch without DataLoader
    workers, a DDP knob under FSDP) or, with ``when_not_default``, at the knob's default (the trainer's too)."""
    default = KNOBS[name].default

    def value(config: TrialConfig) -> Any:
        got = getattr(config, name, None)
        return SKIP if got is None or (when_not_default and got == default) else got

    return value


# transformers.TrainingArguments keyword -> its value: the knobs the table maps to one keyword each
# (``hf_argument=``), then what is derived. world_size is torchrun's --nproc-per-node (Calibration.torchrun_args()),
# not an argument of TrainingArguments.
HF_TRAINING_ARGUMENTS: tuple[tuple[str, Callable[[TrialConfig], Any]], ...] = (
    *((knob.hf_argument, _knob(name)) for name, knob in KNOBS.items() if knob.hf_argument),
    ("learning_rate", lambda c: c.lr),
    ("dataloader_persistent_workers", lambda c: c.num_workers > 0),
    ("dataloader_drop_last", lambda c: True),
    ("bf16", lambda c: c.amp == "bf16"),
    ("fp16", lambda c: c.amp == "fp16"),
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

# DDP keyword -> value, for Lightning's DDPStrategy (and anything else that takes DDP's arguments): the table's
# DDP knobs (``ddp_argument=``); a flag only where it is not DDP's default.
DDP_ARGUMENTS: tuple[tuple[str, Callable[[TrialConfig], Any]], ...] = tuple(
    (name, _knob(name, when_not_default=KNOBS[name].type is bool)) for name in DDP_KNOB_ARGUMENTS
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
