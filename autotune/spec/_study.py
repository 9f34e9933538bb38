"""The study file: pydantic models of study.yaml, loading, validation and the JSON schema.

Everything a user writes in a study file is parsed here, once, into typed objects. Every mistake is
reported as one :class:`~autotune.errors.StudyFileError` line naming the file, the field path and the fix.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from autotune.errors import StudyFileError
from autotune.knobs import KNOBS, KnobDef

__all__ = [
    "BudgetSpec",
    "Choices",
    "ConfirmSpec",
    "ConstraintsSpec",
    "Fixed",
    "FloatRange",
    "HyperparameterSpec",
    "IntRange",
    "KnobSpec",
    "LauncherSpec",
    "ObjectiveSpec",
    "PrunerSpec",
    "SamplerSpec",
    "SearchSpaceSpec",
    "StudySpec",
    "TrialLimits",
    "WorkloadSpec",
    "apply_overrides",
    "load_spec",
    "parse_spec",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)

Metric = Literal["throughput", "peak_memory_mb", "loss", "eval_loss", "time_to_loss"]
Direction = Literal["maximize", "minimize"]
SamplerName = Literal["tpe", "gp", "nsga2", "random", "grid", "cmaes", "qmc"]
PrunerName = Literal["best", "median", "percentile", "hyperband", "successive_halving", "none"]

# Names a metric has in the study file -> the unit-carrying name it is stored under.
METRIC_KEYS: dict[str, str] = {
    "throughput": "throughput_samples_s",
    "peak_memory_mb": "peak_memory_mb",
    "loss": "loss",
    "eval_loss": "eval_loss",
    "time_to_loss": "time_to_loss_s",
}
_NATURAL_DIRECTION = {
    "throughput": "maximize", "peak_memory_mb": "minimize", "loss": "minimize", "eval_loss": "minimize",
    "time_to_loss": "minimize",
}


# --------------------------------------------------------------------------------------------- knobs
class Fixed(BaseModel):
    """A knob fixed to one value (``amp: bf16``)."""

    model_config = _STRICT
    value: Any


class Choices(BaseModel):
    """A categorical knob (``amp: {choices: [off, bf16]}``)."""

    model_config = _STRICT
    choices: tuple[Any, ...]


class IntRange(BaseModel):
    """An integer range (``batch_size: {low: 16, high: 512, log: true}``); ``step`` only without ``log``."""

    model_config = _STRICT
    low: int
    high: int
    log: bool = False
    step: int = 1


KnobSpec = Fixed | Choices | IntRange


def _knob_schema(knob: KnobDef) -> dict[str, Any]:
    if knob.type is int and knob.words:
        scalar: dict[str, Any] = {"anyOf": [{"type": "integer", "minimum": knob.minimum}, {"enum": list(knob.words)}]}
    elif knob.type is int:
        scalar = {"type": "integer", "minimum": knob.minimum}
    elif knob.type is bool:
        scalar = {"type": "boolean"}
    else:
        scalar = {"enum": list(knob.values or ())}
    options: list[dict[str, Any]] = [
        scalar,
        {
            "type": "object",
            "properties": {"choices": {"type": "array", "items": scalar, "minItems": 1}},
            "required": ["choices"],
            "additionalProperties": False,
        },
    ]
    if knob.ranged:
        options.append(
            {
                "type": "object",
                "properties": {
                    "low": {"type": "integer", "minimum": knob.minimum},  # a range takes integers, never auto
                    "high": {"type": "integer", "minimum": knob.minimum},
                    "log": {"type": "boolean"},
                    "step": {"type": "integer", "minimum": 1},
                },
                "required": ["low", "high"],
                "additionalProperties": False,
            }
        )
    return {"description": knob.help, "anyOf": options}


def _knob_field(name: str) -> Any:
    knob = KNOBS[name]
    return Annotated[KnobSpec | None, WithJsonSchema(_knob_schema(knob)), Field(description=knob.help)]


def parse_knob(knob: KnobDef, raw: Any) -> KnobSpec:
    """Parse one knob's study-file value (plain value, ``{choices}`` or ``{low, high}``) into a KnobSpec."""
    if isinstance(raw, KnobSpec.__args__):
        return raw
    if isinstance(raw, Mapping):
        keys = set(raw)
        if keys == {"value"}:  # a fixed knob as a dumped spec writes it (calibrate(spec, **overrides))
            return Fixed(value=knob.check_value(raw["value"]))
        if "choices" in keys:
            extra = keys - {"choices"}
            if extra:
                raise ValueError(
                    f"unexpected key {sorted(extra)[0]!r} beside 'choices'; give either choices or low/high"
                )
            choices = raw["choices"]
            if not isinstance(choices, list):
                raise ValueError("choices must be a list, e.g. {choices: [a, b]}")
            if not choices:
                raise ValueError("choices is empty; list at least one value")
            for i, value in enumerate(choices):
                try:
                    knob.check_value(value)
                except ValueError as e:
                    raise ValueError(f"choices[{i}]: {e}") from None
            if len(set(map(repr, choices))) != len(choices):
                raise ValueError("choices lists a value twice; list each value once")
            return Choices(choices=tuple(choices))
        if not knob.ranged:
            raise ValueError(f"{knob.name} takes a value or {{choices: [...]}}, not a range; values: "
                             f"{knob.describe_type()}")
        allowed = {"low", "high", "log", "step"}
        unknown = sorted(keys - allowed)
        if unknown:
            hint = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
            fix = f"did you mean {hint[0]!r}?" if hint else "a range takes low, high, log, step"
            raise ValueError(f"unknown key {unknown[0]!r}; {fix}")
        for key in ("low", "high"):
            if key not in raw:
                raise ValueError(f"a range needs '{key}'; write {{low: L, high: H}} or {{choices: [...]}}")
            try:
                knob.check_value(raw[key])
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None
        low, high = raw["low"], raw["high"]
        for key, bound in (("low", low), ("high", high)):
            if isinstance(bound, str):
                raise ValueError(f"{key}: a range takes integers, not {bound!r}; write {bound} as a plain value "
                                 f"or inside {{choices: [...]}}")
        log = raw.get("log", False)
        step = raw.get("step", 1)
        if not isinstance(log, bool):
            raise ValueError(f"log: {log!r} is not true or false; give true or false")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(f"step: {step!r} is not a positive integer")
        if low > high:
            raise ValueError(f"low ({low}) is greater than high ({high}); make low <= high")
        if log and low < 1:
            raise ValueError(f"a log range needs low >= 1 (got {low}); raise low or drop log")
        if (high - low) % step:
            below = low + (high - low) // step * step
            raise ValueError(
                f"high ({high}) - low ({low}) is not a multiple of step ({step}); use high: {below} or {below + step}"
            )
        if log and step != 1:
            raise ValueError("step cannot be combined with log: true; drop one of them")
        return IntRange(low=low, high=high, log=log, step=step)
    if isinstance(raw, list):
        raise ValueError(f"a bare list is ambiguous; write {{choices: {raw}}}")
    if raw is None:
        raise ValueError(f"no value given; give {knob.describe_type()}, {{choices: [...]}} or remove the key")
    return Fixed(value=knob.check_value(raw))


