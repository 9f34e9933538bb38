"""The parallel mesh trains the same model: each mesh kind's per-step losses over its first 20 steps against a
one-rank run of the same seed and global batch (autotune/trial_runner/_parity.py), on the built-in transformer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Outcome, TrialPlan, TrialResult, WarmLauncher, compare_losses, parity_plans, run_trial

from .conftest import HERE

pytestmark = pytest.mark.slow  # two real trials each (8-25 s on two cores)

_REFERENCES: dict[tuple[str, int, int, int], TrialResult] = {}


def _plan(entrypoint: str, args: dict[str, Any], **knobs: Any) -> TrialPlan:
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=16, **{"batch_size": 16, **knobs})
    return TrialPlan(config=config, entrypoint=entrypoint, args=args, base_dir=str(HERE),
                     limits=TrialLimits(max_steps=20, max_seconds=120, hang_seconds=30))


def _parity(tmp_path: Path, launcher: WarmLauncher, entrypoint: str = "autotune.workloads.gpt:build",
            args: dict[str, Any] | None = None, steps: int = 20, **knobs: Any) -> tuple[float, int, Path]:
    """Run the mesh and (once per workload, global batch, accumulation and length) its one-rank reference;
    compare. The mesh kinds the issue names run 20 steps; the other paths 8 (the suite's time)."""
    mine, one = parity_plans(_plan(entrypoint, args or {}, **knobs), steps)
    result = run_trial(mine, tmp_path / "mesh", launcher)
    assert result.outcome is Outcome.COMPLETE, (result.reason, result.error_lines)
    key = (entrypoint, one.config.batch_size, one.config.grad_accum, steps)
    if key not in _REFERENCES:
        _REFERENCES[key] = run_trial(one, tmp_path / "one", launcher)
    reference = _REFERENCES[key]
    assert reference.outcome is Outcome.COMPLETE
    parity = compare_losses(result.windows, reference.windows, "off")
    return parity.max_relative_difference, parity.steps, tmp_path / "mesh"


def _applied(trial_dir: Path) -> dict[str, Any]:
    return json.loads((trial_dir / "applied.json").read_text())


def test_tensor_parallel_trains_the_one_rank_model(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, world_size=2, tensor_parallel=2)
    assert steps == 20 and gap < 1e-4
    ranks = _applied(trial_dir)["ranks"]
    assert [r["mesh"] for r in ranks] == [{"pp": 0, "dp": 0, "tp": 0}, {"pp": 0, "dp": 0, "tp": 1}]
    # each rank holds half of every split weight: fewer than all, more than half (norms, embeddings replicated)
    assert all(r["param_numel"] / 2 < r["local_param_numel"] < r["param_numel"] for r in ranks)
    window = run_windows(trial_dir)[-1]
    assert window["step_anatomy"]["tp_comm_exposed_s"] > 0 and window["step_anatomy"]["pipeline_bubble_s"] is None
    _parts_add_up(trial_dir)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_trains_the_one_rank_model(tmp_path: Path, warm_launcher: WarmLauncher, schedule: str) -> None:
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, world_size=2, pipeline_parallel=2,
                                    pipeline_schedule=schedule, pipeline_microbatches=4)
    assert steps == 20 and gap < 1e-4
    ranks = _applied(trial_dir)["ranks"]
    assert [r["mesh"]["pp"] for r in ranks] == [0, 1]
    assert sum(r["local_param_numel"] for r in ranks) == _model_numel()  # the stages hold the model once
    anatomy = run_windows(trial_dir)[-1]["step_anatomy"]
    assert anatomy["pipeline_bubble_s"] > 0 and anatomy["tp_comm_exposed_s"] is None
    assert anatomy["forward_backward_s"] > 0  # the stages' chunks were timed: not the whole schedule as bubble
    _parts_add_up(trial_dir)


