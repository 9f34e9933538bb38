"""One line for a pydantic ValidationError of a study file: the field path, what is wrong and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune.spec._knobs import SearchSpaceSpec, unknown_knob_message
from autotune.spec._study import StudySpec
from autotune.spec._text import yaml_type


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
            message = unknown_knob_message(key)
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
        message = f"expected a mapping, got {yaml_type(got)} {got!r}; write key: value pairs"
    elif etype in ("tuple_type", "list_type"):
        message = f"expected a list, got {yaml_type(got)} {got!r}; write a list: [a, b] or '- a' lines"
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
