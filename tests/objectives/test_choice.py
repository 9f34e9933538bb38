"""choose(): the one winner of a study, the default configuration included."""

from __future__ import annotations

import optuna
import pytest

from autotune.objectives import choose, config_key
from autotune.search_space import TrialConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _config(batch_size: int) -> dict[str, object]:
    return TrialConfig.create(base_lr=1e-3, base_batch_size=32, batch_size=batch_size).model_dump()


def _trial(study: optuna.Study, role: str, batch_size: int, value: float, outcome: str = "complete",
           memory: float = -1.0) -> None:
    trial = study.ask()
    config = _config(batch_size)
    for name, attr in {"role": role, "config": config, "config_key": config_key(config), "outcome": outcome,
                       "throughput_samples_s": value, "peak_memory_mb": 100.0, "loss": 1.0}.items():
        trial.set_user_attr(name, attr)
    trial.set_constraint("memory", memory)
    study.tell(trial, value)


def _study() -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["throughput_samples_s"])
    return study


def test_the_default_configuration_wins_where_it_is_fastest() -> None:
    study = _study()
    _trial(study, "baseline", 32, 1000.0)
    _trial(study, "search", 64, 900.0)
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(32))
    assert choice.default_is_best and choice.speedup == 1.0


def test_within_the_measured_spread_the_default_is_kept() -> None:
    # The baseline measured 1000 and 1100 (median 1050, spread 9.5%); batch 64 a median of 1100, 4.8% more:
    # inside the spread, so the default is kept (the best median alone would pick batch 64).
    study = _study()
    _trial(study, "baseline", 32, 1000.0)
    _trial(study, "search", 64, 1080.0)
    _trial(study, "confirm", 32, 1100.0)
    _trial(study, "confirm", 64, 1120.0)
    choice = choose(study)
    assert choice.default_is_best and choice.speedup == 1.0
    assert choice.best is choice.baseline


def test_a_clearly_faster_configuration_wins_with_its_speedup() -> None:
    study = _study()
    _trial(study, "baseline", 32, 1000.0)
    _trial(study, "search", 64, 1500.0)
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(64))
    assert not choice.default_is_best and choice.speedup == pytest.approx(1.5)


@pytest.mark.parametrize("outcome, memory", [("oom", 1.0), ("diverged", -1.0), ("complete", 50.0)])
def test_infeasible_or_unfinished_trials_are_never_chosen(outcome: str, memory: float) -> None:
    study = _study()
    _trial(study, "baseline", 32, 1000.0)
    _trial(study, "search", 128, 5000.0, outcome=outcome, memory=memory)
    _trial(study, "search", 64, 1500.0)
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(64))


def test_after_confirmation_only_the_reconfirmed_configurations_and_the_baseline_compete() -> None:
    # 16 measured 1400 once and was not confirmed; 64 was confirmed at a median of 1300.
    study = _study()
    _trial(study, "baseline", 32, 1000.0)
    _trial(study, "search", 64, 1450.0)
    _trial(study, "search", 16, 1400.0)
    _trial(study, "confirm", 64, 1300.0)
    _trial(study, "confirm", 64, 1200.0)
    _trial(study, "confirm", 32, 1000.0)
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(64))
    assert not choice.confirmed  # the confirmation attribute is not written yet
    study.set_user_attr("autotune_confirmation", {})
    assert choose(study).confirmed and choose(study).best == choice.best
