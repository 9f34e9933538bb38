"""Knob specs: how a study file fixes or searches a knob (Fixed, Choices, IntRange) and the search_space: section."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model, field_validator

from autotune.knobs import KNOBS, KnobDef

STRICT = ConfigDict(extra="forbid", frozen=True)  # every spec model: unknown keys refused, values frozen


class Fixed(BaseModel):
    """A knob fixed to one value (``amp: bf16``)."""

    model_config = STRICT
    value: Any


class Choices(BaseModel):
    """A categorical knob (``amp: {choices: [off, bf16]}``)."""

    model_config = STRICT
    choices: tuple[Any, ...]


class IntRange(BaseModel):
    """An integer range (``batch_size: {low: 16, high: 512, log: true}``); ``step`` only without ``log``."""

    model_config = STRICT
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


# A field per knob of the table, in its order: a knob added to the table is a key of every study file's search_space.
_KnobSpecFields: Any = create_model("_KnobSpecFields", __config__=STRICT, **{  # type: ignore[call-overload]
    name: (_knob_field(name), None) for name in KNOBS
})


class SearchSpaceSpec(_KnobSpecFields):
    """Which knobs are searched and over what. Absent knobs keep their defaults."""

    model_config = STRICT

    if TYPE_CHECKING:  # a knob's spec, as type checkers see it

        def __getattr__(self, name: str) -> KnobSpec | None: ...

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



def unknown_knob_message(key: str) -> str:
    """``unknown knob 'x'; did you mean 'y'?`` (or the list of knobs when nothing is close)."""
    hint = difflib.get_close_matches(key, list(KNOBS), n=1)
    fix = f"did you mean {hint[0]!r}?" if hint else "knobs are: " + ", ".join(KNOBS)
    return f"unknown knob {key!r}; {fix}"
