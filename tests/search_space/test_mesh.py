"""The parallel mesh in the search: only feasible meshes are proposed, as one Optuna param (``mesh``) of the
feasible layouts, on the model's facts; a held global batch's splits count the data-parallel degree; DDP's
knobs are unset and compile off on a tensor or pipeline mesh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.search_space import MESH_PARAM, Layout, NoFeasibleMesh, SearchSpace, mesh_problem
from autotune.spec import SearchSpaceSpec
from autotune.workload_check import MeshFacts
from tests.test_spec import MESH_PY

FACTS = MeshFacts(tensor_plan="tp_plan", split_points=3, heads=(("blocks.0.attn.num_heads", 4),),
                  split_dims=(("blocks.0.attn.q.out_features", 64),), pipeline_loss=True)


def space_of(section: dict[str, Any], facts: MeshFacts | None = FACTS, **kw: Any) -> SearchSpace:
    return SearchSpace.build(SearchSpaceSpec.model_validate(section), base_lr=1e-3, base_batch_size=8,
                             facts=facts, **kw)


def sampled(space: SearchSpace, n: int = 60, seed: int = 0) -> list[Any]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    configs = []
    for _ in range(n):
        trial = study.ask()
        config = space.suggest(trial)
        assert trial.params == space.params_of(config)
        configs.append(config)
        study.tell(trial, 1.0)
    return configs


MESH = {
    "world_size": {"choices": [1, 2, 4]}, "tensor_parallel": {"choices": [1, 2, 4]},
    "pipeline_parallel": {"choices": [1, 2, 4]}, "pipeline_schedule": {"choices": ["gpipe", "1f1b"]},
    "pipeline_microbatches": {"choices": [1, 2, 4]}, "batch_size": 8,
    "sharding": {"choices": ["ddp", "fsdp"]}, "bucket_cap_mb": {"choices": [10, 25]},
    "compile": {"choices": ["off", "default"]},
}


def test_the_feasible_meshes_are_exactly_those_the_rule_admits_and_each_is_proposed() -> None:
    space = space_of(MESH)
    expected = {
        Layout(w, t, p, s if p > 1 else None, m if p > 1 else None)
        for w in (1, 2, 4) for t in (1, 2, 4) for p in (1, 2, 4) for s in ("gpipe", "1f1b") for m in (1, 2, 4)
        if mesh_problem({"world_size": w, "tensor_parallel": t, "pipeline_parallel": p, "pipeline_schedule": s,
                         "pipeline_microbatches": m, "batch_size": 8}, FACTS) is None
    }
    assert set(space.layouts) == expected and len(space.layouts) == len(expected)
    # 4 ranks x 4 stages would need 4 stages: the model has 3 split points (4 stages) - feasible; 1f1b at 1
    # micro-batch under 2 stages is not, gpipe at 1 is
    assert Layout(2, 1, 2, "gpipe", 1) in expected and Layout(2, 1, 2, "1f1b", 1) not in expected
    assert space.layouts[0] == Layout(1, 1, 1, None, None)  # the fewest ranks first
    configs = sampled(space, 200)
    assert {(c.world_size, c.tensor_parallel, c.pipeline_parallel, c.pipeline_schedule, c.pipeline_microbatches)
            for c in configs} == {tuple(lay) [:5] for lay in expected}
    for c in configs:
        assert mesh_problem(c.knobs(), FACTS) is None
        on_mesh = c.tensor_parallel > 1 or c.pipeline_parallel > 1
        assert (c.bucket_cap_mb is None) == (on_mesh or c.sharding != "ddp")
        assert not on_mesh or c.compile == "off"
        assert c.global_batch == c.batch_size * c.grad_accum * c.world_size // (c.tensor_parallel *
                                                                                c.pipeline_parallel)


def test_the_model_decides_which_tensor_degrees_and_stage_counts_can_run() -> None:
    facts = MeshFacts(tensor_plan="tp_plan", split_points=1, heads=(("attn.num_heads", 6),), pipeline_loss=True)
    space = space_of(MESH, facts)
    assert {lay.tensor_parallel for lay in space.layouts} == {1, 2}  # 6 heads: not 4
    assert {lay.pipeline_parallel for lay in space.layouts} == {1, 2}  # 2 stages at most
    assert "does not divide the model's attn.num_heads (6)" in space.dropped["pp1.dp1.tp4"]
    assert "makes at most 2" in space.dropped["pp4.dp1.tp1.gpipe.mb1"]
    no_plan = space_of(MESH, MeshFacts(split_points=3, pipeline_loss=True))
    assert {lay.tensor_parallel for lay in no_plan.layouts} == {1}


def test_a_held_global_batch_splits_over_the_data_parallel_degree() -> None:
    section = {"world_size": {"choices": [1, 2, 4]}, "tensor_parallel": {"choices": [1, 2]},
               "batch_size": {"choices": [2, 4, 8, 16]}, "grad_accum": {"choices": [1, 2]}}
    space = space_of(section, global_batch=(16,))
    assert space.mesh_searched() and not space.split_searched()
    configs = sampled(space, 120)
    for c in configs:
        assert c.batch_size * c.grad_accum * c.data_parallel == c.global_batch == 16
        assert c.lr == pytest.approx(1e-3)  # the held batch: base_lr in every trial
    assert {(c.world_size, c.tensor_parallel) for c in configs} == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 2)}
    assert space.default_config() == space.config({}) and space.default_config().world_size == 1


def test_a_batch_size_is_proposed_only_where_it_splits_into_the_micro_batches() -> None:
    section = {"world_size": 2, "pipeline_parallel": {"choices": [1, 2]}, "pipeline_microbatches": {"choices": [2, 4]},
               "batch_size": {"choices": [2, 6, 8]}}
    space = space_of(section)
    configs = sampled(space, 120)
    for c in configs:
        assert c.pipeline_parallel == 1 or c.batch_size % c.pipeline_microbatches == 0
    assert {(c.batch_size, c.pipeline_microbatches) for c in configs if c.pipeline_parallel == 2} == {
        (2, 2), (6, 2), (8, 2), (8, 4)}
    assert any(c.batch_size == 6 and c.pipeline_parallel == 1 for c in configs)


def test_enqueued_params_give_back_the_same_mesh() -> None:
    space = space_of(MESH)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for config in sampled(space, 20, seed=5):
        study.enqueue_trial(space.params_of(config))
        assert space.suggest(study.ask()) == config
        assert space.contains(config)


def test_a_space_with_no_feasible_mesh_or_too_many_is_refused_in_one_line() -> None:
    with pytest.raises(NoFeasibleMesh, match=r"no mesh of the search space can run .* does not divide world_size"):
        space_of({"world_size": 3, "tensor_parallel": {"choices": [2, 4]}})
    with pytest.raises(NoFeasibleMesh, match="feasible layouts, searched as one param"):
        space_of({"world_size": {"low": 1, "high": 64}, "pipeline_parallel": {"choices": [1, 2]},
                  "pipeline_microbatches": {"low": 2, "high": 64}, "batch_size": {"low": 1, "high": 512}},
                 MeshFacts(split_points=8, pipeline_loss=True))


def test_a_space_without_tensor_or_pipeline_degrees_keeps_its_own_params() -> None:
    space = space_of({"world_size": {"choices": [1, 2]}, "batch_size": {"choices": [8, 16]}}, None)
    assert not space.layouts and MESH_PARAM not in space.distributions()
    assert {"world_size", "batch_size"} <= set(space.distributions())


def test_validate_lists_the_feasible_meshes_and_why_others_are_not_proposed(tmp_path: Path) -> None:
    (tmp_path / "mesh.py").write_text(MESH_PY)
    study = tmp_path / "study.yaml"
    study.write_text(
        "name: probe\nworkload: {entrypoint: 'mesh.py:build'}\nsearch_space:\n"
        "  world_size: {choices: [1, 2, 4]}\n  tensor_parallel: {choices: [1, 2, 4]}\n"
        "  pipeline_parallel: {choices: [1, 2]}\n  pipeline_microbatches: {choices: [2, 4]}\n"
        "  sharding: {choices: [ddp, fsdp]}\n  batch_size: 8\n"
    )
    result = CliRunner().invoke(main, ["validate", str(study)], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "feasible meshes (11 layouts, searched as mesh)" in out
    meshes = [line.split("│")[1].strip() for line in out.splitlines() if line.count("│") == 3 and " x " in line]
    assert meshes == ["1 x 1 x 1", "1 x 2 x 1", "1 x 1 x 2", "2 x 1 x 1", "1 x 4 x 1", "1 x 2 x 2", "2 x 2 x 1",
                      "2 x 1 x 2"]
    assert "1f1b x2, 1f1b x4" in out and "{ddp, fsdp} (one replica)" in out
    assert "not proposed pp1.dp1.tp4: tensor_parallel 4 does not divide the model's blocks.0.num_heads (6)" in out


@pytest.mark.parametrize(("sets", "expect"), [
    (["tensor_parallel=4", "world_size=4"], "tensor_parallel 4 does not divide the model's blocks.0.num_heads (6)"),
    (["pipeline_parallel=2", "world_size=2", "pipeline_microbatches=3"],
     "batch_size 8 does not split into 3 micro-batches"),
    (["pipeline_parallel=2", "world_size=2", "pipeline_microbatches=1"], "is below pipeline_parallel 2"),
    (["tensor_parallel=2", "world_size=3"], "does not divide world_size (3)"),
])
def test_autotune_trial_refuses_an_infeasible_mesh_in_one_line_and_launches_nothing(
    tmp_path: Path, sets: list[str], expect: str,
) -> None:
    (tmp_path / "mesh.py").write_text(MESH_PY)
    study = tmp_path / "study.yaml"
    study.write_text("name: probe\nworkload: {entrypoint: 'mesh.py:build'}\nsearch_space: {batch_size: 8}\n")
    args = ["trial", str(study)] + [a for s in sets for a in ("--set", s)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_calibration_names_its_mesh() -> None:
    from autotune.calibration import Calibration
    from autotune.search_space import TrialConfig

    config = TrialConfig.create(base_lr=1e-3, base_batch_size=16, batch_size=16, world_size=8, tensor_parallel=2,
                                pipeline_parallel=2, pipeline_schedule="gpipe", pipeline_microbatches=4)
    summary = Calibration(config=config, study=None).summary()
    assert "ws=8" in summary and "tp=2" in summary and "pp=2" in summary and "gpipe" in summary and "mb=4" in summary


def test_goodput_needs_a_mesh_of_data_parallelism_alone() -> None:
    from autotune.search_space._study import measures_noise_scale

    assert not measures_noise_scale(space_of({"world_size": 2, "tensor_parallel": {"choices": [2]}}))
    assert measures_noise_scale(space_of({"world_size": 2, "tensor_parallel": {"choices": [1, 2]}}))


def test_the_first_held_global_batch_is_preferred_then_fewer_ranks() -> None:
    section = {"world_size": {"choices": [1, 2]}, "tensor_parallel": {"choices": [1, 2]},
               "batch_size": {"choices": [4, 8, 16, 32]}, "grad_accum": {"choices": [1, 2]}}
    space = space_of(section, global_batch=(32, 16))
    totals = [lay.batch_size * lay.grad_accum * lay.data_parallel for lay in space.layouts]  # type: ignore[operator]
    assert totals == sorted(totals, key=lambda t: (32, 16).index(t)) and totals[0] == 32
    first = space.default_config()
    assert (first.global_batch, first.world_size, first.grad_accum) == (32, 1, 1)
