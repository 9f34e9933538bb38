"""``constraints.global_batch``: the global batch a study holds (an integer, or ``{choices: [...]}`` of them).

Only splits ``batch_size x grad_accum x world_size`` equal to a held value are proposed
(:mod:`autotune.search_space`'s ``feasible_splits``), and the learning rate is the workload's ``base_lr`` in
every trial: the held global batch overrides ``lr_scaling``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from autotune.spec._knobs import Choices, Fixed

GlobalBatchSpec = Fixed | Choices

_EXAMPLE = "write e.g. global_batch: 256 or global_batch: {choices: [256, 512]}"


def _check(value: Any, where: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}{value!r} is not an integer; {_EXAMPLE}")
    if value < 1:
        raise ValueError(f"{where}{value} is below 1; a global batch is a positive number of samples")
    return value


def parse_global_batch(raw: Any) -> GlobalBatchSpec | None:
    """The study file's ``constraints.global_batch`` as a :class:`Fixed` (one value) or :class:`Choices`."""
    if raw is None or isinstance(raw, (Fixed, Choices)):
        return raw
    if isinstance(raw, Mapping):
        keys = set(raw)
        if keys == {"value"}:  # a dumped spec (Fixed)
            return Fixed(value=_check(raw["value"]))
        if keys != {"choices"}:
            raise ValueError(f"takes an integer or {{choices: [...]}}, not the keys {sorted(keys)}; {_EXAMPLE}")
        choices = raw["choices"]
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"choices must be a non-empty list of integers; {_EXAMPLE}")
        values = tuple(_check(v, f"choices[{i}]: ") for i, v in enumerate(choices))
        if len(set(values)) != len(values):
            raise ValueError("choices lists a value twice; list each global batch once")
        return Choices(choices=values)
    if isinstance(raw, list):
        raise ValueError(f"a bare list is ambiguous; write {{choices: {raw}}}")
    return Fixed(value=_check(raw))


def held_global_batches(spec: GlobalBatchSpec | None) -> tuple[int, ...]:
    """The global batches a study holds, in the order given; () when it holds none (the default)."""
    if spec is None:
        return ()
    if isinstance(spec, Fixed):
        return (int(spec.value),)
    return tuple(int(v) for v in spec.choices)


def stored_global_batches(stored_spec: Any) -> tuple[int, ...] | None:
    """The global batches a study held, read from the study file it stored (the ``autotune`` study attribute's
    ``spec``): () when it held none, None when there is no stored study file to read (or it cannot be read)."""
    if not isinstance(stored_spec, Mapping):
        return None
    constraints = stored_spec.get("constraints")
    try:
        raw = constraints.get("global_batch") if isinstance(constraints, Mapping) else None
        return held_global_batches(parse_global_batch(raw))
    except ValueError:
        return None


def _schema() -> dict[str, Any]:
    integer = {"type": "integer", "minimum": 1}
    return {
        "description": "hold the global batch (batch_size x grad_accum x data-parallel degree): an integer or "
                       "{choices: [...]}",
        "anyOf": [
            {"type": "null"},
            integer,
            {
                "type": "object",
                "properties": {"choices": {"type": "array", "items": integer, "minItems": 1}},
                "required": ["choices"],
                "additionalProperties": False,
            },
        ],
    }


GlobalBatchField = Annotated[GlobalBatchSpec | None, BeforeValidator(parse_global_batch), WithJsonSchema(_schema())]
