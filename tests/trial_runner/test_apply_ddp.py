"""The rank's DDP takes every DDP knob of the knob table, and applied.json records what DDP holds of each."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

import autotune.knobs
import autotune.trial_runner._apply as apply
from autotune.trial_runner._records import AppliedRecord


@pytest.fixture
def one_rank_group(tmp_path: Path):  # type: ignore[no-untyped-def]
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _config(**knobs: object) -> SimpleNamespace:
    defaults = {name: knob.default for name, knob in autotune.knobs.KNOBS.items() if knob.ddp_argument}
    return SimpleNamespace(**{**defaults, "bucket_cap_mb": 3, "gradient_as_bucket_view": True, "static_graph": False,
                              **knobs})


def test_the_table_s_ddp_knobs_reach_ddp(one_rank_group: None) -> None:
    applied = AppliedRecord()
    apply.wrap_ddp(torch.nn.Linear(4, 2), _config(), None, applied)
    assert applied.ddp_bucket_bytes_cap == 3 * 2**20
    assert applied.ddp_gradient_as_bucket_view is True and applied.ddp_static_graph is False
    assert not set(applied.knobs or {}) & {"bucket_cap_mb", "gradient_as_bucket_view", "static_graph"}  # own fields


def test_a_ddp_knob_without_a_field_of_its_own_is_recorded_as_ddp_holds_it(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a knob added to the table with ddp_argument=True: no code names it, DDP takes it, applied.json shows it
    names = (*autotune.knobs.DDP_ARGUMENTS, "broadcast_buffers")
    monkeypatch.setattr(autotune.knobs, "DDP_ARGUMENTS", names)
    monkeypatch.setattr(apply, "DDP_ARGUMENTS", names)
    applied = AppliedRecord()
    ddp = apply.wrap_ddp(torch.nn.Linear(4, 2), _config(broadcast_buffers=False), None, applied)
    assert ddp.broadcast_buffers is False
    assert applied.knobs == {"broadcast_buffers": False}
    assert applied.to_json()["knobs"] == {"broadcast_buffers": False}
