"""benchmarks/peer_ray.py's own pieces: the knob space its peers search and the training script they run.

The peers must search the very space autotune searches (the quickstart's, prefetch_factor only with
DataLoader workers) and measure what autotune measures; a real Optuna study draws from the space and a
real two-rank torchrun runs the peers' training script (Ray Tune itself is exercised by
``python benchmarks/peer_ray.py --quick``).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
# benchmarks/ is not a package: its scripts import each other by file name, as `python benchmarks/x.py` does
peer_ray = importlib.import_module("peer_ray")


def test_the_peers_draw_the_quickstarts_space_with_prefetch_only_when_there_are_workers() -> None:
    setup = peer_ray.read_setup(peer_ray.STUDY, quick=False, n_trials=None, max_steps=None)
    space = setup["search_space"]
    assert setup["n_trials"] == 10 and setup["warmup_steps"] == 5 and setup["max_steps"] == 50
    assert setup["window"] == 5
    # amp's choices stay strings ("off" is not YAML 1.1's false), as autotune reads the study file
    assert space["amp"]["choices"] == ["off", "bf16"]
    assert setup["default"] == {"batch_size": 64, "num_workers": 0, "amp": "off", "lr_scaling": "sqrt",
                                "world_size": 1}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = []
    for _ in range(40):
        trial = study.ask()
        fixed = peer_ray.suggest(trial, space)
        knobs = peer_ray.normalized({**trial.params, **fixed}, list(space))
        study.tell(trial, 1.0)
        drawn.append(knobs)
        assert 16 <= knobs["batch_size"] <= 256 and 0 <= knobs["num_workers"] <= 2
        assert knobs["world_size"] in (1, 2) and knobs["amp"] in ("off", "bf16")
        assert ("prefetch_factor" in knobs) == (knobs["num_workers"] > 0)
    assert {k["num_workers"] for k in drawn} == {0, 1, 2}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_diy_peers_torchrun_trains_the_workload_and_reports_every_window(tmp_path: Path) -> None:
    setup = peer_ray.read_setup(peer_ray.STUDY, quick=True, n_trials=1, max_steps=9)
    setup["warmup_steps"], setup["window"] = 3, 2
    knobs = {"batch_size": 16, "num_workers": 1, "prefetch_factor": 2, "amp": "bf16", "lr_scaling": "sqrt",
             "world_size": 2}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(peer_ray.rank_config(setup, knobs, time.time())))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(peer_ray.PEER_TRAIN), str(config)]
    subprocess.run(cmd, check=True, timeout=240, capture_output=True, start_new_session=True)
    windows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # measured steps 4..9, a window every 2 steps after the warm-up: at steps 5, 7 and 9
    assert [w["step"] for w in windows] == [5, 7, 9]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == windows[-1]
    assert result["throughput_samples_s"] > 0 and result["training_span_s"] > 0
    assert result["time_to_first_step_s"] >= 0
