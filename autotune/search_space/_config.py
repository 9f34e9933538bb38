"""TrialConfig: one point of the search space with its derived values, frozen and JSON round-tripping."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, create_model, model_validator

from autotune.knobs import DDP_ONLY, KNOBS, PIPELINE_ONLY, SHORT_ORDER, KnobDef, short_part

LrScaling = Literal["none", "linear", "sqrt"]
Device = Literal["cpu", "cuda"]


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


_MESH_DIVIDES = (
    "tensor_parallel x pipeline_parallel ({tensor_parallel} x {pipeline_parallel}) does not divide world_size "
    "({world_size}); give a world_size that is a multiple of their product"
)


def uses_ddp(values: Mapping[str, Any]) -> bool:
    """Whether a configuration's model is wrapped in DDP: sharding ddp on a mesh of data parallelism only (a
    tensor- or pipeline-parallel model is not, and DDP's own knobs mean nothing there, as under FSDP)."""
    return bool(values["sharding"] == "ddp" and values["tensor_parallel"] == 1 and values["pipeline_parallel"] == 1)


def _knob_field(knob: KnobDef) -> tuple[Any, Any]:
    """A knob's TrialConfig field, from the table: its type (None too where it can be unset), bounds, default."""
    kind: Any = Literal[knob.values] if knob.values is not None else knob.type
    if knob.words:
        kind = int | Literal[knob.words]
    # None unless sharding is ddp / pipeline_parallel > 1 / num_workers > 0
    unset = knob.ddp_only or knob.pipeline_only or knob.name == "prefetch_factor"
    if unset:
        kind = kind | None
    bound: dict[str, Any] = {"ge": knob.minimum} if knob.minimum is not None and not knob.words else {}
    # None where it can be unset: a configuration stored before the pipeline's knobs existed loads as no pipeline
    default = None if knob.name == "prefetch_factor" or knob.pipeline_only else knob.default
    if knob.default is None:  # batch_size: the workload's base_batch_size is the caller's to give
        return kind, Field(description=knob.help, **bound)
    return kind, Field(default, description=knob.help, **bound)


_FROZEN = ConfigDict(extra="forbid", frozen=True)
# Every knob of the table, in its order: a knob added to the table is a field of every TrialConfig.
_KnobFields: Any = create_model("_KnobFields", __config__=_FROZEN, **{  # type: ignore[call-overload]
    name: _knob_field(knob) for name, knob in KNOBS.items()
})