class SearchSpaceSpec(BaseModel):
    """Which knobs are searched and over what. Absent knobs keep their defaults."""

    model_config = _STRICT

    batch_size: _knob_field("batch_size") = None  # type: ignore[valid-type]
    grad_accum: _knob_field("grad_accum") = None  # type: ignore[valid-type]
    lr_scaling: _knob_field("lr_scaling") = None  # type: ignore[valid-type]
    num_workers: _knob_field("num_workers") = None  # type: ignore[valid-type]
    prefetch_factor: _knob_field("prefetch_factor") = None  # type: ignore[valid-type]
    pin_memory: _knob_field("pin_memory") = None  # type: ignore[valid-type]
    amp: _knob_field("amp") = None  # type: ignore[valid-type]
    activation_checkpointing: _knob_field("activation_checkpointing") = None  # type: ignore[valid-type]
    bucket_cap_mb: _knob_field("bucket_cap_mb") = None  # type: ignore[valid-type]
    world_size: _knob_field("world_size") = None  # type: ignore[valid-type]
    threads_per_rank: _knob_field("threads_per_rank") = None  # type: ignore[valid-type]
    compile: _knob_field("compile") = None  # type: ignore[valid-type]
    sharding: _knob_field("sharding") = None  # type: ignore[valid-type]
    gradient_as_bucket_view: _knob_field("gradient_as_bucket_view") = None  # type: ignore[valid-type]
    static_graph: _knob_field("static_graph") = None  # type: ignore[valid-type]

    @field_validator("*", mode="before")
    @classmethod
    def _parse(cls, raw: Any, info: Any) -> KnobSpec:
        return parse_knob(KNOBS[info.field_name], raw)

    def knobs(self) -> dict[str, KnobSpec]:
        """The knobs named in the study file, in table order."""
        return {name: spec for name in KNOBS if (spec := getattr(self, name)) is not None}

    def values_of(self, name: str) -> tuple[Any, ...] | None:
        """Every value a knob can take, or None for a range (``None`` knob: its default)."""
        spec = getattr(self, name)
        if spec is None:
            return None
        if isinstance(spec, Fixed):
            return (spec.value,)
        if isinstance(spec, Choices):
            return spec.choices
        return None


# --------------------------------------------------------------------------------------------- hyperparameters
class FloatRange(BaseModel):
    """A float range of a hyperparameter (``{low: 1e-5, high: 1e-2, log: true}``); ``step`` only without ``log``."""

    model_config = _STRICT
    low: float
    high: float
    log: bool = False
    step: float | None = None


HyperparameterSpec = Fixed | Choices | IntRange | FloatRange

