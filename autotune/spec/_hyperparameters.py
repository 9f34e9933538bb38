"""Hyperparameter specs: the ``hyperparameters:`` section (build() arguments, base_lr, optimizer.<kwarg>).

A hyperparameter is handed to the user's code, a knob is applied by autotune itself; both are fixed or
searched with the same spec types, and a hyperparameter may also be a float range.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, WithJsonSchema

from autotune.spec._knobs import STRICT, Choices, Fixed, IntRange


class FloatRange(BaseModel):
    """A float range of a hyperparameter (``{low: 1e-5, high: 1e-2, log: true}``); ``step`` only without ``log``."""

    model_config = STRICT
    low: float
    high: float
    log: bool = False
    step: float | None = None


HyperparameterSpec = Fixed | Choices | IntRange | FloatRange

#: ``hyperparameters:`` names that are not build() arguments: the learning rate lr_scaling scales, and
#: keyword arguments of the workload's optimizer factory (``optimizer.weight_decay``).
BASE_LR = "base_lr"
OPTIMIZER_PREFIX = "optimizer."
HP_NAME_RE = re.compile(r"(optimizer\.)?[A-Za-z_][A-Za-z0-9_]*")


def is_number(value: Any) -> bool:
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
        if not is_number(raw[key]):
            raise ValueError(f"{key}: {raw[key]!r} is not a number; give a number")
    low, high = raw["low"], raw["high"]
    log, step = raw.get("log", False), raw.get("step")
    if not isinstance(log, bool):
        raise ValueError(f"log: {log!r} is not true or false; give true or false")
    if step is not None and (not is_number(step) or step <= 0):
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



def positive_values(spec: HyperparameterSpec) -> bool:
    if isinstance(spec, Fixed):
        return is_number(spec.value) and spec.value > 0
    if isinstance(spec, Choices):
        return all(is_number(c) and c > 0 for c in spec.choices)
    return spec.low > 0


def single_value(spec: HyperparameterSpec) -> bool:
    """Whether a spec (a knob's or a hyperparameter's: knob specs are a subset) admits one value only."""
    if isinstance(spec, Fixed):
        return True
    if isinstance(spec, Choices):
        return len(spec.choices) == 1
    return spec.low == spec.high


def only_value(spec: HyperparameterSpec) -> Any:
    """The one value of a spec for which :func:`single_value` holds."""
    if isinstance(spec, Fixed):
        return spec.value
    if isinstance(spec, Choices):
        return spec.choices[0]
    return spec.low


def baseline_values(specs: Mapping[str, HyperparameterSpec], known: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline's value of every hyperparameter: its single value, else its ``known`` default (build()'s
    or the optimizer's argument default, the workload's base_lr), else the middle of a range (the geometric
    middle of a log range) or the first choice."""
    defaults = {}
    for name, spec in specs.items():
        if single_value(spec):
            defaults[name] = only_value(spec)
        elif name in known:
            defaults[name] = known[name]
        else:
            defaults[name] = _middle(spec)
    return defaults


def _middle(spec: HyperparameterSpec) -> Any:
    if isinstance(spec, Choices):
        return spec.choices[0]
    if isinstance(spec, Fixed):
        return spec.value
    mid = math.sqrt(spec.low * spec.high) if spec.log else (spec.low + spec.high) / 2
    if isinstance(spec, IntRange):
        return int(min(spec.high, max(spec.low, spec.low + round((mid - spec.low) / spec.step) * spec.step)))
    if spec.step:
        mid = spec.low + round((mid - spec.low) / spec.step) * spec.step
    return float(min(spec.high, max(spec.low, mid)))
