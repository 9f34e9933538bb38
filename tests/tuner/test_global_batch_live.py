"""The quickstart with its global batch held at 256 (constraints.global_batch), run for real through the CLI (its
click commands, in this process: tests/_cli.py): real ranks on the CPU, a real SQLite file. Every trial trains 256
samples per optimizer step, split its own way, at one learning rate; the summary and `autotune best` say so."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autotune.search_space import SPLIT_PARAM
from tests._cli import autotune

ROOT = Path(__file__).resolve().parent.parent.parent
SETS = [
    "constraints.global_batch=256", "search_space.grad_accum={choices: [1, 2, 4]}",
    # short trials: 256 samples a step (four times the quickstart's base batch) within the quickstart's cap
    "trial.warmup_steps=2", "trial.max_steps=10", "trial.max_seconds=90", "confirm.top_k=0",
]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_quickstart_holding_its_global_batch_at_256(tmp_path: Path) -> None:
    study = tmp_path / "quickstart.yaml"
    study.write_text((ROOT / "studies" / "quickstart.yaml").read_text())
    sets = [item for s in SETS for item in ("--set", s)]
    run = autotune("run", str(study), "--n-trials", "4", *sets)
    assert run.exit_code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    storage = f"sqlite:///{tmp_path / 'mlp-quickstart.db'}"
    trials = optuna.load_study(study_name="mlp-quickstart", storage=storage).get_trials(deepcopy=False)
    assert len(trials) == 4
    configs = [t.user_attrs["config"] for t in trials]
    assert [c["batch_size"] * c["grad_accum"] * c["world_size"] for c in configs] == [256] * 4
    assert {c["global_batch"] for c in configs} == {256}
    assert {c["lr"] for c in configs} == {configs[0]["base_lr"]}  # the quickstart's lr_scaling: sqrt, not applied
    assert all(SPLIT_PARAM in t.params for t in trials if t.user_attrs["role"] == "search")
    for t in trials:  # what the ranks trained: 256 samples per optimizer step
        if t.user_attrs.get("steps"):
            assert t.user_attrs["samples"] == 256 * t.user_attrs["steps"], t.user_attrs
    assert "global batch held at 256 (constraints.global_batch)" in run.stdout
    best = autotune("best", str(study), "--format", "json")
    assert best.exit_code == 0, best.stderr
    derived = json.loads(best.stdout)["derived"]
    assert derived["global_batch"] == 256 and derived["global_batch_held"] is True
    config = json.loads(best.stdout)["config"]
    assert derived["split"] == f"{config['batch_size']}x{config['grad_accum']}x{config['world_size']}"
