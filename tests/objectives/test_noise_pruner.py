"""NoiseAwarePruner: prunes the clearly worse, never on noise, never on the first window."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune.objectives import MARGIN_RANGE, PRIOR_MARGIN, Pooled, measured_margin, reading_noise
from autotune.pruners import NoiseAwarePruner

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(direction: str, finished: list[dict[int, float]]) -> optuna.Study:
    study = optuna.create_study(direction=direction)
    for values in finished:
        trial = study.ask()
        for step, value in values.items():
            trial.report(value, step)
        study.tell(trial, values[max(values)])
    return study


def _running(study: optuna.Study, values: dict[int, float]) -> optuna.trial.FrozenTrial:
    trial = study.ask()
    for step, value in values.items():
        trial.report(value, step)
    return study._storage.get_trial(trial._trial_id)


FINISHED = [{10: 100.0, 20: 100.0}, {10: 110.0, 20: 110.0}, {10: 90.0, 20: 90.0}]


def test_prunes_a_clearly_worse_trial_but_not_one_within_the_margin() -> None:
    study = _study("maximize", FINISHED)
    pruner = NoiseAwarePruner(n_startup_trials=3, n_warmup_steps=5, margin=0.1)
    assert pruner.prune(study, _running(study, {10: 80.0}))  # median 100, 80 < 90
    assert not pruner.prune(study, _running(study, {10: 91.0}))  # 9% below the median: noise


def test_minimize_direction() -> None:
    study = _study("minimize", FINISHED)
    pruner = NoiseAwarePruner(n_startup_trials=3, margin=0.1)
    assert pruner.prune(study, _running(study, {10: 120.0}))
    assert not pruner.prune(study, _running(study, {10: 105.0}))


def test_never_prunes_at_or_before_the_warmup_step_nor_before_startup_trials() -> None:
    study = _study("maximize", FINISHED)
    assert not NoiseAwarePruner(n_warmup_steps=10).prune(study, _running(study, {10: 1.0}))
    assert NoiseAwarePruner(n_warmup_steps=9).prune(study, _running(study, {10: 1.0}))
    assert not NoiseAwarePruner(n_startup_trials=4).prune(study, _running(study, {10: 1.0}))


def test_compares_at_the_same_step_with_each_trials_latest_value() -> None:
    # finished trials were slow early and fast later; a trial fast early is not judged on their final values
    study = _study("maximize", [{10: 50.0, 20: 200.0}] * 3)
    pruner = NoiseAwarePruner(n_startup_trials=3, margin=0.1)
    assert not pruner.prune(study, _running(study, {10: 60.0}))
    assert pruner.prune(study, _running(study, {10: 60.0, 20: 150.0}))
    # a step between windows compares with the latest value at or before it
    assert pruner.prune(study, _running(study, {15: 40.0}))


def test_a_lucky_early_window_never_sets_the_bar_above_what_the_trial_reached() -> None:
    # the quickstart, recorded: the best so far read 6,302 samples/s at its first window and ended at 4,923; a
    # configuration at 5,074 in its first window was pruned against the 6,302 with a 17% margin
    study = _study("maximize", [{20: 2454.0, 50: 2797.0}, {20: 3816.0, 50: 4024.0}, {20: 6302.0, 50: 4923.0}])
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.17)
    assert not pruner.prune(study, _running(study, {20: 5074.0}))
    assert pruner.prune(study, _running(study, {20: 4000.0}))  # clearly below the 4,923 it did reach
    # a trial that kept its early speed still sets the bar there
    steady = _study("maximize", [{20: 6302.0, 50: 6250.0}])
    assert pruner.prune(steady, _running(steady, {20: 5074.0}))
    # a loss, which improves as it trains, is still compared at the same step
    loss = _study("minimize", [{10: 2.0, 20: 1.0}])
    assert not NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1).prune(loss, _running(loss, {10: 2.1}))


def test_percentile_keeps_only_the_best_share() -> None:
    study = _study("maximize", [{10: float(v)} for v in (100, 200, 300, 400, 500)])
    # top 25%: threshold at 400; 350 is 12.5% below -> pruned; the median rule would keep it
    assert NoiseAwarePruner(25.0, margin=0.1).prune(study, _running(study, {10: 350.0}))
    assert not NoiseAwarePruner(50.0, margin=0.1).prune(study, _running(study, {10: 350.0}))


@pytest.mark.parametrize(("percentile", "margin"), [(-1.0, 0.1), (100.0, 0.1), (50.0, 1.0), (50.0, -0.1)])
def test_bad_parameters(percentile: float, margin: float) -> None:
    with pytest.raises(ValueError):
        NoiseAwarePruner(percentile, margin=margin)


def test_percentile_zero_compares_with_the_best_trial() -> None:
    # the ``best`` pruner: 110 is the best finished trial; 97 is 12% below it, 100 only 9% below
    study = _study("maximize", FINISHED)
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1)
    assert pruner.prune(study, _running(study, {10: 97.0}))
    assert not pruner.prune(study, _running(study, {10: 100.0}))
    # the same trial is not pruned against the median (100)
    assert not NoiseAwarePruner(50.0, n_startup_trials=1, margin=0.1).prune(study, _running(study, {10: 97.0}))


def test_a_trial_is_judged_on_two_windows_not_on_its_first() -> None:
    # The quickstart, live: a batch-256 bf16 two-worker configuration read 3,070 samples/s in its first window
    # after the warm-up (4,300-6,460 in eight other studies; its end 5,500) and was pruned against a reference
    # at 3,844. One window after a warm-up scatters far beyond the margin; two are the least it is judged on.
    study = _study("maximize", [{20: 2252.0, 25: 2441.0, 50: 2644.0}, {20: 3844.0, 25: 3825.0, 50: 3764.0}])
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, n_warmup_steps=15, min_windows=2, margin=0.1)
    assert not pruner.prune(study, _running(study, {20: 3070.0}))  # one window: not evidence enough
    assert not pruner.prune(study, _running(study, {20: 3070.0, 25: 3940.0}))  # the second recovered
    assert pruner.prune(study, _running(study, {20: 3070.0, 25: 3100.0}))  # two low windows: clearly worse
    assert NoiseAwarePruner(0.0, n_startup_trials=1, n_warmup_steps=15, margin=0.1).prune(
        study, _running(study, {20: 3070.0}))  # one window is enough when min_windows allows it


def test_best_needs_only_one_finished_trial() -> None:
    study = _study("maximize", FINISHED[:1])
    assert NoiseAwarePruner(0.0, n_startup_trials=1).prune(study, _running(study, {10: 80.0}))
    assert not NoiseAwarePruner(0.0, n_startup_trials=2).prune(study, _running(study, {10: 80.0}))


def _finished(study: optuna.Study, value: float, outcome: str, memory: float,
              pruner: optuna.pruners.BasePruner | None = None) -> None:
    trial = study.ask()
    trial.report(value, 10)
    if pruner is not None:  # Optuna's successive halving records a trial's rungs when it is asked
        pruner.prune(study, study._storage.get_trial(trial._trial_id))
    trial.set_user_attr("outcome", outcome)
    trial.set_constraint("memory", memory)
    study.tell(trial, value)


INFEASIBLE = [("oom", 500.0), ("diverged", -1.0), ("complete", 500.0)]


@pytest.mark.parametrize("outcome, memory", INFEASIBLE)
def test_an_infeasible_or_unfinished_trial_is_never_the_reference(outcome: str, memory: float) -> None:
    # The baseline ran to its end at 100; a trial measured 300 before it blew the memory budget (oom, told
    # COMPLETE with its partial values), or diverged, or finished over the budget. A feasible trial at 95 is
    # within the margin of the baseline and must not be pruned against the infeasible 300.
    study = optuna.create_study(direction="maximize")
    _finished(study, 100.0, "complete", -1.0)
    _finished(study, 300.0, outcome, memory)
    assert not NoiseAwarePruner(0.0, n_startup_trials=1).prune(study, _running(study, {10: 95.0}))
    assert NoiseAwarePruner(0.0, n_startup_trials=1).prune(study, _running(study, {10: 80.0}))


@pytest.mark.parametrize("outcome, memory", INFEASIBLE)
def test_successive_halving_sees_only_feasible_complete_references(outcome: str, memory: float) -> None:
    from autotune.pruners import FeasibleReferences

    halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=10, reduction_factor=2)
    study = optuna.create_study(direction="maximize")
    _finished(study, 300.0, outcome, memory, halving)
    _finished(study, 100.0, "complete", -1.0, halving)
    # 105 beats the one feasible reference (100); Optuna's own pruner keeps only the top half, the infeasible 300
    assert halving.prune(study, _running(study, {10: 105.0}))
    assert not FeasibleReferences(halving).prune(study, _running(study, {10: 105.0}))


def _study_with_spreads(spreads: list[float | None]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for value, spread in zip((100.0, 110.0, 90.0), spreads, strict=True):
        trial = study.ask()
        trial.report(value, 10)
        trial.set_user_attr("throughput_spread", spread)
        study.tell(trial, value)
    return study


def test_the_margin_widens_to_the_compared_trials_throughput_spread() -> None:
    # the best trial (110) measured ±25%: 85 (23% below) is inside its noise, 80 (27% below) is not
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1)
    noisy = _study_with_spreads([0.02, 0.25, 0.02])
    assert not pruner.prune(noisy, _running(noisy, {10: 85.0}))
    assert pruner.prune(noisy, _running(noisy, {10: 80.0}))
    # the same values with a tight best trial: the 10% margin rules, and 85 is pruned
    tight = _study_with_spreads([0.25, 0.02, None])
    assert pruner.prune(tight, _running(tight, {10: 85.0}))
    # a pruner for a metric the spread does not describe keeps its own margin
    assert NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1, spread_attr=None).prune(
        noisy, _running(noisy, {10: 85.0}))


def test_the_margin_widens_to_the_running_trials_own_spread() -> None:
    study = _study_with_spreads([None, None, None])
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1)
    trial = study.ask()
    trial.report(85.0, 10)
    trial.set_user_attr("throughput_spread", 0.3)
    assert not pruner.prune(study, study._storage.get_trial(trial._trial_id))
    assert pruner.prune(study, _running(study, {10: 85.0}))


# ------------------------------------------------------------------ the margin measured from the study's repeats
def _read(study: optuna.Study, key: str, value: float, *, pruned: bool = False) -> None:
    trial = study.ask()
    trial.set_user_attr("config_key", key)
    trial.set_user_attr("throughput_samples_s", value)
    trial.report(value, 10)
    if pruned:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
        study.tell(trial, value)


def test_reading_noise_pools_the_configurations_read_twice_pruned_readings_included() -> None:
    study = optuna.create_study(direction="maximize")
    for key, values in {"a": [1000.0, 800.0], "b": [500.0], "c": [600.0, 660.0]}.items():
        for i, v in enumerate(values):
            _read(study, key, v, pruned=key == "c" and i == 0)
    noise = reading_noise(study.get_trials(), "throughput_samples_s")
    assert noise is not None and noise.df == 2
    expected = math.sqrt(((math.log(1000 / 800) / 2) ** 2 * 2 + (math.log(660 / 600) / 2) ** 2 * 2) / 2)
    assert noise.sd == pytest.approx(expected)
    assert measured_margin(noise) == pytest.approx(math.sqrt(2) * expected)
    assert measured_margin(None) == PRIOR_MARGIN  # nothing read twice yet
    assert measured_margin(Pooled(0.5, 1)) == PRIOR_MARGIN  # one degree of freedom is not a measurement
    assert measured_margin(Pooled(0.001, 5)) == MARGIN_RANGE[0] and measured_margin(Pooled(0.9, 5)) == MARGIN_RANGE[1]


def test_a_study_whose_repeats_scattered_prunes_only_what_is_clearly_worse() -> None:
    calm, noisy = optuna.create_study(direction="maximize"), optuna.create_study(direction="maximize")
    for study, pairs in ((calm, [(1000.0, 990.0), (700.0, 707.0)]), (noisy, [(1000.0, 800.0), (700.0, 850.0)])):
        for i, (a, b) in enumerate(pairs):
            _read(study, f"k{i}", a)
            _read(study, f"k{i}", b)
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=None, spread_attr=None)
    # best 1000: 12% behind is beyond the calm study's floor margin (5%), within the noisy one's (~28%)
    assert pruner.prune(calm, _running(calm, {10: 880.0}))
    assert not pruner.prune(noisy, _running(noisy, {10: 880.0}))
    assert pruner.prune(noisy, _running(noisy, {10: 600.0}))  # clearly worse still goes
    assert NoiseAwarePruner(0.0, n_startup_trials=1, margin=0.1, spread_attr=None).prune(
        noisy, _running(noisy, {10: 880.0}))  # a margin set in the study file stays as set
