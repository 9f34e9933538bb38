"""The report's parameter importances and parallel coordinates show hyperparameters (hp.<name>) and the
time_to_loss objective, read from a study written as the tuner writes one."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.report import importance_data, parallel_data, trials_table_data
from autotune.report._records import trial_records


def _study() -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    study.set_metric_names(["time_to_loss_s"])
    for i in range(8):
        dropout = 0.05 * i
        batch = 16 * (1 + i % 3)
        betas = ["[0.9, 0.99]", "[0.9, 0.95]"][i % 2]
        seconds = 1.0 + 10 * dropout + 0.01 * batch
        trial = optuna.trial.create_trial(
            params={"batch_size": batch, "hp.dropout": dropout, "hp.optimizer.betas": betas},
            distributions={
                "batch_size": IntDistribution(16, 48, step=16),
                "hp.dropout": FloatDistribution(0.0, 0.5),
                "hp.optimizer.betas": CategoricalDistribution(["[0.9, 0.99]", "[0.9, 0.95]"]),
            },
            values=[seconds],
            user_attrs={
                "role": "search", "outcome": "complete", "time_to_loss_s": seconds, "throughput_samples_s": 100.0,
                "config": {"batch_size": batch, "global_batch": batch,
                           "hyperparameters": {"dropout": dropout, "optimizer.betas": [0.9, 0.99 - 0.04 * (i % 2)]}},
            },
        )
        study.add_trial(trial)
    return study


def test_importances_rate_the_hyperparameters() -> None:
    data = importance_data(_study())
    assert data.importances
    metric, importances = data.importances[0]
    assert metric == "time_to_loss_s"
    assert {"hp.dropout", "hp.optimizer.betas", "batch_size"} <= set(importances)
    assert max(importances, key=importances.__getitem__) == "hp.dropout"  # it drives the objective here


def test_parallel_coordinates_have_an_axis_per_hyperparameter_and_the_objective() -> None:
    data = parallel_data(_study())
    names = [axis.name for axis in data.axes]
    assert names[:3] == ["batch_size", "hp.dropout", "hp.optimizer.betas"]
    assert "time_to_loss_s" in names and data.color_metric == "time_to_loss_s"
    assert all(line.positions[names.index("hp.dropout")] is not None for line in data.lines)


def test_records_read_hyperparameters_from_the_config() -> None:
    records = trial_records(_study())
    assert records[1].knob("hp.dropout") == 0.05
    assert records[1].knob("hp.optimizer.betas") == "[0.9, 0.95]"
    assert records[1].time_to_loss_s is not None
    assert trials_table_data(_study()).rows
