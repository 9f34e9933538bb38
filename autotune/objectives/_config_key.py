"""A stable key of a configuration's ten knob values: equal configurations have equal keys."""

from __future__ import annotations

import json
from collections.abc import Mapping

from autotune.knobs import BASE_KNOBS, KNOBS


def config_key(config_json: Mapping[str, object]) -> str:
    """``batch_size=64,grad_accum=1,...``: the ten knobs in the knob table's order, then the others.

    Only knobs enter the key, not the derived values (``lr``, ``global_batch``) or ``device``, so float
    formatting of derived values never splits a configuration. A whole float knob value reads as the
    integer (64.0 -> ``64``); booleans are ``true``/``false`` and None is ``none``.
    """
    parts = []
    for name in BASE_KNOBS:
        if name not in config_json:
            raise ValueError(f"config has no {name!r} knob; give the TrialConfig JSON with all ten knobs")
        parts.append(f"{name}={_format(config_json[name])}")
    # Knobs added after the first ten, and env: variables, enter the key only when they differ from their
    # default (absent in a configuration stored before they existed): keys of earlier studies stay the same.
    sharded = config_json.get("sharding", "ddp") != "ddp"
    piped = config_json.get("pipeline_parallel", 1) != 1
    for name, knob in KNOBS.items():
        if name in BASE_KNOBS or name not in config_json:
            continue
        value = config_json[name]
        if value != knob.default and not (sharded and knob.ddp_only) and not (knob.pipeline_only and not piped):
            parts.append(f"{name}={_format(value)}")
    env = config_json.get("env") or {}
    if isinstance(env, Mapping):
        parts += [f"env.{k}={v}" for k, v in sorted(env.items())]
    # Hyperparameters (hp.<name>, sorted) enter the key after the knobs: two trials that differ only in a
    # hyperparameter are different configurations. Values as JSON, so a tuple and its stored list agree.
    hyperparameters = config_json.get("hyperparameters") or {}
    if isinstance(hyperparameters, Mapping):
        for hp_name in sorted(hyperparameters):
            parts.append(f"hp.{hp_name}={_format_hp(hyperparameters[hp_name])}")
    return ",".join(parts)


def _format_hp(value: object) -> str:
    if isinstance(value, (str, bool, int, float)) or value is None:
        return _format(value)
    return json.dumps(value, sort_keys=True, default=str)


def _format(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
