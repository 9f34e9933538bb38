"""Environment specs: the ``env:`` section, variables set in every rank, fixed or searched."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from autotune.spec._knobs import Choices, Fixed
from autotune.spec._text import yaml_type

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
            f"expected a mapping of NAME: value, got {yaml_type(raw)}; write e.g. env: {{NCCL_ALGO: Ring}}"
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
