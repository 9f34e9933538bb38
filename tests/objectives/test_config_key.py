"""Stable configuration keys: the ten knobs, in the knob table's order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.knobs import KNOBS
from autotune.objectives import config_key
from autotune.search_space import TrialConfig


def config(**knobs: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"base_lr": 1e-3, "base_batch_size": 64, "batch_size": 64, "device": "cuda", **knobs}
    return TrialConfig.create(**fields).model_dump(mode="json")


def test_the_default_configuration() -> None:
    assert config_key(config()) == (
        "batch_size=64,grad_accum=1,lr_scaling=sqrt,num_workers=0,prefetch_factor=none,pin_memory=false,"
        "amp=off,activation_checkpointing=false,bucket_cap_mb=25,world_size=1"
    )


def test_knobs_appear_in_the_knob_table_order() -> None:
    key = config_key(config(num_workers=2, amp="bf16", world_size=2))
    assert [part.split("=")[0] for part in key.split(",")] == list(KNOBS)[:10]
    assert "num_workers=2,prefetch_factor=2," in key


def test_derived_values_and_their_formatting_do_not_enter_the_key() -> None:
    a = config(lr_scaling="sqrt", batch_size=96)
    b = dict(a, lr=float(f"{a['lr']:.6g}"), base_lr=0.0010000000001, global_batch=96.0, device="cpu")
    assert config_key(a) == config_key(b)
    assert config_key(json.loads(json.dumps(a))) == config_key(a)


def test_whole_floats_read_as_integers() -> None:
    a = config(batch_size=64)
    assert config_key(dict(a, batch_size=64.0)) == config_key(a)


def test_a_missing_knob_is_refused() -> None:
    broken = config()
    del broken["amp"]
    with pytest.raises(ValueError, match="'amp'"):
        config_key(broken)


knob_values = st.fixed_dictionaries(
    {
        "batch_size": st.integers(1, 512),
        "grad_accum": st.integers(1, 8),
        "lr_scaling": st.sampled_from(["none", "linear", "sqrt"]),
        "num_workers": st.integers(0, 4),
        "prefetch_factor": st.integers(1, 8),
        "pin_memory": st.booleans(),
        "amp": st.sampled_from(["off", "bf16", "fp16"]),
        "activation_checkpointing": st.booleans(),
        "bucket_cap_mb": st.integers(1, 100),
        "world_size": st.integers(1, 4),
    }
)


@given(knob_values, knob_values)
def test_equal_keys_iff_equal_knobs(a: dict[str, Any], b: dict[str, Any]) -> None:
    ca, cb = config(**a), config(**b)
    knobs_equal = all(ca[k] == cb[k] for k in KNOBS)
    assert (config_key(ca) == config_key(cb)) == knobs_equal
