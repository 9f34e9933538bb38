"""The knobs of issue 17 reach every rank of a real trial: threads_per_rank, the env: section, sharding
(FSDP2), DDP's flags and compile. Each test reads what every rank recorded (applied.json's ``ranks``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import (
    Launcher,
    LocalLauncher,
    Outcome,
    TrialPlan,
    TrialResult,
    WarmLauncher,
    compute_threads,
    resolve_threads,
    run_trial,
)

HERE = Path(__file__).parent


@pytest.fixture
def run_knobs(tmp_path: Path, warm_launcher: WarmLauncher) -> Any:
    counter = iter(range(1000))

    def run(
        knobs: dict[str, Any], *, world_size: int = 2, kind: str = "warm", limits: dict[str, Any] | None = None,
        **args: Any,
    ) -> tuple[TrialResult, dict[str, Any]]:
        config = TrialConfig.create(base_lr=1e-3, base_batch_size=32, batch_size=32, world_size=world_size, **knobs)
        plan = TrialPlan(
            config=config,
            entrypoint="knobs_workload.py:build",
            args=args,
            base_dir=str(HERE),
            limits=TrialLimits(**{"warmup_steps": 2, "max_steps": 6, "max_seconds": 60, "hang_seconds": 20,
                                  **(limits or {})}),
        )
        trial_dir = tmp_path / f"trial{next(counter)}"
        launcher: Launcher = warm_launcher if kind == "warm" else LocalLauncher()
        result = run_trial(plan, trial_dir, launcher)
        applied = json.loads((trial_dir / "applied.json").read_text()) if (trial_dir / "applied.json").exists() else {}
        return result, applied

    return run


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["warm", "torchrun"])
def test_a_threads_number_is_set_in_every_rank_torch_and_openmp(run_knobs: Any, kind: str) -> None:
    # 3 is what no 'auto' gives at 2 ranks on this machine (its share of the cores is 1 or 2 per rank, less workers)
    result, applied = run_knobs({"threads_per_rank": 3}, kind=kind)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert result.threads_per_rank == 3
    assert [r["rank"] for r in applied["ranks"]] == [0, 1]
    for rank in applied["ranks"]:
        assert rank["torch_threads"] == 3
        assert rank["blas_threads"] == 3  # numpy's BLAS too (threadpoolctl)
        assert rank["thread_env"] == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
        if kind == "torchrun":  # in the rank's environment from its start (a warm rank's start is its zygote's)
            assert rank["thread_env_at_start"] == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}


def test_auto_threads_resolve_to_the_heuristic_and_are_recorded(run_knobs: Any) -> None:
    result, applied = run_knobs({"num_workers": 1}, world_size=1)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert applied["threads_per_rank"]["setting"] == "auto"
    # the trial ran pinned to the cores it leased: all of this process's here (nothing else of ours runs)
    assert result.threads_per_rank == applied["ranks"][0]["torch_threads"] == compute_threads(1, 1)


def test_a_word_resolves_in_every_rank_against_its_share_and_is_recorded(run_knobs: Any) -> None:
    # two ranks beside a DataLoader worker: share is cores // 2 (not less the worker, as auto would be)
    result, applied = run_knobs({"threads_per_rank": "share", "num_workers": 1}, world_size=2)
    assert result.outcome is Outcome.COMPLETE, result.reason
    share = resolve_threads("share", 2, 1)
    assert share == max(1, len(os.sched_getaffinity(0)) // 2)
    assert applied["threads_per_rank"] == {"setting": "share", "resolved": share}
    assert result.threads_per_rank == share
    for rank in applied["ranks"]:
        assert rank["torch_threads"] == rank["blas_threads"] == share
        assert rank["thread_env"] == {"OMP_NUM_THREADS": str(share), "MKL_NUM_THREADS": str(share)}


@pytest.mark.parametrize(("word", "divisor"), [("half", 2), ("share", 1)])
def test_a_word_at_one_rank_beside_a_worker(run_knobs: Any, word: str, divisor: int) -> None:
    # share keeps all the cores beside the worker (auto would leave it one); half takes half of them
    result, applied = run_knobs({"threads_per_rank": word, "num_workers": 1}, world_size=1)
    assert result.outcome is Outcome.COMPLETE, result.reason
    count = max(1, len(os.sched_getaffinity(0)) // divisor)
    assert applied["threads_per_rank"] == {"setting": word, "resolved": count}
    assert result.threads_per_rank == applied["ranks"][0]["torch_threads"] == count


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["warm", "torchrun"])
def test_numpys_blas_gets_each_ranks_share_after_a_one_rank_trial(run_knobs: Any, kind: str) -> None:
    """BLAS reads its thread count when numpy is imported: a rank forked from the zygote kept the zygote's
    (all the cores), so two ranks each ran this machine's cores' worth of BLAS threads and numpy matrix work in
    a dataset took ~10x longer. After a one-rank trial (the zygote as the baseline leaves it), a two-rank
    trial's ranks have their own share, as torch has. A cold torchrun rank starts afresh: its two-rank trial
    alone."""
    if kind == "warm":
        one, _ = run_knobs({}, world_size=1, kind=kind)
        assert one.outcome is Outcome.COMPLETE, one.reason
    result, applied = run_knobs({}, world_size=2, kind=kind)
    assert result.outcome is Outcome.COMPLETE, result.reason
    for rank in applied["ranks"]:
        assert rank["blas_threads"] == rank["torch_threads"] == compute_threads(2, 0)


@pytest.mark.slow
def test_env_values_reach_every_rank_from_its_start(run_knobs: Any) -> None:
    env = {"OMP_WAIT_POLICY": "PASSIVE", "KNOB_TEST_FLAG": "on"}
    result, applied = run_knobs({"env": env})
    assert result.outcome is Outcome.COMPLETE, result.reason
    for rank in applied["ranks"]:
        assert rank["env"] == env
        # present when the process started, so a library reading it once at load (libgomp) sees it too
        assert rank["env_at_start"] == env
    # a later trial with another value gets a zygote started under that value, not the first one's
    result, applied = run_knobs({"env": {"OMP_WAIT_POLICY": "ACTIVE"}})
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert {r["env_at_start"]["OMP_WAIT_POLICY"] for r in applied["ranks"]} == {"ACTIVE"}


def test_ddp_flags_are_applied(run_knobs: Any) -> None:
    result, applied = run_knobs({"gradient_as_bucket_view": True, "static_graph": True, "bucket_cap_mb": 2})
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert applied["ddp_gradient_as_bucket_view"] is True
    assert applied["ddp_static_graph"] is True
    assert applied["ddp_bucket_bytes_cap"] == 2 * 2**20
    assert all(r["ddp"] and r["dtensor_params"] == 0 for r in applied["ranks"])


@pytest.mark.parametrize("sharding", ["fsdp", "fsdp_no_reshard"])
def test_fsdp_shards_every_parameter_in_every_rank(run_knobs: Any, sharding: str) -> None:
    result, applied = run_knobs({"sharding": sharding, "amp": "bf16", "grad_accum": 2})
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert result.loss is not None
    assert applied["fsdp_units"] == 3  # the two Blocks, then the root
    assert applied["fsdp_reshard_after_forward"] is (sharding == "fsdp")
    assert "ddp_bucket_bytes_cap" not in applied
    ranks = applied["ranks"]
    total = ranks[0]["param_numel"]
    for rank in ranks:
        assert not rank["ddp"]
        assert rank["dtensor_params"] == 8  # every weight and bias of inp, 2 blocks, out
        assert rank["local_param_numel"] < total
    assert sum(r["local_param_numel"] for r in ranks) == total  # the shards partition the model


@pytest.mark.slow
def test_fsdp_lowers_the_peak_memory_of_each_rank(run_knobs: Any) -> None:
    # 25 M parameters (100 MB): replicated, each rank holds them, their gradients, DDP's buckets and AdamW's
    # two moments (~500 MB); sharded at 2 ranks, half of the parameters, gradients and moments. glibc's
    # dynamic mmap threshold keeps freed gather buffers resident, so the trial fixes it through env:.
    model = {"width": 1024, "depth": 24}
    env = {"MALLOC_MMAP_THRESHOLD_": "131072"}
    # 3 steps: the peak comes with the first optimizer step (AdamW's moments); 5 read the same (755 / 478 MB)
    ddp, _ = run_knobs({"sharding": "ddp", "env": env}, limits={"max_steps": 3}, **model)
    fsdp, _ = run_knobs({"sharding": "fsdp", "env": env}, limits={"max_steps": 3}, **model)
    assert ddp.outcome is fsdp.outcome is Outcome.COMPLETE, (ddp.reason, fsdp.reason)
    assert ddp.peak_memory_mb is not None and fsdp.peak_memory_mb is not None
    # the state a rank no longer holds: half of (parameters + gradients + 2 moments) = 200 MB; ask for half
    assert fsdp.peak_memory_mb < ddp.peak_memory_mb - 100, (fsdp.peak_memory_mb, ddp.peak_memory_mb)


@pytest.mark.slow
def test_compile_is_timed_apart_from_throughput(run_knobs: Any) -> None:
    result, applied = run_knobs({"compile": "default"}, world_size=1, limits={"max_steps": 5, "max_seconds": 240})
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert applied["ranks"][0]["compiled"] is True
    assert result.compile_s is not None and result.compile_s > 0
    assert applied["compile_s"] == pytest.approx(result.compile_s)
    # throughput comes from the measured windows only, which start after the compiling warm-up steps
    assert result.windows and all(w.step > 2 for w in result.windows)


@pytest.mark.slow
def test_a_trial_stopped_while_compiling_says_so(run_knobs: Any, tmp_path: Path) -> None:
    # A cold compile: with the inductor caches of earlier compiled trials, this model compiles within 4 s.
    cold = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    result, _ = run_knobs({"compile": "default", "env": cold}, world_size=1, limits={"max_seconds": 4})
    assert result.outcome is Outcome.TIMEOUT
    assert "still compiling" in result.reason and "max_seconds" in result.reason


SLURM_TUNER = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import TrialPlan, run_trial
from autotune.trial_runner._slurm import SlurmLauncher
config = TrialConfig.create(base_lr=1e-3, base_batch_size=32, batch_size=32, world_size=2, threads_per_rank=3,
                            env={{"KNOB_TEST_FLAG": "slurm"}})
plan = TrialPlan(config=config, entrypoint="knobs_workload.py:build", base_dir={here!r},
                 limits=TrialLimits(warmup_steps=2, max_steps=6, max_seconds=90))
result = run_trial(plan, Path(sys.argv[1]), SlurmLauncher())
print(json.dumps({{"outcome": result.outcome.value, "reason": result.reason, "threads": result.threads_per_rank}}))
"""


@pytest.mark.slow
def test_slurm_node_program_passes_threads_and_env_to_every_rank(slurm_cluster: object, tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "tuner.py"
    script.write_text(SLURM_TUNER.format(root=str(HERE.parent.parent), here=str(HERE)))
    out = subprocess.run(["salloc", "-N1", "--exclusive", sys.executable, str(script), str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=180, check=False, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "complete", report["reason"]
    assert report["threads"] == 3
    applied = json.loads((tmp_path / "t" / "applied.json").read_text())
    for rank in applied["ranks"]:
        assert rank["torch_threads"] == 3
        # the node program's torchrun started the rank with them: OpenMP and MKL read them at load
        assert rank["env_at_start"] == {"KNOB_TEST_FLAG": "slurm"}
        assert rank["thread_env_at_start"] == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
