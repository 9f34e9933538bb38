"""Objective values, intermediate values and constraints of a trial result (docs/storage.md)."""

from __future__ import annotations

import json
import math

import pytest

from autotune.objectives import (
    constraint_values,
    metric_value,
    objective_values,
    window_history,
    window_value,
)
from autotune.spec import METRIC_KEYS, ObjectiveSpec
from autotune.trial_runner import Outcome, TrialResult, Window

THROUGHPUT = ObjectiveSpec(metric="throughput")
MEMORY = ObjectiveSpec(metric="peak_memory_mb")
LOSS = ObjectiveSpec(metric="loss")
ALL = [THROUGHPUT, MEMORY, LOSS]


def window(step: int, *, throughput: float, window_throughput: float, memory: float, loss: float) -> Window:
    return Window(
        step=step,
        samples=step * 64,
        elapsed_s=step * 0.1,
        window_throughput_samples_s=window_throughput,
        throughput_samples_s=throughput,
        loss=loss,
        peak_memory_mb=memory,
        time_to_first_step_s=0.5,
    )


def result(outcome: Outcome = Outcome.COMPLETE, **metrics: float | None) -> TrialResult:
    return TrialResult(outcome=outcome, **metrics)  # type: ignore[arg-type]


MEASURED = result(throughput_samples_s=1234.5, peak_memory_mb=812.0, loss=2.25, eval_loss=2.5)


@pytest.mark.parametrize(
    ("objective", "expected"), [(THROUGHPUT, 1234.5), (MEMORY, 812.0), (LOSS, 2.25)], ids=lambda x: str(x)
)
def test_metric_value_reads_the_objectives_metric(objective: ObjectiveSpec, expected: float) -> None:
    assert metric_value(MEASURED, objective) == expected


def test_every_metric_of_the_spec_has_a_value() -> None:
    # A metric added to the study file without a value here would fail with KeyError.
    # time_to_loss is read off the loss curve of the windows: tests/objectives/test_time_to_loss.py; goodput
    # needs the trial's batches and noise scale: tests/objectives/test_goodput.py.
    for metric in set(METRIC_KEYS) - {"time_to_loss", "goodput"}:
        assert metric_value(MEASURED, ObjectiveSpec(metric=metric)) is not None


def test_metric_value_survives_the_stored_json() -> None:
    stored = TrialResult.from_json(json.loads(json.dumps(MEASURED.to_json())))
    assert [metric_value(stored, o) for o in ALL] == [1234.5, 812.0, 2.25]


@pytest.mark.parametrize("objective", ALL, ids=lambda o: o.metric)
def test_metric_value_is_none_when_not_measured(objective: ObjectiveSpec) -> None:
    assert metric_value(result(Outcome.CRASHED), objective) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_metric_counts_as_not_measured(bad: float) -> None:
    assert metric_value(result(loss=bad), LOSS) is None


def test_objective_values_in_objective_order() -> None:
    assert objective_values(MEASURED, [LOSS, THROUGHPUT]) == [2.25, 1234.5]
    assert objective_values(MEASURED, ALL) == [1234.5, 812.0, 2.25]


def test_objective_values_is_none_when_any_is_missing() -> None:
    partial = result(throughput_samples_s=100.0, peak_memory_mb=None, loss=1.0)
    assert objective_values(partial, [THROUGHPUT, LOSS]) == [100.0, 1.0]
    assert objective_values(partial, [THROUGHPUT, MEMORY]) is None


W = window(20, throughput=900.0, window_throughput=1100.0, memory=640.0, loss=1.75)


def test_window_value_throughput_is_the_cumulative_one_not_the_windows() -> None:
    assert window_value(W, THROUGHPUT) == 900.0


def test_window_value_memory_and_loss() -> None:
    assert window_value(W, MEMORY) == 640.0
    assert window_value(W, LOSS) == 1.75


def test_window_history_pairs_steps_with_values_in_objective_order() -> None:
    later = window(30, throughput=950.0, window_throughput=1000.0, memory=650.0, loss=1.5)
    assert window_history([W, later], [LOSS, THROUGHPUT]) == [(20, [1.75, 900.0]), (30, [1.5, 950.0])]
    assert window_history([], ALL) == []


# ------------------------------------------------------------------------------------------ constraints
def test_memory_is_peak_minus_budget() -> None:
    over = result(peak_memory_mb=1200.0)
    under = result(peak_memory_mb=700.0)
    assert constraint_values(over, 1000.0)["memory"] == 200.0
    assert constraint_values(under, 1000.0)["memory"] == -300.0


def test_an_oom_over_the_budget_keeps_its_excess() -> None:
    assert constraint_values(result(Outcome.OOM, peak_memory_mb=1500.0), 1000.0)["memory"] == 500.0


def test_an_oom_with_no_peak_known_violates_the_budget() -> None:
    assert constraint_values(result(Outcome.OOM), 1000.0)["memory"] == 1.0


def test_an_oom_below_the_budget_is_still_infeasible() -> None:
    # storage.md: oom trials are told with a violated constraint; the device ran out below the budget.
    assert constraint_values(result(Outcome.OOM, peak_memory_mb=600.0), 1000.0)["memory"] > 0


def test_without_a_budget_only_an_oom_violates_memory() -> None:
    assert constraint_values(result(Outcome.OOM, peak_memory_mb=5000.0), None)["memory"] == 1.0
    assert constraint_values(result(Outcome.OOM), None)["memory"] == 1.0
    assert constraint_values(result(peak_memory_mb=5000.0), None)["memory"] == -1.0
    assert constraint_values(result(Outcome.DIVERGED), None)["memory"] == -1.0


def test_a_budget_with_no_peak_known_and_no_oom_is_feasible() -> None:
    assert constraint_values(result(Outcome.DIVERGED), 1000.0)["memory"] == -1.0


@pytest.mark.parametrize("outcome", list(Outcome), ids=str)
def test_diverged_constraint_is_set_only_for_diverged_trials(outcome: Outcome) -> None:
    values = constraint_values(result(outcome, peak_memory_mb=10.0), 1000.0)
    assert set(values) == {"memory", "diverged"}
    assert values["diverged"] == (1.0 if outcome is Outcome.DIVERGED else 0.0)


def test_a_complete_trial_within_budget_is_feasible() -> None:
    values = constraint_values(MEASURED, 1000.0)
    assert all(v <= 0 for v in values.values())
