"""The report's predicted-against-measured memory view, over a study the real tuner wrote (replayed trials,
a real SQLite file), without a browser."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from autotune.report import memory_prediction_data, render_html, report_data
from autotune.report._figures import memory_prediction_figure
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec

HERE = Path(__file__).resolve().parent
BUDGET = 1800.0


def _memory(config: TrialConfig) -> float:
    return 1000.0 + 16.0 * config.batch_size * (0.5 if config.amp == "bf16" else 1.0)


def _study(folder: Path) -> optuna.Study:
    (folder / "faulty.py").write_text((HERE.parent / "trial_runner" / "faulty.py").read_text())
    doc = {
        "name": "memory-view", "workload": {"entrypoint": "faulty.py:build", "args": {"fault": "none"}},
        "trial": {"warmup_steps": 2, "max_steps": 20, "report_every": 3},
        "search_space": {"batch_size": {"choices": [8, 16, 32, 64, 128]}, "amp": {"choices": ["off", "bf16"]}},
        "sampler": {"name": "grid"}, "constraints": {"max_memory_mb": BUDGET}, "confirm": {"top_k": 0},
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        return Measured(100.0 + config.batch_size, peak_memory_mb=_memory(config))

    Tuner(load_spec(str(folder / "study.yaml")), launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(
        n_trials=10)
    return optuna.load_study(study_name="memory-view", storage=f"sqlite:///{folder / 'memory-view.db'}")


def test_predicted_against_measured_with_the_configurations_not_launched(tmp_path: Path) -> None:
    study = _study(tmp_path)
    trials = study.get_trials(deepcopy=False)
    data = memory_prediction_data(study)
    assert data.budget == BUDGET  # from the study file stored in the study
    skipped = [t.number for t in trials if t.user_attrs.get("launched") is False]
    assert skipped and [s.number for s in data.not_launched] == skipped
    assert all(s.reason.startswith("not launched: predicted") for s in data.not_launched)
    with_both = [t.number for t in trials if t.user_attrs.get("launched") is not False
                 and t.user_attrs.get("predicted_memory_mb") is not None and t.user_attrs.get("peak_memory_mb")]
    assert [p.number for p in data.points] == with_both
    for p in data.points:
        t = trials[p.number]
        assert (p.predicted_mb, p.measured_mb) == (t.user_attrs["predicted_memory_mb"], t.user_attrs["peak_memory_mb"])
    assert data.median_error is not None and data.median_error < 0.10
    fig = memory_prediction_figure(data)
    assert fig is not None
    names = [trace.name for trace in fig.data]
    assert "not launched" in names and "predicted = measured" in names
    html = render_html(report_data(study))
    assert "Predicted against measured memory" in html
    assert f"{len(skipped)} configuration{'s' if len(skipped) != 1 else ''} not launched" in html


def test_a_study_without_predictions_says_so() -> None:
    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_int("batch_size", 1, 8), n_trials=2)
    data = memory_prediction_data(study)
    assert data.points == [] and data.not_launched == [] and data.median_error is None
    assert memory_prediction_figure(data) is None
    assert "no trial has a predicted and a measured peak yet" in render_html(report_data(study))