class TrialConfig(_KnobFields):
    """The knobs of one trial (a field per knob of :data:`autotune.knobs.KNOBS`) and the values derived from them.

    ``global_batch = batch_size * grad_accum * data_parallel`` (``data_parallel = world_size / (tensor_parallel *
    pipeline_parallel)``: the ranks of one tensor- and pipeline-parallel group train on the same batch) and
    ``lr = base_lr * f(global_batch / base_batch_size)``. Build one with :meth:`create`, which derives
    them; the validator refuses a config whose derived values disagree with its knobs.
    """

    model_config = _FROZEN

    if TYPE_CHECKING:  # the core knobs as type checkers see them; another knob of the table reads as Any
        batch_size: int
        grad_accum: int
        lr_scaling: LrScaling
        num_workers: int
        prefetch_factor: int | None
        pin_memory: bool
        amp: str
        activation_checkpointing: bool
        world_size: int
        threads_per_rank: int | Literal["auto"]
        compile: str
        sharding: str
        tensor_parallel: int
        pipeline_parallel: int
        pipeline_schedule: str | None
        pipeline_microbatches: int | None

        def __getattr__(self, name: str) -> Any: ...

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
        env: dict[str, str] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        device: Device = "cpu",
        **knobs: Any,
    ) -> TrialConfig:
        """A config from knob values (a knob not given takes the table's default; ``batch_size`` is needed),
        with prefetch unset without DataLoader workers and DDP's own knobs unset under FSDP."""
        unknown = sorted(set(knobs) - set(KNOBS))
        if unknown:
            raise TypeError(f"TrialConfig.create() got an unexpected keyword argument {unknown[0]!r}")
        values = {name: knobs.get(name, knob.default) for name, knob in KNOBS.items()}
        needed = [name for name, knob in KNOBS.items() if knob.default is None and values[name] is None]
        if needed:
            raise TypeError(f"TrialConfig.create() missing required keyword argument {needed[0]!r}")
        if values["num_workers"] == 0:
            values["prefetch_factor"] = None
        elif values["prefetch_factor"] is None:
            values["prefetch_factor"] = KNOBS["prefetch_factor"].default
        for name in DDP_ONLY:  # DDP's own knobs mean nothing under FSDP, nor on a tensor or pipeline mesh
            knob = KNOBS[name]
            if not uses_ddp(values):
                values[name] = None
            elif values[name] is None:
                values[name] = knob.default
            elif knob.type is bool:
                values[name] = bool(values[name])
        for name in PIPELINE_ONLY:  # the pipeline's own knobs mean nothing without a pipeline
            if values["pipeline_parallel"] == 1:
                values[name] = None
            elif values[name] is None:
                values[name] = KNOBS[name].default
        model_ranks = values["tensor_parallel"] * values["pipeline_parallel"]
        if values["world_size"] % model_ranks:
            raise ValueError(_MESH_DIVIDES.format(**values))
        if values["static_graph"] and values["grad_accum"] > 1:  # refused when made, not when read: older
            raise ValueError(STATIC_GRAPH_WITH_ACCUMULATION)  # studies stored some
        global_batch = values["batch_size"] * values["grad_accum"] * (values["world_size"] // model_ranks)
        return cls(
            **values,
            env=dict(env or {}),
            hyperparameters=dict(hyperparameters or {}),
            device=device,
            base_lr=base_lr,
            base_batch_size=base_batch_size,
            global_batch=global_batch,
            lr=scaled_lr(base_lr, base_batch_size, global_batch, values["lr_scaling"]),
        )

    @model_validator(mode="after")
    def _consistent(self) -> TrialConfig:
        if self.world_size % (self.tensor_parallel * self.pipeline_parallel):
            raise ValueError(_MESH_DIVIDES.format(**self.knobs()))
        if self.global_batch != self.batch_size * self.grad_accum * self.data_parallel:
            raise ValueError("global_batch must equal batch_size * grad_accum * data_parallel")
        expected = scaled_lr(self.base_lr, self.base_batch_size, self.global_batch, self.lr_scaling)
        if not math.isclose(self.lr, expected, rel_tol=1e-9):
            raise ValueError(
                f"lr {self.lr} does not follow lr_scaling {self.lr_scaling} (expected {expected})"
            )
        if (self.num_workers == 0) != (self.prefetch_factor is None):
            raise ValueError("prefetch_factor is set exactly when num_workers > 0")
        if self.device == "cpu" and (self.amp == "fp16" or self.pin_memory):
            raise ValueError("fp16 and pin_memory need device cuda")
        if uses_ddp(self.knobs()) != all(getattr(self, name) is not None for name in DDP_ONLY):
            raise ValueError(f"{', '.join(DDP_ONLY[:-1])} and {DDP_ONLY[-1]} are set exactly when sharding is ddp "
                             "and tensor_parallel and pipeline_parallel are 1")
        if (self.pipeline_parallel > 1) != all(getattr(self, name) is not None for name in PIPELINE_ONLY):
            raise ValueError(f"{' and '.join(PIPELINE_ONLY)} are set exactly when pipeline_parallel > 1")
        for name, knob in KNOBS.items():  # a number or a word: the word is the field's type, the bound is here
            value = getattr(self, name)
            if knob.words and isinstance(value, int) and knob.minimum is not None and value < knob.minimum:
                raise ValueError(f"{name} must be at least {knob.minimum}, or one of {', '.join(knob.words)}")
        return self

    @property
    def data_parallel(self) -> int:
        """The data-parallel degree: ``world_size / (tensor_parallel * pipeline_parallel)`` (the mesh's dp axis)."""
        return self.world_size // (self.tensor_parallel * self.pipeline_parallel)

    def knobs(self) -> dict[str, object]:
        """The knob values (no derived values, no env), e.g. for ``--set`` or a baseline override."""
        return {name: getattr(self, name) for name in KNOBS}

    def short(self) -> str:
        """A compact one-line description for tables and logs."""
        parts = [part for name in SHORT_ORDER if (part := short_part(KNOBS[name], getattr(self, name)))]
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
