"""The memory prediction knows the mesh: training state divided by the degrees that shard it (tp, pp by stage,
fsdp by dp), activations by tp, by stage and by the micro-batches in flight; a mesh never measured is predicted
from the trials of other meshes."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest

from autotune.objectives import MemoryModel, MemoryPoint, ModelSize
from autotune.objectives._memory_mesh import mesh_shares
from autotune.objectives._memory_model import MB, analytic_memory_mb


def config(world: int = 1, tp: int = 1, pp: int = 1, sharding: str = "ddp", batch: int = 16,
           schedule: str | None = None, micro: int | None = None) -> dict[str, Any]:
    if pp > 1:
        schedule, micro = schedule or "1f1b", micro or 4
    return {"world_size": world, "tensor_parallel": tp, "pipeline_parallel": pp, "sharding": sharding,
            "batch_size": batch, "pipeline_schedule": schedule, "pipeline_microbatches": micro, "amp": "off",
            "activation_checkpointing": False, "num_workers": 0, "device": "cpu"}


SIZE = ModelSize(params=50_000_000)  # 800 MB of fp32 training state: parameters, gradients, Adam's two moments


def test_the_training_state_is_divided_by_the_degrees_that_shard_it() -> None:
    whole = analytic_memory_mb(SIZE, config())
    assert whole == pytest.approx(50_000_000 * 16 / MB)
    assert analytic_memory_mb(SIZE, config(world=4)) == pytest.approx(whole)  # DDP replicates it
    assert analytic_memory_mb(SIZE, config(world=4, sharding="fsdp")) == pytest.approx(whole / 4)
    assert analytic_memory_mb(SIZE, config(world=2, tp=2)) == pytest.approx(whole / 2)
    assert analytic_memory_mb(SIZE, config(world=2, pp=2)) == pytest.approx(whole / 2)
    assert analytic_memory_mb(SIZE, config(world=8, tp=2, pp=2, sharding="fsdp")) == pytest.approx(whole / 8)
    assert analytic_memory_mb(SIZE, config(world=8, tp=2, pp=2)) == pytest.approx(whole / 4)


def test_activations_are_divided_by_tp_by_stage_and_by_the_micro_batches_in_flight() -> None:
    assert mesh_shares(config(batch=16))[1] == 16
    assert mesh_shares(config(world=2, tp=2, batch=16))[1] == 8
    # gpipe: every micro-batch in flight, of the stage's half of the layers
    assert mesh_shares(config(world=2, pp=2, batch=16, schedule="gpipe", micro=8))[1] == 8
    # 1f1b: at most pp (2) of the 8 micro-batches in flight, each 2 samples, of half the layers
    assert mesh_shares(config(world=2, pp=2, batch=16, schedule="1f1b", micro=8))[1] == 2
    assert mesh_shares(config(world=4, tp=2, pp=2, batch=16, schedule="1f1b", micro=2))[1] == 4


def truth(c: dict[str, Any]) -> float:
    """A rank's peak: 400 MB of process and collectives, the state's share of 800 MB, 6 MB an activation sample."""
    static, act = mesh_shares(c)
    return 400.0 + 800.0 * static + 6.0 * act


BASES = ("mesh fit", "mesh fit, bounded below", "setting fit", "shared slope")
KINDS = {
    "dp": config(world=4, batch=32),
    "fsdp": config(world=4, sharding="fsdp", batch=32),
    "tp": config(world=4, tp=4, batch=32),
    "pp gpipe": config(world=2, pp=2, batch=32, schedule="gpipe", micro=8),
    "pp 1f1b": config(world=4, pp=4, batch=32, schedule="1f1b", micro=8),
    "fsdp x tp": config(world=4, tp=2, sharding="fsdp", batch=16),
    "tp x pp": config(world=4, tp=2, pp=2, batch=32, schedule="1f1b", micro=4),
}


@pytest.mark.parametrize("seed", range(5))
def test_each_mesh_kind_is_predicted_within_10_percent_after_5_trials_of_other_meshes(seed: int) -> None:
    rng = random.Random(seed)
    measured = [config(batch=8), config(batch=32), config(world=2, tp=2, batch=16),
                config(world=2, sharding="fsdp", batch=16), config(world=2, pp=2, batch=16, micro=4)]
    points = [MemoryPoint(c, truth(c) * (1 + rng.uniform(-0.02, 0.02))) for c in measured]
    model = MemoryModel(points, size=SIZE)
    misses = {}
    for kind, c in KINDS.items():
        prediction = model.predict(c)
        assert prediction is not None and prediction.basis in BASES, kind
        misses[kind] = abs(prediction.mb - truth(c)) / truth(c)
        assert misses[kind] < 0.10, (kind, prediction, truth(c))
        assert prediction.mb - prediction.error_mb <= truth(c) * 1.02, kind  # its error reaches the truth
    assert statistics.median(misses.values()) < 0.05


def test_a_model_too_large_for_one_rank_is_predicted_over_the_budget_only_where_nothing_shards_it() -> None:
    model = MemoryModel([], size=SIZE)  # before any trial: the training state alone, 800 MB whole
    budget = 500.0
    over = {kind: model.predict(c).over(budget) for kind, c in {  # type: ignore[union-attr]
        "one rank": config(), "dp 4": config(world=4), "fsdp 4": config(world=4, sharding="fsdp"),
        "tp 2": config(world=2, tp=2), "tp 2 x pp 2": config(world=4, tp=2, pp=2), "pp 2": config(world=2, pp=2),
    }.items()}
    assert over == {"one rank": True, "dp 4": True, "fsdp 4": False, "tp 2": False, "tp 2 x pp 2": False,
                    "pp 2": False}


def test_a_mesh_that_ran_out_of_memory_bounds_every_mesh_whose_ranks_would_hold_no_less() -> None:
    oom = MemoryPoint(config(world=2, tp=2, batch=16), 1000.0, at_least=True)
    model = MemoryModel([oom])
    for more in (config(batch=16), config(world=4, batch=32), config(world=2, pp=2, batch=32, schedule="gpipe")):
        prediction = model.predict(more)
        assert prediction is not None and prediction.certain and prediction.over(900.0), more
        assert prediction.basis == "out of memory on a mesh whose ranks held no more"
    for less in (config(world=4, tp=2, pp=2, batch=16), config(world=4, tp=4, batch=16), config(world=2, tp=2,
                                                                                            batch=8)):
        prediction = model.predict(less)
        assert prediction is None or not prediction.certain, less


def test_one_trial_and_the_models_size_bound_a_mesh_that_holds_more_from_below() -> None:
    size = ModelSize(params=25_000_000)  # 381 MB of training state (16 bytes a parameter)
    state = 25_000_000 * 16 / MB
    measured = config(world=4, tp=2, batch=16)  # holds half of it, 8 activation samples
    model = MemoryModel([MemoryPoint(measured, 500.0)], size=size)
    replicated = model.predict(config(world=4, batch=16))  # all of the state, 16 activation samples: >= 690 MB
    assert replicated is not None and replicated.basis == "mesh lower bound"
    assert replicated.mb == pytest.approx(500.0 + state * 0.5) and replicated.over(650.0)
    more_ranks = model.predict(config(world=8, batch=16))  # more processes sharing the library's pages: no bound
    assert more_ranks is None or more_ranks.basis != "mesh lower bound"
    fewer = model.predict(config(world=2, batch=16))
    assert fewer is not None and fewer.basis == "mesh lower bound" and fewer.mb == pytest.approx(500.0 + state * 0.5)


def test_a_fit_of_few_trials_is_bounded_below_by_what_a_mesh_holding_less_measured() -> None:
    """Measured on the wide transformer (4 ranks): three sharded meshes; the fit's error (25% from 3 trials) would
    reach below the budget for the replicated mesh, which a trial holding half the state bounds above it."""
    size = ModelSize(params=12_700_000)  # ~194 MB of training state
    points = [MemoryPoint(config(world=4, tp=2, batch=16), 478.4), MemoryPoint(config(world=4, tp=4, batch=16), 415.9),
              MemoryPoint(config(world=4, pp=4, batch=16, micro=4), 376.6)]
    prediction = MemoryModel(points, size=size).predict(config(world=4, batch=16))
    assert prediction is not None and prediction.basis == "mesh fit, bounded below"
    assert prediction.mb - prediction.error_mb == pytest.approx(478.4 + 12_700_000 * 16 / MB * 0.5)
    assert prediction.over(549.2)  # the replicated mesh measured 633 MB: not launched
