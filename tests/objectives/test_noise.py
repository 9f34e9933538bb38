"""Measurements that know when they are noisy: intervals, separation, the speed-up's interval, the far-off
first trial, and the busy-machine warning — on real Optuna studies of synthetic measurements."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest

from autotune.objectives import Group, choose, config_key
from autotune.objectives._noise import busy_warning, could_separate, half_width, pooled_sd
from autotune.search_space import TrialConfig
from autotune.trial_result import t975

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _config(batch_size: int) -> dict[str, object]:
    return TrialConfig.create(base_lr=1e-3, base_batch_size=32, batch_size=batch_size).model_dump()


def _trial(study: optuna.Study, role: str, batch_size: int, value: float, **attrs: object) -> int:
    trial = study.ask()
    config = _config(batch_size)
    for name, attr in {"role": role, "config": config, "config_key": config_key(config), "outcome": "complete",
                       "throughput_samples_s": value, "peak_memory_mb": 100.0, "loss": 1.0, **attrs}.items():
        trial.set_user_attr(name, attr)
    trial.set_constraint("memory", -1.0)
    study.tell(trial, value)
    return trial.number


def _study(runs: dict[int, list[float]], baseline: int = 32) -> optuna.Study:
    """The baseline's runs first (its first is the baseline trial), then each other batch size's: the first
    a search trial, the rest confirmation runs."""
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["throughput_samples_s"])
    for batch, values in sorted(runs.items(), key=lambda kv: kv[0] != baseline):
        for i, value in enumerate(values):
            role = "confirm" if i else ("baseline" if batch == baseline else "search")
            _trial(study, role, batch, value)
    study.set_user_attr("autotune_confirmation", {})
    return study


def test_the_interval_is_students_t_over_root_n_and_never_narrower_than_the_windows() -> None:
    values = [1000.0, 1100.0, 1050.0]
    expected = t975(2) * 50.0 / math.sqrt(3) / 1050.0
    assert half_width(values) == pytest.approx(expected)
    assert half_width([1000.0]) is None  # once, without a window interval: unknown
    assert half_width([1000.0], [0.04]) == pytest.approx(0.04)
    assert half_width([1000.0, 1000.0], [0.04, 0.06]) == pytest.approx(0.05 / math.sqrt(2))


def test_the_deviation_is_pooled_over_the_configurations_measured_more_than_once() -> None:
    # two measurements alone: t(1) = 12.7 makes a ~6% difference an interval of about ±56%
    alone = half_width([1064.0, 938.0])
    assert alone is not None and alone > 0.5
    # pooled with two configurations measured 4 and 3 times: 1 + 3 + 2 degrees of freedom
    groups = [[1064.0, 938.0], [2004.0, 2189.0, 1794.0, 1938.0], [2081.0, 1851.0, 1656.0]]
    pooled = pooled_sd(groups)
    assert pooled is not None and pooled.df == 6
    logs = [[math.log(v) for v in g] for g in groups]
    squares = sum((x - statistics.fmean(g)) ** 2 for g in logs for x in g)
    assert pooled.sd == pytest.approx(math.sqrt(squares / 6))
    assert half_width(groups[0], (), pooled) == pytest.approx(t975(6) * pooled.sd / math.sqrt(2))
    assert 0.1 < half_width(groups[0], (), pooled) < 0.2  # type: ignore[operator]
    # never narrower than the windows; a group with a value <= 0 (no log) and single values are left out
    assert half_width(groups[0], [0.5, 0.5], pooled) == pytest.approx(0.5 / math.sqrt(2))
    assert pooled_sd([[5.0], [-1.0, 2.0]]) is None


def test_a_once_measured_configuration_gets_the_pooled_interval_not_its_windows_alone() -> None:
    # benchmarks/trial_scatter.py: whole runs of one configuration scattered 9-19% while each run's windows put
    # its error at 2-4%; a once-measured baseline or runner-up must not look that precise when the study knows
    # its run-to-run noise from configurations measured more than once.
    pooled = pooled_sd([[2004.0, 2189.0, 1794.0, 1938.0], [2081.0, 1851.0, 1656.0]])
    assert pooled is not None and pooled.df == 5
    once = half_width([1000.0], [0.03], pooled)
    assert once == pytest.approx(t975(5) * pooled.sd) and once > 0.03 * 5  # type: ignore[operator]
    assert half_width([1000.0], [5.0], pooled) == pytest.approx(5.0)  # never narrower than its windows
    assert half_width([1000.0], [], pooled) == pytest.approx(t975(5) * pooled.sd)
    assert half_width([1000.0], [0.03]) == pytest.approx(0.03)  # nothing pooled: the windows alone


def test_a_winner_does_not_separate_from_a_once_measured_baseline_on_its_windows_alone() -> None:
    # 64 measured 3 times (about ±4% run to run, ±19% for one run with 2 degrees of freedom), the baseline
    # once: 15% apart is inside the noise, and the speed-up carries that interval
    study = _study({32: [1000.0], 64: [1150.0, 1200.0, 1100.0]})
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(64))
    assert choice.baseline is not None and choice.baseline.half_width is not None
    assert choice.baseline.half_width > 0.15 and not choice.separated
    assert choice.speedup_half_width is not None and choice.speedup_half_width > 0.2


def test_separated_intervals_say_best_by_with_the_interval() -> None:
    # 64 measures 1500 +- ~2%, the baseline 1000 +- ~2%: apart, so "best by 50% (± ...)".
    study = _study({32: [1000.0, 990.0, 1010.0, 1005.0], 64: [1500.0, 1490.0, 1510.0, 1505.0]})
    choice = choose(study)
    assert choice.best is not None and choice.best.config_key == config_key(_config(64))
    assert choice.separated and choice.versus is not None
    statement = choice.statement()
    assert statement is not None and statement.startswith("best by 50% (± ") and "over #0" in statement
    assert choice.speedup == pytest.approx(1502.5 / 1002.5)
    assert choice.speedup_half_width is not None and 0 < choice.speedup_half_width < 0.05


def test_overlapping_intervals_are_a_tie_within_noise() -> None:
    # 64's median is 12% above the baseline's, but both spread about +-15% run to run: no winner by noise.
    study = _study({32: [1000.0, 1200.0, 900.0, 1100.0], 16: [700.0, 710.0], 64: [1300.0, 1000.0, 1150.0, 1200.0]})
    choice = choose(study)
    assert not choice.separated
    statement = choice.statement()
    assert statement is not None and statement.startswith("tied within noise with #")
    assert "±" in statement and "best by" not in statement


def _group(median: float, n: int, width: float | None) -> Group:
    return Group(config_key=str(median), config={}, trials=tuple(range(n)), values=(median,) * n, median=median,
                 spread=0.0, peak_memory_mb=None, loss=None, half_width=width)


def test_leaders_are_separable_only_when_the_runs_left_could_part_them_at_their_medians() -> None:
    # Two runs each, df 4 pooled, +-16% each: 6% apart needs far more than two more runs each; 30% apart does not.
    close, far, other = _group(1060.0, 2, 0.16), _group(1300.0, 2, 0.16), _group(1000.0, 2, 0.16)
    assert not could_separate(close, other, "maximize", (2, 2), 4)
    assert could_separate(far, other, "maximize", (2, 2), 4)
    assert not could_separate(far, other, "maximize", (0, 0), 4)  # no runs left: only what is measured counts
    # The projection: each half-width times sqrt(n / (n + k)) and t(df + k_total) / t(df).
    shrunk = 0.16 * math.sqrt(2 / 4) * t975(8) / t975(4)
    gap = (1 + shrunk) / (1 - shrunk)  # the ratio at which the projected intervals just touch
    assert could_separate(_group(1000.0 * gap * 1.01, 2, 0.16), other, "maximize", (2, 2), 4)
    assert not could_separate(_group(1000.0 * gap * 0.99, 2, 0.16), other, "maximize", (2, 2), 4)
    # Minimizing: the lower median leads.
    assert could_separate(_group(700.0, 2, 0.16), other, "minimize", (2, 2), 4)
    # Unknown intervals or nothing pooled: it cannot be told, so the runs go on.
    assert could_separate(close, _group(1000.0, 1, None), "maximize", (2, 2), 4)
    assert could_separate(close, other, "maximize", (2, 2), None)


def test_once_measured_configurations_cannot_be_told_apart() -> None:
    study = _study({32: [1000.0], 64: [1500.0]})
    choice = choose(study)
    assert not choice.separated and choice.speedup_half_width is None
    assert "interval unknown: measured once" in (choice.statement() or "")


def test_a_first_trial_far_below_its_rerun_is_left_out_not_averaged_in() -> None:
    # The quickstart: the baseline read 922 samples/s as the study's first trial and 1,605 when re-run
    # in confirmation; the winner measured about 2,809. Averaged in (median of 922 and 1,605), the speed-up
    # reads 2.22x; from the re-run alone it is 1.75x.
    study = _study({32: [922.0, 1605.0], 64: [2800.0, 2809.0, 2820.0]})
    choice = choose(study)
    assert choice.left_out == (0,)
    assert choice.baseline is not None and choice.baseline.trials == (1,)
    assert choice.speedup == pytest.approx(2809.0 / 1605.0)
    assert f"{choice.speedup:.2f}" == "1.75"
    assert pytest.approx(2.22, abs=0.01) == 2809.0 / ((922.0 + 1605.0) / 2)  # what averaging in would say


def test_a_first_trial_within_noise_of_its_reruns_stays_in() -> None:
    study = _study({32: [950.0, 1000.0], 64: [1500.0, 1490.0]})
    choice = choose(study)
    assert choice.left_out == () and choice.baseline is not None and 0 in choice.baseline.trials


def test_the_busy_warning_names_the_trials_measured_on_a_busy_machine() -> None:
    study = _study({32: [1000.0], 64: [1500.0]})
    assert busy_warning(study) is None
    _trial(study, "search", 128, 800.0, busy=True, machine_load=0.93)
    _trial(study, "search", 16, 700.0, busy=False, machine_load=0.02)
    _trial(study, "confirm", 64, 900.0, busy=True, machine_load=0.41)
    line = busy_warning(study)
    assert line is not None and "\n" not in line
    assert "2 trial(s) measured on a busy machine (#2, #4" in line and "#3" not in line and "93%" in line
