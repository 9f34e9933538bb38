"""TrialConfig: one point of the search space with its derived values, frozen and JSON round-tripping."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LrScaling = Literal["none", "linear", "sqrt"]
Amp = Literal["off", "bf16", "fp16"]
Device = Literal["cpu", "cuda"]
Compile = Literal["off", "default", "reduce-overhead", "max-autotune-no-cudagraphs"]
Sharding = Literal["ddp", "fsdp", "fsdp_no_reshard"]


def scaled_lr(base_lr: float, base_batch_size: int, global_batch: int, rule: LrScaling) -> float:
    """``base_lr * f(global_batch / base_batch_size)`` with f = 1 (none), x (linear) or sqrt(x) (sqrt)."""
    ratio = global_batch / base_batch_size
    if rule == "none":
        return base_lr
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    raise ValueError(f"unknown lr_scaling rule {rule!r}")


#: DDP's ``no_sync()`` (every micro-batch of an accumulation but the last) under ``static_graph=True`` fails
#: inside torch with ``expect_autograd_hooks_ INTERNAL ASSERT FAILED`` at the first backward (torch 2.13 here;
#: pytorch/pytorch#143580, its fix pytorch/pytorch#187732 says the gradients also stop being all-reduced once
#: the assert is passed). So static_graph is searched at grad_accum 1 only, and a new configuration with both is
#: refused (:meth:`TrialConfig.create`); a stored one still loads (a one-rank trial of an older study ran without
#: DDP, and completed).
STATIC_GRAPH_WITH_ACCUMULATION = (
    "static_graph cannot be combined with grad_accum above 1: DDP's no_sync() under a static graph fails inside "
    "torch (pytorch/pytorch#143580); use static_graph false or grad_accum 1"
)


class TrialConfig(BaseModel):
    """The knobs of one trial and the values derived from them.

    ``global_batch = batch_size * grad_accum * world_size`` and
    ``lr = base_lr * f(global_batch / base_batch_size)``. Build one with :meth:`create`, which derives
    them; the validator refuses a config whose derived values disagree with its knobs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: int = Field(ge=1, description="per-rank micro-batch")
    grad_accum: int = Field(1, ge=1)
    lr_scaling: LrScaling = "sqrt"
    num_workers: int = Field(0, ge=0)
    prefetch_factor: int | None = Field(None, ge=1, description="None when num_workers == 0")
    pin_memory: bool = False
    amp: Amp = "off"
    activation_checkpointing: bool = False
    bucket_cap_mb: int | None = Field(25, ge=1, description="None unless sharding is ddp")
    world_size: int = Field(1, ge=1)
    threads_per_rank: int | Literal["auto"] = Field("auto", description="intra-op threads per rank, or auto")
    compile: Compile = "off"
    sharding: Sharding = "ddp"
    gradient_as_bucket_view: bool | None = Field(False, description="None unless sharding is ddp")
    static_graph: bool | None = Field(False, description="None unless sharding is ddp")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables set in every rank")
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict,
        description="the study's hyperparameters: build() arguments, base_lr, optimizer.<kwarg> (study-file names)",
    )
    device: Device = "cpu"
    base_lr: float = Field(gt=0)
    base_batch_size: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    lr: float = Field(gt=0)

    @classmethod
    def create(
        cls,
        *,
        base_lr: float,
        base_batch_size: int,
        batch_size: int,
        grad_accum: int = 1,
        lr_scaling: LrScaling = "sqrt",
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        amp: Amp = "off",
        activation_checkpointing: bool = False,
        bucket_cap_mb: int | None = 25,
        world_size: int = 1,
        threads_per_rank: int | Literal["auto"] = "auto",
        compile: Compile = "off",
        sharding: Sharding = "ddp",
        gradient_as_bucket_view: bool | None = False,
        static_graph: bool | None = False,
        env: dict[str, str] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        device: Device = "cpu",
    ) -> TrialConfig:
        if num_workers == 0:
            prefetch_factor = None
        elif prefetch_factor is None:
            prefetch_factor = 2
        if sharding != "ddp":  # DDP's own knobs mean nothing under FSDP
            bucket_cap_mb = gradient_as_bucket_view = static_graph = None
        else:
            bucket_cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
            gradient_as_bucket_view = bool(gradient_as_bucket_view)
            static_graph = bool(static_graph)
        if static_graph and grad_accum > 1:  # refused when made, not when read: older studies stored some
            raise ValueError(STATIC_GRAPH_WITH_ACCUMULATION)
        global_batch = batch_size * grad_accum * world_size
        return cls(
            batch_size=batch_size,
            grad_accum=grad_accum,
            lr_scaling=lr_scaling,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            pin_memory=pin_memory,
            amp=amp,
            activation_checkpointing=activation_checkpointing,
            bucket_cap_mb=bucket_cap_mb,
            world_size=world_size,
            threads_per_rank=threads_per_rank,
            compile=compile,
            sharding=sharding,
            gradient_as_bucket_view=gradient_as_bucket_view,
            static_graph=static_graph,
            env=dict(env or {}),
            hyperparameters=dict(hyperparameters or {}),
            device=device,
            base_lr=base_lr,
            base_batch_size=base_batch_size,
            global_batch=global_batch,
            lr=scaled_lr(base_lr, base_batch_size, global_batch, lr_scaling),
        )

    @model_validator(mode="after")
    def _consistent(self) -> TrialConfig:
        if self.global_batch != self.batch_size * self.grad_accum * self.world_size:
            raise ValueError("global_batch must equal batch_size * grad_accum * world_size")
        expected = scaled_lr(self.base_lr, self.base_batch_size, self.global_batch, self.lr_scaling)
        if not math.isclose(self.lr, expected, rel_tol=1e-9):
            raise ValueError(
                f"lr {self.lr} does not follow lr_scaling {self.lr_scaling} (expected {expected})"
            )
        if (self.num_workers == 0) != (self.prefetch_factor is None):
            raise ValueError("prefetch_factor is set exactly when num_workers > 0")
        if self.device == "cpu" and (self.amp == "fp16" or self.pin_memory):
            raise ValueError("fp16 and pin_memory need device cuda")
        ddp_knobs = (self.bucket_cap_mb, self.gradient_as_bucket_view, self.static_graph)
        if (self.sharding == "ddp") != all(v is not None for v in ddp_knobs):
            raise ValueError(
                "bucket_cap_mb, gradient_as_bucket_view and static_graph are set exactly when sharding is ddp"
            )
        if isinstance(self.threads_per_rank, int) and self.threads_per_rank < 1:
            raise ValueError("threads_per_rank must be at least 1, or auto")
        return self

    def knobs(self) -> dict[str, object]:
        """The knob values (no derived values, no env), e.g. for ``--set`` or a baseline override."""
        from autotune.knobs import KNOBS

        return {name: getattr(self, name) for name in KNOBS}

    def short(self) -> str:
        """A compact one-line description for tables and logs."""
        parts = [f"bs={self.batch_size}"]
        if self.grad_accum != 1:
            parts.append(f"accum={self.grad_accum}")
        parts.append(f"ws={self.world_size}")
        parts.append(f"workers={self.num_workers}")
        if self.prefetch_factor is not None:
            parts.append(f"prefetch={self.prefetch_factor}")
        if self.amp != "off":
            parts.append(f"amp={self.amp}")
        if self.activation_checkpointing:
            parts.append("ckpt")
        if self.pin_memory:
            parts.append("pin")
        if self.bucket_cap_mb is not None:
            parts.append(f"bucket={self.bucket_cap_mb}MB")
        if self.threads_per_rank != "auto":
            parts.append(f"threads={self.threads_per_rank}")
        if self.compile != "off":
            parts.append(f"compile={self.compile}")
        if self.sharding != "ddp":
            parts.append(self.sharding)
        if self.gradient_as_bucket_view:
            parts.append("grad_view")
        if self.static_graph:
            parts.append("static_graph")
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        parts += [f"{k}={_short_value(v)}" for k, v in self.hyperparameters.items() if k != "base_lr"]
        parts.append(f"lr={self.lr:.3g}")
        return " ".join(parts)


def _short_value(value: Any) -> str:
    """A hyperparameter value in :meth:`TrialConfig.short`: floats with 3 significant digits."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_short_value(v) for v in value) + "]"
    return str(value)