#: ``hyperparameters:`` names that are not build() arguments: the learning rate lr_scaling scales, and
#: keyword arguments of the workload's optimizer factory (``optimizer.weight_decay``).
BASE_LR = "base_lr"
OPTIMIZER_PREFIX = "optimizer."
_HP_NAME_RE = re.compile(r"(optimizer\.)?[A-Za-z_][A-Za-z0-9_]*")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_hyperparameter(raw: Any) -> HyperparameterSpec:
    """Parse one ``hyperparameters:`` entry: a plain value (fixed), ``{value: ...}`` (a fixed list or
    mapping), ``{choices: [...]}``, or ``{low, high[, log, step]}`` (integer when both ends are integers)."""
    if isinstance(raw, HyperparameterSpec.__args__):
        return raw
    if isinstance(raw, list):
        raise ValueError(f"a bare list is ambiguous; write {{choices: {raw}}} to search or {{value: {raw}}} to fix it")
    if raw is None:
        raise ValueError("no value given; give a value, {choices: [...]}, {low: L, high: H} or remove the key")
    if not isinstance(raw, Mapping):
        return Fixed(value=raw)
    keys = set(raw)
    if "value" in keys:
        if keys != {"value"}:
            raise ValueError("'value' fixes a hyperparameter; give it alone, without choices or low/high")
        return Fixed(value=raw["value"])
    if "choices" in keys:
        if keys != {"choices"}:
            raise ValueError(f"unexpected key {sorted(keys - {'choices'})[0]!r} beside 'choices'; give either "
                             "choices or low/high")
        choices = raw["choices"]
        if not isinstance(choices, list):
            raise ValueError("choices must be a list, e.g. {choices: [a, b]}")
        if not choices:
            raise ValueError("choices is empty; list at least one value")
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices lists a value twice; list each value once")
        return Choices(choices=tuple(choices))
    allowed = {"low", "high", "log", "step"}
    unknown = sorted(keys - allowed)
    if unknown:
        hint = difflib.get_close_matches(unknown[0], sorted(allowed | {"choices", "value"}), n=1)
        fix = (f"did you mean {hint[0]!r}?" if hint
               else "give {low, high[, log, step]}, {choices: [...]} or {value: ...} (a fixed mapping)")
        raise ValueError(f"unknown key {unknown[0]!r}; {fix}")
    for key in ("low", "high"):
        if key not in raw:
            raise ValueError(f"a range needs '{key}'; write {{low: L, high: H}} or {{choices: [...]}}")
        if not _is_number(raw[key]):
            raise ValueError(f"{key}: {raw[key]!r} is not a number; give a number")
    low, high = raw["low"], raw["high"]
    log, step = raw.get("log", False), raw.get("step")
    if not isinstance(log, bool):
        raise ValueError(f"log: {log!r} is not true or false; give true or false")
    if step is not None and (not _is_number(step) or step <= 0):
        raise ValueError(f"step: {step!r} is not a positive number")
    if low > high:
        raise ValueError(f"low ({low}) is greater than high ({high}); make low <= high")
    if log and step is not None:
        raise ValueError("step cannot be combined with log: true; drop one of them")
    if isinstance(low, int) and isinstance(high, int) and (step is None or isinstance(step, int)):
        if log and low < 1:
            raise ValueError(f"an integer log range needs low >= 1 (got {low}); raise low or drop log")
        step = step or 1
        if (high - low) % step:
            raise ValueError(f"high ({high}) - low ({low}) is not a multiple of step ({step}); adjust high")
        return IntRange(low=low, high=high, log=log, step=step)
    if log and low <= 0:
        raise ValueError(f"a log range needs low > 0 (got {low}); raise low or drop log")
    return FloatRange(low=float(low), high=float(high), log=log, step=None if step is None else float(step))


def _hyperparameter_schema() -> dict[str, Any]:
    number = {"type": "number"}
    return {
        "description": "a fixed value, {value: ...}, {choices: [...]} or {low, high[, log, step]}",
        "anyOf": [
            {"type": ["string", "number", "boolean"]},
            {"type": "object", "properties": {"value": {}}, "required": ["value"], "additionalProperties": False},
            {"type": "object", "properties": {"choices": {"type": "array", "minItems": 1}},
             "required": ["choices"], "additionalProperties": False},
            {"type": "object", "properties": {"low": number, "high": number, "log": {"type": "boolean"},
                                              "step": number},
             "required": ["low", "high"], "additionalProperties": False},
        ],
    }


HyperparameterField = Annotated[
    HyperparameterSpec, BeforeValidator(parse_hyperparameter), WithJsonSchema(_hyperparameter_schema())
]


def split_hyperparameters(values: Mapping[str, Any]) -> tuple[dict[str, Any], float | None, dict[str, Any]]:
    """``(build() keyword arguments, base_lr or None, optimizer keyword arguments)`` of hyperparameter values."""
    build = {k: v for k, v in values.items() if k != BASE_LR and not k.startswith(OPTIMIZER_PREFIX)}
    optimizer = {k.removeprefix(OPTIMIZER_PREFIX): v for k, v in values.items() if k.startswith(OPTIMIZER_PREFIX)}
    base_lr = values.get(BASE_LR)
    return build, (None if base_lr is None else float(base_lr)), optimizer


