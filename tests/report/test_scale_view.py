"""The report's throughput-over-scale view, over a study the real tuner wrote (replayed trials whose throughput
follows a known step-time model, a real SQLite file), without a browser."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.report import render_html, report_data
from autotune.report._scale import scale_data
from autotune.report._scale_figure import scale_figure
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec

HERE = Path(__file__).resolve().parent


def _step(ranks: int, batch: int) -> float:
    grad = 0.01 + 0.001 * batch
    sync = 0.0 if ranks == 1 else 0.02 + 0.004 * (ranks - 2)
    return (grad**2 + sync**2) ** 0.5


def _study(folder: Path, world_sizes: list[int]) -> optuna.Study:
    (folder / "faulty.py").write_text((HERE.parent / "trial_runner" / "faulty.py").read_text())
    doc = {
        "name": "scale-view",
        "workload": {"entrypoint": "faulty.py:build", "args": {"fault": "none"}},
        "trial": {"warmup_steps": 2, "max_steps": 11, "report_every": 3},
        "search_space": {"batch_size": {"choices": [8, 64]}, "world_size": {"choices": world_sizes}},
        "sampler": {"name": "grid"},
        "pruner": {"name": "none"},
        "confirm": {"top_k": 0},
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        return Measured(config.global_batch / _step(config.world_size, config.batch_size))

    spec = load_spec(str(folder / "study.yaml"))
    Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=2 * len(world_sizes))
    return optuna.load_study(study_name="scale-view", storage=f"sqlite:///{folder / 'scale-view.db'}")


@pytest.mark.slow
def test_the_view_predicts_past_the_measured_ranks_beside_the_measurements(tmp_path: Path) -> None:
    study = _study(tmp_path, [1, 2, 4])
    spec = load_spec(str(tmp_path / "study.yaml"), check_workload=False)
    data = scale_data(study, spec)
    assert [p.world_size for p in data.predicted] == [1, 2, 4, 8, 16]
    assert [s for s, _ in data.measured] == [1, 2, 4]
    for p in data.predicted:
        truth = p.world_size * 64 / _step(p.world_size, 64)
        assert p.batch_size == 64 and p.low <= p.value <= p.high
        assert p.value == pytest.approx(truth, rel=0.05)
    figure = scale_figure(data)
    assert figure is not None and [t.name for t in figure.data] == ["90% interval", "predicted best", "best measured"]
    html = render_html(report_data(study, spec))
    assert "Throughput over scale" in html


def test_a_study_of_one_world_size_says_what_the_view_needs(tmp_path: Path) -> None:
    study = _study(tmp_path, [1])
    data = scale_data(study, load_spec(str(tmp_path / "study.yaml"), check_workload=False))
    assert data.predicted == [] and scale_figure(data) is None
    assert data.note == "the throughput model needs completed trials at 2 or more world sizes (measured: 1)"
