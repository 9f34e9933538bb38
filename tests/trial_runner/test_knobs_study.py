"""A real study that searches the new knobs: the choice comes back through calibrate() and `autotune best`,
and the example launcher applies a sharded, thread-pinned choice with its environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from tests._cli import autotune as autotune_cli

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.mark.slow
def test_searched_threads_and_env_come_back_through_calibrate_and_best(tmp_path: Path) -> None:
    (tmp_path / "knobs_workload.py").write_text((HERE / "knobs_workload.py").read_text())
    study = tmp_path / "study.yaml"
    study.write_text(
        """
name: knobs
workload: {entrypoint: knobs_workload.py:build}
search_space:
  threads_per_rank: {choices: [share, 3]}
env:
  KNOB_FLAG: {choices: [a, b]}
  FIXED_FLAG: "on"
trial: {warmup_steps: 2, max_steps: 8, max_seconds: 60}
sampler: {name: grid}
pruner: {name: none}
budget: {n_trials: 3}
confirm: {top_k: 0}
"""
    )
    chosen = autotune.calibrate(study)
    trials = {t.number: t for t in chosen.study.get_trials()}
    searched = [t for t in trials.values() if t.user_attrs.get("role") == "search"]
    assert searched and all("env.KNOB_FLAG" in t.params and "threads_per_rank" in t.params for t in searched)
    for t in trials.values():  # every trial records the threads it ran with; a word (auto: the baseline) resolved
        assert isinstance(t.user_attrs["threads_per_rank"], int)
        assert t.user_attrs["config"]["env"]["FIXED_FLAG"] == "on"
    shown = autotune_cli("best", str(study), "--format", "json")  # in this process: the CLI, not its start
    assert shown.exit_code == 0, shown.stderr
    best = json.loads(shown.stdout)
    assert best["config"]["threads_per_rank"] == chosen.config.threads_per_rank
    assert best["env"] == chosen.config.env == {k: v for k, v in chosen.env().items() if "NUM_THREADS" not in k}
    assert best["threads_per_rank_resolved"] == trials[best["trial"]].user_attrs["threads_per_rank"]
    if isinstance(chosen.config.threads_per_rank, int):  # a searched trial won
        assert best["threads_per_rank_resolved"] == chosen.config.threads_per_rank
        assert chosen.env()["OMP_NUM_THREADS"] == str(chosen.config.threads_per_rank)
        assert trials[best["trial"]].params["env.KNOB_FLAG"] == chosen.config.env["KNOB_FLAG"]
    else:  # a word: resolved again where the ranks run, as the trial did (one rank on this machine)
        assert best["threads_per_rank_resolved"] == chosen.torch_threads()


@pytest.mark.slow
def test_example_launcher_trains_a_sharded_choice(tmp_path: Path) -> None:
    (tmp_path / "calibrated_launcher.py").write_text((ROOT / "studies" / "calibrated_launcher.py").read_text())
    (tmp_path / "quickstart.yaml").write_text(
        """
name: sharded
workload: {entrypoint: autotune.workloads.mlp:build, args: {hidden: 64, depth: 2, transform_cost: 1}}
search_space: {sharding: fsdp, world_size: 2, threads_per_rank: 1, grad_accum: 2}
env: {KNOB_FLAG: "on"}
baseline: {sharding: fsdp, world_size: 2, threads_per_rank: 1, grad_accum: 2}
trial: {warmup_steps: 2, max_steps: 8, max_seconds: 60}
pruner: {name: none}
budget: {n_trials: 1}
confirm: {top_k: 0}
"""
    )
    out = subprocess.run([sys.executable, str(tmp_path / "calibrated_launcher.py"), "--steps", "12"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fsdp" in out.stdout and "threads=1" in out.stdout and "KNOB_FLAG=on" in out.stdout
    # what rank 0 of the launcher's own torchrun ran with
    assert "rank 0: 1 threads, fsdp, environment {'KNOB_FLAG': 'on', 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}" \
        in out.stdout
    losses = [float(line.split("loss ")[1]) for line in out.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3 and losses[-1] < losses[0]
