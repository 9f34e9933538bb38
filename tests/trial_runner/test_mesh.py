"""The mesh's arithmetic without ranks: coordinates, the pipeline's stages and their cut, the one-rank parity
configuration and the comparison of two runs' losses, a Hugging Face plan read from a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

from autotune.search_space import TrialConfig
from autotune.trial_result import Window
from autotune.trial_runner import compare_losses
from autotune.trial_runner._mesh import coordinates, hf_plan
from autotune.trial_runner._parity import one_rank_config
from autotune.trial_runner._pipeline import keep_only, stage_starts, stage_units, unit_names
from autotune.workloads.gpt import GPT


def test_tensor_parallel_is_the_innermost_axis() -> None:
    # 8 ranks as pp 2 x dp 2 x tp 2: consecutive ranks (one node's) share a tensor-parallel group
    coords = [coordinates(r, 2, 2, 2) for r in range(8)]
    assert [c["tp"] for c in coords] == [0, 1] * 4
    assert [c["dp"] for c in coords] == [0, 0, 1, 1] * 2
    assert [c["pp"] for c in coords] == [0] * 4 + [1] * 4


def test_split_points_spread_evenly_and_too_few_are_refused() -> None:
    split = ("blocks.1", "blocks.2", "blocks.3")
    assert stage_starts(split, 2) == ["blocks.2"]
    assert stage_starts(split, 4) == list(split)
    assert stage_starts(split, 3) == ["blocks.1", "blocks.2"]
    with pytest.raises(ValueError, match=r"5 stages need 4 split points, Workload\.pipeline_split has 3"):
        stage_starts(split, 5)


def test_stages_cover_the_model_once_in_order() -> None:
    model = GPT(vocab=8, dim=8, heads=2, layers=4, seq=4)
    assert unit_names(model) == ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "norm", "head"]
    stages = stage_units(model, ("blocks.1", "blocks.2", "blocks.3"), 2)
    assert stages == [["embed", "blocks.0", "blocks.1"], ["blocks.2", "blocks.3", "norm", "head"]]
    with pytest.raises(ValueError, match=r"'block\.2' is not a unit of the model"):
        stage_units(model, ("block.2",), 2)


def test_a_stage_keeps_only_its_units() -> None:
    model = keep_only(GPT(vocab=8, dim=8, heads=2, layers=4, seq=4), ["blocks.2", "blocks.3", "norm", "head"])
    assert model.embed is None and list(model.blocks) == ["2", "3"] and model.head is not None
    sequential = keep_only(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)), ["1", "2"])
    assert [type(m) for m in sequential] == [nn.ReLU, nn.Linear]


def test_the_one_rank_run_reads_the_same_samples_each_step() -> None:
    config = TrialConfig.create(batch_size=8, grad_accum=2, world_size=8, tensor_parallel=2, pipeline_parallel=2,
                                pipeline_microbatches=4, sharding="fsdp", base_lr=1e-3, base_batch_size=32)
    one = one_rank_config(config)
    assert (one.world_size, one.tensor_parallel, one.pipeline_parallel) == (1, 1, 1)
    assert (one.batch_size, one.grad_accum, one.pipeline_microbatches) == (16, 2, None)  # 8 x dp 2 a micro-step
    assert one.global_batch == config.global_batch == 32 and one.lr == config.lr


def _windows(losses: list[float]) -> list[Window]:
    return [Window(step=i + 1, samples=0, elapsed_s=0.0, window_throughput_samples_s=1.0, throughput_samples_s=1.0,
                   loss=loss, peak_memory_mb=0.0, time_to_first_step_s=0.0) for i, loss in enumerate(losses)]


def test_losses_are_compared_step_by_step() -> None:
    parity = compare_losses(_windows([2.0, 1.0, 0.5]), _windows([2.0, 1.00005, 0.5]), "off")
    assert parity.steps == 3 and parity.max_relative_difference == pytest.approx(5e-5, rel=1e-3) and parity.ok
    assert not compare_losses(_windows([2.0, 1.001]), _windows([2.0, 1.0]), "off").ok
    assert compare_losses(_windows([2.0, 1.001]), _windows([2.0, 1.0]), "bf16").ok
    assert not compare_losses(_windows([float("nan")]), _windows([1.0]), "off").ok


def test_a_hugging_face_plan_is_read_from_the_model_or_its_config() -> None:
    model = nn.Module()
    model._tp_plan = {"layers.*.q": "colwise", "layers.*.o": "rowwise", "lm_head": "colwise_gather_output"}  # type: ignore[assignment]
    assert hf_plan(model) == {"layers.*.q": "colwise", "layers.*.o": "rowwise"}  # styles it cannot apply stay whole
    outer = nn.Module()
    outer.model = nn.Module()
    outer.base_model_prefix = "model"  # type: ignore[assignment]
    outer.config = SimpleNamespace(base_model_tp_plan={"layers.*.q": "colwise"})  # type: ignore[assignment]
    assert hf_plan(outer) == {"model.layers.*.q": "colwise"}
    assert hf_plan(nn.Linear(2, 2)) is None


def test_the_pipeline_stage_has_the_chunks_the_bubble_is_timed_by() -> None:
    # _pipeline.ChunkTimer wraps these; were they renamed, the whole schedule would read as bubble
    from torch.distributed.pipelining import PipelineStage

    assert callable(PipelineStage.forward_one_chunk) and callable(PipelineStage.backward_one_chunk)