def test_interleaved_pipeline_with_accumulation(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, _ = _parity(tmp_path, warm_launcher, world_size=2, pipeline_parallel=2, batch_size=8, grad_accum=2,
                            pipeline_schedule="interleaved_1f1b", pipeline_microbatches=2, steps=8)
    assert steps == 8 and gap < 1e-4


def test_fsdp_by_tensor_parallel(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, world_size=4, tensor_parallel=2, sharding="fsdp",
                                    batch_size=8)
    assert steps == 20 and gap < 1e-4
    ranks = _applied(trial_dir)["ranks"]
    assert [(r["mesh"]["dp"], r["mesh"]["tp"]) for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["local_param_numel"] < r["param_numel"] / 2 for r in ranks)  # sharded over dp and tp
    assert run_windows(trial_dir)[-1]["step_anatomy"]["tp_comm_exposed_s"] > 0  # the (dp, tp) weights' tp axis
    _parts_add_up(trial_dir)


def test_tensor_by_pipeline_parallel(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, world_size=4, tensor_parallel=2, pipeline_parallel=2,
                                    pipeline_microbatches=2)
    assert steps == 20 and gap < 1e-4
    ranks = _applied(trial_dir)["ranks"]
    assert [(r["mesh"]["pp"], r["mesh"]["tp"]) for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    _parts_add_up(trial_dir)


def test_data_parallel_beside_tensor_parallel(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, _ = _parity(tmp_path, warm_launcher, world_size=4, tensor_parallel=2, batch_size=8, steps=8)
    assert steps == 8 and gap < 1e-4


def _parts_add_up(trial_dir: Path) -> None:
    """Each window's timed parts (the bubble and the tp collectives among them) fit in its step: none is counted
    twice, and ``other_s`` is the rest."""
    for window in run_windows(trial_dir):
        anatomy, step_s = window["step_anatomy"], 16 / window["window_throughput_samples_s"]
        timed = sum(anatomy[k] or 0.0 for k in ("data_wait_s", "forward_backward_s", "sync_exposed_s", "optimizer_s",
                                                "pipeline_bubble_s", "tp_comm_exposed_s"))
        assert timed <= step_s + 1e-6  # the laps lie inside the window, each part taken out of them once
        assert timed + anatomy["other_s"] == pytest.approx(step_s, rel=1e-3, abs=1e-5)


def _model_numel() -> int:
    from autotune.workloads.gpt import build

    return sum(p.numel() for p in build().model().parameters())


def run_windows(trial_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_declarative_plan_alone_splits_the_heads(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, "mesh_workload.py:build", {"hook": False},
                                    world_size=2, tensor_parallel=2, steps=8)
    assert steps == 8 and gap < 1e-4
    assert _applied(trial_dir)["tensor_parallel_by"] == "tp_plan"


def test_a_hugging_face_model_splits_by_its_own_plan(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    pytest.importorskip("transformers")
    gap, steps, trial_dir = _parity(tmp_path, warm_launcher, "hf_mesh_workload.py:build", world_size=2,
                                    tensor_parallel=2, steps=8)
    assert steps == 8 and gap < 1e-4
    applied = _applied(trial_dir)
    assert applied["tensor_parallel_by"] == "hf_plan"
    assert all(r["local_param_numel"] < r["param_numel"] for r in applied["ranks"])


@pytest.mark.parametrize(("knobs", "message"), [
    ({"tensor_parallel": 2}, "tensor_parallel 2: the workload says nothing of how its model splits; give "
                             "Workload.parallelize or Workload.tp_plan"),
    ({"pipeline_parallel": 2}, "pipeline_parallel 2: the workload names no split points; give Workload.pipeline_split"),
])
def test_a_workload_without_a_plan_fails_in_one_line(tmp_path: Path, warm_launcher: WarmLauncher,
                                                     knobs: dict[str, Any], message: str) -> None:
    result = run_trial(_plan("mesh_workload.py:build", {"plain": True}, world_size=2, **knobs), tmp_path, warm_launcher)
    assert result.outcome is Outcome.CRASHED
    assert message in result.reason


def test_a_pipeline_evaluates_the_held_out_loss_one_rank_does(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    mine, one = parity_plans(_plan("autotune.workloads.gpt:build", {}, world_size=2, pipeline_parallel=2,
                                   tensor_parallel=1), steps=4)
    losses = []
    for name, plan in (("pipeline", mine), ("one", one)):
        result = run_trial(plan.model_copy(update={"evaluate": True}), tmp_path / name, warm_launcher)
        assert result.outcome is Outcome.COMPLETE and result.eval_loss is not None
        losses.append(result.eval_loss)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