# --------------------------------------------------------------------------------------------- env
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Variables autotune sets in every rank itself (the rendezvous, the thread count, the leased GPUs, the
#: trial's Python path); an ``env:`` entry naming one is refused with what to use instead.
RESERVED_ENV: dict[str, str] = {
    **{name: "the launcher sets it in every rank" for name in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
        "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")},
    **{name: "from the threads_per_rank knob; set search_space.threads_per_rank instead"
       for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
    "CUDA_VISIBLE_DEVICES": "to the GPUs a trial leases",
    "PYTHONPATH": "to the study's folder",
    "PYTHONUNBUFFERED": "so that rank logs are complete",
}
_RESERVED_ENV_PREFIXES = ("TORCHELASTIC_", "SLURM_", "AUTOTUNE_")

EnvSpec = Fixed | Choices


def parse_env(raw: Any) -> dict[str, EnvSpec]:
    """Parse the ``env:`` section: ``NAME: value`` fixes a variable, ``NAME: {choices: [...]}`` searches it.

    Values are strings (quote numbers: ``"4194304"``); names are variable names autotune does not set itself.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"expected a mapping of NAME: value, got {_yaml_type(raw)}; write e.g. env: {{NCCL_ALGO: Ring}}"
        )
    out: dict[str, EnvSpec] = {}
    for name, value in raw.items():
        if isinstance(value, (Fixed, Choices)):
            out[name] = value
            continue
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name; use letters, digits and '_'")
        why = RESERVED_ENV.get(name) or next(
            (f"its launchers set {p}* variables" for p in _RESERVED_ENV_PREFIXES if name.startswith(p)),
            None,
        )
        if why:
            raise ValueError(f"{name}: autotune sets this variable itself ({why}); remove it from env")
        if isinstance(value, Mapping):
            if set(value) != {"choices"}:
                raise ValueError(f"{name}: give a string or {{choices: [...]}} (got keys {sorted(map(str, value))})")
            choices = value["choices"]
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"{name}: choices must be a non-empty list of strings")
            for i, c in enumerate(choices):
                if not isinstance(c, str):
                    raise ValueError(f"{name}: choices[{i}]: {c!r} is not a string; quote it: '{c}'")
            if len(set(choices)) != len(choices):
                raise ValueError(f"{name}: choices lists a value twice; list each value once")
            out[name] = Choices(choices=tuple(choices))
        elif isinstance(value, str):
            out[name] = Fixed(value=value)
        else:
            shown = "true" if value is True else "false" if value is False else repr(value)
            raise ValueError(f"{name}: {shown} is not a string; environment values are strings, quote it: '{shown}'")
    return out


def _env_schema() -> dict[str, Any]:
    text = {"type": "string"}
    return {
        "description": "environment variables set in every rank: NAME: value (fixed) or NAME: {choices: [...]}",
        "type": "object",
        "propertyNames": {"pattern": _ENV_NAME_RE.pattern},
        "additionalProperties": {
            "anyOf": [
                text,
                {
                    "type": "object",
                    "properties": {"choices": {"type": "array", "items": text, "minItems": 1}},
                    "required": ["choices"],
                    "additionalProperties": False,
                },
            ]
        },
    }


EnvField = Annotated[dict[str, EnvSpec], BeforeValidator(parse_env), WithJsonSchema(_env_schema())]


# --------------------------------------------------------------------------------------------- the rest
class WorkloadSpec(BaseModel):
    """What to train: a ``module:function`` or ``path/to/file.py:function`` returning an autotune.Workload."""

    model_config = _STRICT
    entrypoint: str = Field(
        description="'package.module:function' or 'path/to/file.py:function' (relative to the study file)",
        examples=["autotune.workloads.mlp:build"],
    )
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the function")

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_shape(cls, value: str) -> str:
        if not re.fullmatch(r"[^:\s]+:[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                f"{value!r} is not 'module:function' or 'path/to/file.py:function'; "
                "write e.g. autotune.workloads.mlp:build"
            )
        return value


class LauncherSpec(BaseModel):
    """Where trials run: ``local`` (torchrun on this machine) or ``slurm`` (srun in an allocation)."""

    model_config = _STRICT
    kind: Literal["local", "slurm"] = Field("local", description="local | slurm")
    device: Literal["cpu", "cuda", "auto"] = Field("cpu", description="cpu | cuda | auto")
    start: Literal["warm", "torchrun"] = Field(
        "warm",
        description="local: fork ranks from a warm interpreter (fast) or start a cold torchrun per trial",
    )
    nodes: int = Field(1, ge=1, description="SLURM: nodes per trial")
    partition: str | None = Field(None, description="SLURM: partition to submit to")
    time: str | None = Field(None, description="SLURM: time limit of the allocation, e.g. 00:10:00")
    srun_args: tuple[str, ...] = Field((), description="SLURM: extra srun arguments")

    @model_validator(mode="after")
    def _slurm_only(self) -> LauncherSpec:
        if self.kind != "slurm":
            for key in ("partition", "time"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} only applies to kind: slurm; remove it or set kind: slurm")
            if self.nodes != 1:
                raise ValueError("nodes only applies to kind: slurm; remove it or set kind: slurm")
            if self.srun_args:
                raise ValueError("srun_args only applies to kind: slurm; remove it or set kind: slurm")
        return self


class TrialLimits(BaseModel):
    """How long one trial runs and what it measures."""

    model_config = _STRICT
    warmup_steps: int = Field(3, ge=0, description="steps excluded from every measurement")
    max_steps: int = Field(40, ge=1, description="optimizer steps per trial")
    max_seconds: float = Field(60.0, gt=0, description="wall-clock cap per trial, start-up included")
    samples: int | None = Field(
        None, gt=0, description="stop once this many samples are seen, so loss compares at equal samples"
    )
    report_every: int | None = Field(
        None, ge=1, description="steps per reporting window (default: about 8 windows per trial)"
    )
    hang_seconds: float = Field(
        20.0, gt=0, description="a started trial silent this long is a hang and is killed"
    )

    @model_validator(mode="after")
    def _warmup_below_max(self) -> TrialLimits:
        if self.warmup_steps >= self.max_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be below max_steps ({self.max_steps}); "
                "lower warmup_steps or raise max_steps"
            )
        return self

    def window(self) -> int:
        """Steps per reporting window."""
        if self.report_every is not None:
            return self.report_every
        return max(1, (self.max_steps - self.warmup_steps) // 8)


class ObjectiveSpec(BaseModel):
    """One objective: a metric and its direction."""

    model_config = _STRICT
    metric: Metric = Field(
        description="throughput (samples/s) | peak_memory_mb | loss | eval_loss (held-out, at the end) | "
        "time_to_loss (seconds to target:)"
    )
    direction: Direction | None = Field(
        None, description="maximize | minimize (default: the metric's natural)"
    )
    target: float | None = Field(
        None, description="time_to_loss: the training loss to reach; seconds of training to reach it are scored"
    )

    @model_validator(mode="after")
    def _natural(self) -> ObjectiveSpec:
        if self.metric == "time_to_loss" and self.target is None:
            raise ValueError("time_to_loss needs target: the loss to reach, e.g. {metric: time_to_loss, target: 0.5}")
        if self.metric != "time_to_loss" and self.target is not None:
            raise ValueError(f"target only applies to metric time_to_loss, not {self.metric}; remove it")
        if self.target is not None and not math.isfinite(self.target):
            raise ValueError(f"target: {self.target} is not a finite number; give the loss to reach")
        natural = _NATURAL_DIRECTION[self.metric]
        if self.direction is None:
            object.__setattr__(self, "direction", natural)
        elif self.direction != natural:
            raise ValueError(
                f"{self.metric} can only be {natural}d here (got {self.direction}); set direction: {natural}"
            )
        return self

    @property
    def key(self) -> str:
        """The unit-carrying name the metric is stored under (``throughput_samples_s``)."""
        return METRIC_KEYS[self.metric]


class ConstraintsSpec(BaseModel):
    model_config = _STRICT
    max_memory_mb: float | None = Field(
        None, gt=0, description="peak memory budget per rank; a trial over it is infeasible"
    )


class SamplerSpec(BaseModel):
    model_config = _STRICT
    name: SamplerName = Field(
        "gp", description="gp (Gaussian-process Bayesian optimisation) | tpe | nsga2 | random | grid | cmaes | qmc"
    )
    seed: int | None = Field(None, description="random seed of the sampler")
    n_startup_trials: int | None = Field(None, ge=0, description="random trials before the model kicks in")


class PrunerSpec(BaseModel):
    model_config = _STRICT
    name: PrunerName = Field(
        "best", description="best | median | percentile | hyperband | successive_halving | none"
    )
    n_startup_trials: int | None = Field(
        None, ge=0, description="complete trials needed before pruning starts (default: best 1, median/percentile 3)"
    )
    percentile: float = Field(25.0, gt=0, lt=100, description="percentile pruner: keep the best P percent")
    margin: float = Field(
        0.1, ge=0, lt=1,
        description="best/median/percentile: prune only when worse than the threshold by this fraction (noise)",
    )

    def startup_trials(self) -> int:
        """Complete trials needed before pruning starts: as set, else 1 for ``best`` (the baseline is the
        first comparison) and 3 for the others."""
        if self.n_startup_trials is not None:
            return self.n_startup_trials
        return 1 if self.name == "best" else 3


class BudgetSpec(BaseModel):
    model_config = _STRICT
    n_trials: int | None = Field(
        20, ge=1, description="trials to run (the baseline included); null: no limit (until timeout_s or Ctrl-C)"
    )
    timeout_s: float | None = Field(
        None, gt=0, description="seconds for the search and the confirmation runs together; null: no limit"
    )


class ConfirmSpec(BaseModel):
    """Re-runs of the best configurations at the end, so noise does not pick the winner."""

    model_config = _STRICT
    top_k: int = Field(3, ge=0, description="configurations re-measured at the end (0: no confirmation)")
    repeats: int = Field(2, ge=1, description="extra runs of each")


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class StudySpec(BaseModel):
    """A whole study file."""

    model_config = _STRICT
    name: str = Field(description="Optuna study name: letters, digits, '.', '_' and '-'")
    storage: str | None = Field(
        None, description="SQLAlchemy URL; default: an SQLite file beside the study file"
    )
    workload: WorkloadSpec
    launcher: LauncherSpec = Field(default_factory=LauncherSpec)
    search_space: SearchSpaceSpec = Field(default_factory=SearchSpaceSpec)
    hyperparameters: dict[str, HyperparameterField] = Field(
        default_factory=dict,
        description="keyword arguments of the workload's build(), base_lr and optimizer.<kwarg>: fixed or "
        "searched (Optuna params hp.<name>)",
    )
    trial: TrialLimits = Field(default_factory=TrialLimits)
    objectives: tuple[ObjectiveSpec, ...] = Field(
        (ObjectiveSpec(metric="throughput"),), min_length=1, description="one: single objective; more: Pareto"
    )
    constraints: ConstraintsSpec = Field(default_factory=ConstraintsSpec)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    confirm: ConfirmSpec = Field(default_factory=ConfirmSpec)
    env: EnvField = Field(
        default_factory=dict,
        description="environment variables set in every rank; NAME: value fixes one, NAME: {choices: [...]} "
        "searches it (Optuna param env.NAME)",
    )
    baseline: dict[str, Any] = Field(
        default_factory=dict,
        description="knob values overriding the workload's default configuration for the baseline trial",
    )

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="<python>")
    _workload: Any = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a safe study name; use letters, digits, '.', '_' and '-' "
                "(no '/', no spaces, starting with a letter or digit)"
            )
        return value

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except (ArgumentError, ValueError):  # ValueError: a port that is not a number
            raise ValueError(
                f"{_redact(value)!r} is not a database URL; write e.g. sqlite:///study.db or "
                "postgresql+psycopg://user@host/db"
            ) from None
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql", "mysql"):
            raise ValueError(f"unsupported database {backend!r}; use sqlite, postgresql or mysql")
        if backend == "sqlite" and not url.database:
            raise ValueError("an SQLite URL needs a file: sqlite:///path/to/study.db")
        if backend != "sqlite" and not url.host and not url.query.get("host"):
            raise ValueError(f"a {backend} URL needs a host: {backend}+driver://user@host/database")
        return value

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline_knobs(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError("baseline must be a mapping of knob: value")
        for key, knob_value in value.items():
            if key not in KNOBS:
                raise ValueError(_unknown_knob_message(str(key)))
            try:
                KNOBS[key].check_value(knob_value)
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from None
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> StudySpec:
        for name, hp in self.hyperparameters.items():
            if not _HP_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"hyperparameters: {name!r} is not a keyword argument name; give a build() argument, "
                    "base_lr or optimizer.<argument>"
                )
            if name == BASE_LR and not _positive_values(hp):
                raise ValueError(f"hyperparameters.{name}: the learning rate must be a positive number")
        both = sorted(set(self.hyperparameters) & set(self.workload.args))
        if both:
            raise ValueError(
                f"hyperparameters.{both[0]}: also given in workload.args; give it in one place"
            )
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError("objectives: a metric is listed twice; list each metric once")
        multi = len(self.objectives) > 1
        if multi and self.sampler.name == "cmaes":
            raise ValueError("sampler.name: cmaes handles one objective only; use nsga2, tpe or gp")
        if self.launcher.device == "cpu":
            amp = self.search_space.values_of("amp")
            if amp is not None and "fp16" in amp:
                raise ValueError(
                    "search_space.amp: fp16 needs CUDA (GradScaler); remove fp16 or set launcher.device: cuda"
                )
            pin = self.search_space.values_of("pin_memory")
            if pin is not None and True in pin:
                raise ValueError(
                    "search_space.pin_memory: pinned memory only helps on CUDA; remove true or set "
                    "launcher.device: cuda"
                )
            if self.baseline.get("amp") == "fp16":
                raise ValueError(
                    "baseline.amp: fp16 needs CUDA; use off or bf16, or set launcher.device: cuda"
                )
        self._check_nodes()
        self._check_compile()
        return self

    def _check_compile(self) -> None:
        """A compiled model compiles in its first step: that step must be a warm-up step, never measured."""
        modes = self.search_space.values_of("compile") or ()
        if self.baseline.get("compile", "off") != "off":
            modes = (*modes, self.baseline["compile"])
        if any(m != "off" for m in modes) and self.trial.warmup_steps < 1:
            raise ValueError(
                "trial.warmup_steps: compile compiles the model in the first step, which must not be measured; "
                "set warmup_steps: 1 or more"
            )

    def _check_nodes(self) -> None:
        """On SLURM a trial runs W / nodes ranks on each node: every world size must divide evenly."""
        nodes = self.launcher.nodes
        if self.launcher.kind != "slurm" or nodes == 1:
            return
        spec = self.search_space.world_size
        if isinstance(spec, IntRange):
            sizes: tuple[Any, ...] = tuple(range(spec.low, spec.high + 1, spec.step))
        else:
            sizes = self.search_space.values_of("world_size") or (KNOBS["world_size"].default,)
        odd = [w for w in sizes if w % nodes]
        if odd:
            raise ValueError(
                f"search_space.world_size: {odd[0]} ranks cannot be split over launcher.nodes ({nodes}); "
                f"give world sizes that are multiples of {nodes}, e.g. {{choices: [{nodes}, {2 * nodes}]}}"
            )
        baseline = self.baseline.get("world_size", KNOBS["world_size"].default)
        if baseline % nodes:
            raise ValueError(
                f"baseline.world_size: the baseline runs {baseline} rank(s), which cannot be split over "
                f"launcher.nodes ({nodes}); set baseline: {{world_size: {nodes}}}"
            )

    # -- resolved values --------------------------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the study file are resolved against (the study file's folder)."""
        return self._base_dir

    @property
    def source(self) -> str:
        """Where this spec came from, for messages: the study file's path or ``<python>``."""
        return self._source

    def storage_url(self) -> str:
        """The storage URL; relative SQLite paths are taken relative to the study file's folder."""
        if self.storage is None:
            return f"sqlite:///{(self.base_dir / (self.name + '.db')).resolve()}"
        from sqlalchemy.engine import make_url

        url = make_url(self.storage)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            path = Path(url.database)
            if not path.is_absolute():
                return str(url.set(database=str((self.base_dir / path).resolve())))
        return self.storage

    def runs_dir(self) -> Path:
        """Where trial folders go: ``runs/<study name>/`` beside the study file."""
        return self.base_dir / "runs" / self.name

    def bind(self, base_dir: Path, source: str) -> StudySpec:
        self._base_dir = base_dir
        self._source = source
        return self

    def load_workload(self) -> Any:
        """The :class:`autotune.Workload`: the entrypoint imported and called once, then cached."""
        if self._workload is None:
            from autotune.workload import load_workload

            hyperparameters = None
            if self.hyperparameters:
                # build() is called once here with the baseline's hyperparameter values (its own defaults).
                from autotune.search_space._hyper import HyperparameterSpace
                from autotune.workload import workload_function

                build = workload_function(self.workload.entrypoint, self.base_dir)
                hyperparameters = HyperparameterSpace.for_build(self.hyperparameters, build).defaults
            self._workload = load_workload(
                self.workload.entrypoint, self.workload.args, self.base_dir, hyperparameters
            )
        return self._workload

    def hyperparameter_space(self) -> Any:
        """The :class:`~autotune.search_space.HyperparameterSpace` of the study's ``hyperparameters:``, with
        the baseline's values: build()'s and the optimizer's defaults and the workload's base_lr."""
        from autotune.search_space._hyper import HyperparameterSpace
        from autotune.workload import keyword_defaults, workload_function

        if not self.hyperparameters:
            return HyperparameterSpace()
        workload = self.load_workload()
        return HyperparameterSpace.build(
            self.hyperparameters,
            build_defaults=keyword_defaults(workload_function(self.workload.entrypoint, self.base_dir)),
            base_lr=workload.base_lr,
            optimizer_defaults=keyword_defaults(workload.optimizer),
        )

    def space(self) -> Any:
        """The :class:`~autotune.search_space.SearchSpace` of this study on its resolved device."""
        from autotune.search_space import SearchSpace

        workload = self.load_workload()
        return SearchSpace.build(
            self.search_space, base_lr=workload.base_lr, base_batch_size=workload.base_batch_size,
            device=self.resolved_device(), env=self.env, hyper=self.hyperparameter_space(),
        )

    def resolved_device(self) -> str:
        """``cpu`` or ``cuda``; ``auto`` becomes cuda when torch sees a GPU."""
        if self.launcher.device != "auto":
            return self.launcher.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def _positive_values(spec: HyperparameterSpec) -> bool:
    if isinstance(spec, Fixed):
        return _is_number(spec.value) and spec.value > 0
    if isinstance(spec, Choices):
        return all(_is_number(c) and c > 0 for c in spec.choices)
    return spec.low > 0


def _redact(url: str) -> str:
    """The URL with any password (``user:PASSWORD@`` or ``?password=PASSWORD``) replaced by ***."""
    url = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def _unknown_knob_message(key: str) -> str:
    hint = difflib.get_close_matches(key, list(KNOBS), n=1)
    fix = f"did you mean {hint[0]!r}?" if hint else "knobs are: " + ", ".join(KNOBS)
    return f"unknown knob {key!r}; {fix}"


# --------------------------------------------------------------------------------------------- loading
class _Loader(yaml.SafeLoader):
    """A safe loader where only true/false are booleans (YAML 1.1 would read ``amp: off`` as false)."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _construct_undefined(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag!r} is not allowed (study files are plain data)", node.start_mark
    )


_Loader.add_constructor(None, _construct_undefined)


def read_yaml(text: str, source: str) -> Any:
    """Parse YAML text safely; syntax errors become one-line StudyFileErrors with the line number."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = e.problem or e.context or "invalid YAML"
        raise StudyFileError(f"{source}: {where}: {problem}; fix the YAML syntax") from None
    except yaml.YAMLError as e:
        raise StudyFileError(f"{source}: invalid YAML ({e}); fix the YAML syntax") from None


def load_spec(path: str | Path, overrides: Sequence[str] = (), check_workload: bool = True) -> StudySpec:
    """Read, validate and return a study file.

    ``overrides`` are ``key.path=value`` strings applied before validation (``trial.max_steps=10``).
    With ``check_workload`` the entrypoint is imported and called once, so a typo fails now, not in
    every trial; the knobs are checked against what the workload can honour.
    """
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StudyFileError(f"{source}: no such file; check the path") from None
    except IsADirectoryError:
        raise StudyFileError(f"{source}: is a folder; give the study .yaml file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise StudyFileError(f"{source}: cannot be read ({e.__class__.__name__}: {e})") from None
    document = read_yaml(text, source)
    spec = parse_spec(document, source=source, base_dir=path.resolve().parent, overrides=overrides)
    if check_workload:
        check_workload_fits(spec)
    return spec


def parse_spec(
    document: Any, source: str = "<python>", base_dir: Path | None = None, overrides: Sequence[str] = ()
) -> StudySpec:
    """Validate a study document (already parsed YAML or a dict) into a StudySpec."""
    if document is None:
        raise StudyFileError(f"{source}: the file is empty; write a study (see studies/quickstart.yaml)")
    if not isinstance(document, Mapping):
        raise StudyFileError(
            f"{source}: the document is a {_yaml_type(document)}, not a mapping; "
            "a study file is a mapping of keys such as name:, workload:, search_space:"
        )
    document = apply_overrides(dict(document), overrides, source)
    for key in document:
        if not isinstance(key, str):
            raise StudyFileError(f"{source}: {key!r}: keys must be strings; quote the key")
    try:
        spec = StudySpec.model_validate(document)
    except ValidationError as e:
        raise StudyFileError(f"{source}: {format_validation_error(e)}") from None
    return spec.bind(base_dir or Path.cwd(), source)


def check_workload_fits(spec: StudySpec) -> Any:
    """Import the workload and check the search space against it; returns the Workload."""
    from autotune.errors import WorkloadError

    try:
        _check_build_arguments(spec)
        workload = spec.load_workload()
    except WorkloadError as e:
        raise WorkloadError(f"{spec.source}: workload.entrypoint: {e}") from None
    _check_optimizer_hyperparameters(spec, workload)
    ckpt = spec.search_space.values_of("activation_checkpointing")
    wants_ckpt = (ckpt is not None and True in ckpt) or spec.baseline.get("activation_checkpointing") is True
    if wants_ckpt and not workload.checkpoint_modules:
        raise StudyFileError(
            f"{spec.source}: search_space.activation_checkpointing: the workload declares no "
            "checkpoint_modules; declare them in the Workload or fix this knob to false"
        )
    return workload


def _check_build_arguments(spec: StudySpec) -> None:
    """Each ``workload.args`` key and each ``hyperparameters:`` name that is a build() argument must be one
    of build()'s parameters: one line naming the field, the function and its parameters."""
    from autotune.workload import unknown_argument_message, unknown_arguments, workload_function

    build = workload_function(spec.workload.entrypoint, spec.base_dir)
    for name in unknown_arguments(build, list(spec.workload.args)):
        raise StudyFileError(
            f"{spec.source}: workload.args.{name}: {spec.workload.entrypoint}: {unknown_argument_message(build, name)}"
        )
    names = [n for n in spec.hyperparameters if n != BASE_LR and not n.startswith(OPTIMIZER_PREFIX)]
    for name in unknown_arguments(build, names):
        raise StudyFileError(
            f"{spec.source}: hyperparameters.{name}: {spec.workload.entrypoint}: "
            f"{unknown_argument_message(build, name)}"
        )


def _check_optimizer_hyperparameters(spec: StudySpec, workload: Any) -> None:
    """Each ``optimizer.<kwarg>`` must be a keyword argument of the workload's optimizer factory."""
    from autotune.workload import unknown_argument_message, unknown_arguments

    names = [n.removeprefix(OPTIMIZER_PREFIX) for n in spec.hyperparameters if n.startswith(OPTIMIZER_PREFIX)]
    for name in unknown_arguments(workload.optimizer, names, skip=2):
        raise StudyFileError(
            f"{spec.source}: hyperparameters.{OPTIMIZER_PREFIX}{name}: the workload's optimizer "
            f"{unknown_argument_message(workload.optimizer, name, skip=2)}; the factory is called as "
            "optimizer(params, lr, **kwargs)"
        )


def apply_overrides(document: dict[str, Any], overrides: Iterable[str], source: str) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides to a study document; the value is read as YAML (``x=[1, 2]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise StudyFileError(
                f"{source}: --set {item!r}: expected key=value, e.g. --set trial.max_steps=20"
            )
        value = read_yaml(raw, f"{source}: --set {key}") if raw.strip() else None
        parts = key.strip().split(".")
        node: dict[str, Any] = document
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, Mapping):
                raise StudyFileError(
                    f"{source}: --set {key}: {part!r} is not a mapping; "
                    "set a key under a mapping such as trial"
                )
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = value
    return document


def _yaml_type(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


# --------------------------------------------------------------------------------------------- errors
def _loc_str(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model that owns the last element of ``loc``, for listing its valid keys."""
    model: Any = StudySpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        is_model = isinstance(model, type) and issubclass(model, BaseModel)
        field = model.model_fields.get(part) if is_model else None
        if field is None:
            return None
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", None) or (annotation,)
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def format_validation_error(error: ValidationError) -> str:
    """One line for the first problem of a ValidationError: field path, what is wrong, the fix."""
    errors = error.errors(include_url=False)
    # Prefer the most specific location: pydantic lists union branches; the first is the one we raised.
    first = errors[0]
    loc = [p for p in first["loc"] if not (isinstance(p, str) and "[" in p)]
    etype = first["type"]
    where = _loc_str(loc) or "(top level)"
    message = str(first["msg"]).removeprefix("Value error, ")
    got = first.get("input")
    if etype == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc)
        if model is SearchSpaceSpec:
            message = _unknown_knob_message(key)
        else:
            valid = list(model.model_fields) if model else []
            hint = difflib.get_close_matches(key, valid, n=1)
            fix = f"did you mean {hint[0]!r}?" if hint else "valid keys here: " + ", ".join(valid)
            message = f"unknown key {key!r}; {fix}"
        where = _loc_str(loc)
    elif etype == "missing":
        message = "required key is missing; add it"
    elif etype == "literal_error":
        message = f"{got!r} is not valid; {str(first['msg']).replace('Input should be', 'use')}"
    elif etype in ("int_type", "int_parsing", "int_from_float"):
        message = f"{got!r} is not an integer; give a whole number"
    elif etype in ("float_type", "float_parsing"):
        message = f"{got!r} is not a number; give a number"
    elif etype in ("bool_type", "bool_parsing"):
        message = f"{got!r} is not true or false; give true or false"
    elif etype in ("string_type",):
        message = f"{got!r} is not a string; quote it"
    elif etype in ("model_type", "model_attributes_type", "dict_type"):
        message = f"expected a mapping, got {_yaml_type(got)} {got!r}; write key: value pairs"
    elif etype in ("tuple_type", "list_type"):
        message = f"expected a list, got {_yaml_type(got)} {got!r}; write a list: [a, b] or '- a' lines"
    elif etype in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = first.get("ctx", {})
        message = f"{got!r} is out of range ({str(first['msg']).lower()}); {_bound_fix(bound)}"
    elif etype == "too_short":
        message = "the list is empty; give at least one entry"
    if not loc and ":" in message.split(" ")[0]:
        where = ""  # a cross-field check names its own path
    # Count other problems only where they are elsewhere (pydantic reports one field's union branches too).
    head = tuple(first["loc"])
    more = len(
        {tuple(e["loc"][:2]) for e in errors[1:] if tuple(e["loc"]) != head[: len(e["loc"])]}
        - {head[:2]}
    )
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {message}{suffix}" if where else f"{message}{suffix}"


def _bound_fix(ctx: Mapping[str, Any]) -> str:
    if "gt" in ctx:
        return f"give a value above {ctx['gt']}"
    if "ge" in ctx:
        return f"give a value of at least {ctx['ge']}"
    if "lt" in ctx:
        return f"give a value below {ctx['lt']}"
    if "le" in ctx:
        return f"give a value of at most {ctx['le']}"
    return "give a value in range"
