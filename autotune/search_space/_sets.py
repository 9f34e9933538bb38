"""``--set knob=value`` (``autotune trial``, ``calibrate``'s overrides) read against a study's search space."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import UsageError
from autotune.knobs import KNOBS
from autotune.search_space._device import CUDA_ONLY
from autotune.spec import Fixed, KnobSpec, parse_knob, read_yaml, unknown_knob_message

ENV_PARAM_PREFIX = "env."  # the Optuna param of a searched env: variable: env.NAME


def parse_sets(
    sets: list[str], *, env: Mapping[str, KnobSpec], fixed_env: Mapping[str, str], base_batch_size: int, device: str,
) -> dict[str, Any]:
    """Parse ``knob=value`` strings (``--set batch_size=64``) into checked knob values: ``env.NAME`` of the
    ``env`` section (the rest of the environment ``fixed_env``), on ``device``."""
    values: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise UsageError(f"--set {item!r}: expected knob=value, e.g. --set batch_size=64")
        if key.startswith(ENV_PARAM_PREFIX):
            var = key.removeprefix(ENV_PARAM_PREFIX)
            if var not in env:
                listed = ", ".join(ENV_PARAM_PREFIX + n for n in env) or "none"
                raise UsageError(f"--set {key}: {var} is not in the study's env: section (listed: {listed})")
            values.setdefault("env", dict(fixed_env))[var] = raw
            continue
        if key not in KNOBS:
            raise UsageError(f"--set {key}: {unknown_knob_message(key)}")
        try:
            parsed = parse_knob(KNOBS[key], read_yaml(raw, f"--set {key}"))
        except ValueError as e:
            raise UsageError(f"--set {key}: {e}") from None
        if not isinstance(parsed, Fixed):
            example = base_batch_size if key == "batch_size" else KNOBS[key].default
            raise UsageError(f"--set {key}: give one value, e.g. --set {key}={example}")
        if device != "cuda" and key in CUDA_ONLY and parsed.value == CUDA_ONLY[key]:
            raise UsageError(f"--set {key}: {parsed.value} needs CUDA; this study runs on {device}")
        values[key] = parsed.value
    return values
