"""The report's data functions over real Optuna studies written as docs/storage.md says (no browser)."""

from __future__ import annotations

import datetime
import statistics
import warnings

import optuna
import pytest
from optuna.trial import TrialState

from autotune.report import (
    feasibility_data,
    headline_data,
    history_data,
    importance_data,
    intermediate_data,
    memory_vs_batch_data,
    parallel_data,
    pareto_data,
    render_html,
    report_data,
    throughput_vs_batch_data,
    timeline_data,
    trials_table_data,
)

from .conftest import Built
from .studies import BUDGET_MB, SINGLE_PLANS

FAILED = {n for n, p in enumerate(SINGLE_PLANS) if p.outcome in ("crashed", "timeout")}
MEASURED = {n for n, p in enumerate(SINGLE_PLANS) if p.throughput is not None}


def test_headline_from_confirmation_is_best_median_over_baseline_median(single: Built) -> None:
    h = headline_data(single.study)
    stored = single.study.user_attrs["autotune_confirmation"]
    assert h.source == "confirmation"
    assert h.best is not None and h.baseline is not None
    assert h.best.trials == (1, 8, 9)
    assert h.best.throughput_samples_s == statistics.median([2600.0, 2500.0, 2700.0])
    assert h.baseline.throughput_samples_s == 1000.0
    assert h.speedup == pytest.approx(h.best.throughput_samples_s / h.baseline.throughput_samples_s)
    assert h.speedup == stored["speedup"]
    assert h.best.peak_memory_mb == statistics.median([600.0, 610.0, 590.0])
    assert h.best.spread == pytest.approx(200.0 / 2600.0)
    assert h.n_trials == len(SINGLE_PLANS)
    assert h.outcomes == {"complete": 5, "pruned": 1, "oom": 1, "diverged": 1, "crashed": 1, "timeout": 1}


def test_headline_without_confirmation_uses_best_feasible_trial_and_baseline(unconfirmed: Built) -> None:
    h = headline_data(unconfirmed.study)
    assert h.source == "trials"
    assert h.best is not None and h.baseline is not None
    # The study's one choice (autotune.objectives.choose): trials 1, 8 and 9 measured the same configuration,
    # median 2600; the oom (2000) and diverged trials do not count.
    assert h.best.trials == (1, 8, 9)
    assert h.best.throughput_samples_s == 2600.0
    assert h.baseline.trials == (0,)
    assert h.speedup == pytest.approx(2600.0 / 1000.0)
    assert h.n_feasible == 5


def test_headline_multi_objective_ignores_an_infeasible_faster_trial(multi: Built) -> None:
    h = headline_data(multi.study)
    assert h.best is not None
    assert h.best.trials == (1,)  # the oom trial measured 3000 samples/s but is infeasible
    assert h.speedup == pytest.approx(2.6)


def test_headline_falls_back_with_a_note_on_a_malformed_confirmation() -> None:
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["throughput_samples_s"])
    trial = study.ask()
    trial.set_user_attr("role", "baseline")
    trial.set_user_attr("throughput_samples_s", 10.0)
    study.tell(trial, 10.0)
    study.set_user_attr("autotune_confirmation", {"groups": "nonsense"})
    h = headline_data(study)
    assert h.source == "trials"
    assert h.note is not None and "malformed" in h.note
    assert h.best is not None and h.best.trials == (0,)
    assert h.speedup == 1.0


def test_headline_of_a_loss_confirmation_reports_throughput_speedup_from_the_trials() -> None:
    study = optuna.create_study(direction="minimize")
    study.set_metric_names(["loss"])
    for role, throughput, loss in (("baseline", 100.0, 2.0), ("search", 300.0, 1.0), ("confirm", 360.0, 1.2)):
        trial = study.ask()
        for key, value in {"role": role, "throughput_samples_s": throughput, "loss": loss}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, loss)
    group = {"config_key": "k", "config": {}, "trials": [1, 2], "values": [1.0, 1.2], "median": 1.1, "spread": 0.2,
             "peak_memory_mb": None, "loss": 1.1}
    baseline = {"config_key": "b", "config": {}, "trials": [0], "values": [2.0], "median": 2.0, "spread": 0.0,
                "peak_memory_mb": None, "loss": 2.0}
    study.set_user_attr("autotune_confirmation", {"best_trial": 1, "best_config_key": "k", "groups": [group],
                                                  "baseline": baseline, "speedup": 0.55, "metric": "loss"})
    h = headline_data(study)
    assert h.source == "confirmation" and h.best is not None and h.baseline is not None
    assert h.best.loss == 1.1 and h.baseline.loss == 2.0
    assert h.best.throughput_samples_s == 330.0 and h.baseline.throughput_samples_s == 100.0
    assert h.speedup == pytest.approx(3.3)  # of throughput, not the stored ratio of the loss


def test_history_has_pruned_and_infeasible_points_and_a_feasible_best_line(single: Built) -> None:
    data = history_data(single.study)
    kinds = {p.number: p.kind for p in data.points}
    assert kinds[2] == "pruned"
    assert kinds[3] == "infeasible" and kinds[7] == "infeasible"
    assert not FAILED & set(kinds)  # failed trials have no value
    pruned = next(p for p in data.points if p.number == 2)
    assert pruned.value == SINGLE_PLANS[2].windows()[-1][1]  # the last reported value
    best = dict(data.best_so_far)
    assert best[0] == 1000.0 and best[3] == 2600.0 and best[9] == 2700.0  # the oom trial's 2000 never counts
    assert data.metric == "throughput_samples_s" and data.direction == "maximize"


def test_pareto_front_is_feasible_and_non_dominated(multi: Built) -> None:
    data = pareto_data(multi.study)
    front = {p.number for p in data.points if p.on_front}
    assert front == {0, 1, 2}
    infeasible = {p.number for p in data.points if not p.feasible}
    assert infeasible == {5}
    assert data.metrics == ["throughput_samples_s", "peak_memory_mb"]


def test_throughput_vs_batch_groups_by_amp_and_world_size_with_partial_trials(single: Built) -> None:
    data = throughput_vs_batch_data(single.study)
    points = {p.number: (s.amp, s.world_size, p) for s in data.series for p in s.points}
    assert set(points) == MEASURED  # pruned, oom, timeout and diverged included; the crash measured nothing
    amp, world, oom = points[3]
    assert (amp, world, oom.batch_size, oom.value, oom.outcome, oom.feasible) == ("bf16", 2, 256, 2000.0, "oom",
                                                                                  False)
    assert [s.label for s in data.series] == sorted(s.label for s in data.series)
    assert data.budget is None


def test_memory_vs_batch_carries_the_budget(single: Built) -> None:
    data = memory_vs_batch_data(single.study, single.spec)
    assert data.budget == BUDGET_MB
    over = [p.number for s in data.series for p in s.points if p.value > BUDGET_MB]
    assert over == [3]
    # Without the spec the budget comes from the study file stored in the study.
    assert memory_vs_batch_data(single.study).budget == BUDGET_MB


def test_importance_over_searched_knobs(single: Built) -> None:
    data = importance_data(single.study)
    assert data.note is None
    (metric, values), = data.importances
    assert metric == "throughput_samples_s"
    assert set(values) <= {"batch_size", "num_workers", "amp", "world_size"}
    assert sum(values.values()) == pytest.approx(1.0)


def test_importance_per_objective_prints_no_warning(multi: Built) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # optuna's caveats go into the note, not onto the terminal
        data = importance_data(multi.study)
    assert [metric for metric, _ in data.importances] == ["throughput_samples_s", "peak_memory_mb"]
    for _, values in data.importances:
        assert sum(values.values()) == pytest.approx(1.0)


def test_importance_guards_explain_themselves() -> None:
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    note = importance_data(study).note
    assert note is not None and "at least 2 complete trials" in note
    fixed = optuna.create_study()
    fixed.optimize(lambda t: 1.0, n_trials=3)
    note = importance_data(fixed).note
    assert note is not None and "searched parameter" in note


def test_parallel_coordinates_axes_and_positions(single: Built) -> None:
    data = parallel_data(single.study)
    assert [a.name for a in data.axes] == ["batch_size", "num_workers", "amp", "world_size", "throughput_samples_s"]
    amp = data.axes[2]
    assert amp.categories == ("off", "bf16")  # the search space's order
    batch = data.axes[0]
    assert batch.log and 10**batch.low == pytest.approx(16) and 10**batch.high == pytest.approx(256)
    assert {line.number for line in data.lines} == MEASURED
    for line in data.lines:
        assert all(p is None or 0.0 <= p <= 1.0 for p in line.positions)
    top = max(data.lines, key=lambda line: line.color or 0.0)
    assert top.number == 9 and top.positions[-1] == 1.0


def test_intermediate_values_show_where_pruning_stopped(single: Built, multi: Built) -> None:
    data = intermediate_data(single.study)
    assert data.source == "intermediate values"
    curves = {c.number: c for c in data.curves}
    assert curves[2].outcome == "pruned" and curves[2].points[-1][0] == 20
    assert curves[1].points[-1][0] == 40
    assert 4 not in curves  # the crash reported nothing
    # Multi-objective studies report no intermediate values; their windows are shown instead.
    windows = intermediate_data(multi.study)
    assert windows.source == "windows"
    assert {c.number for c in windows.curves} == {0, 1, 2, 3, 4, 5}


def test_timeline_includes_pruned_and_failed_trials_with_their_reasons(single: Built) -> None:
    bars = {b.number: b for b in timeline_data(single.study)}
    assert set(bars) == set(range(len(SINGLE_PLANS)))
    for number, plan in enumerate(SINGLE_PLANS):
        assert (bars[number].outcome, bars[number].reason) == (plan.outcome, plan.reason)
        assert bars[number].end >= bars[number].start and not bars[number].running
    assert bars[4].reason == "rank 1 killed by SIGSEGV"


def test_timeline_running_trial_ends_now() -> None:
    study = optuna.create_study()
    study.ask()
    now = datetime.datetime.now() + datetime.timedelta(seconds=5)
    (bar,) = timeline_data(study, now)
    assert bar.running and bar.end == now and bar.outcome == "running"


def test_feasibility_marks_oom_and_diverged_infeasible(single: Built) -> None:
    data = feasibility_data(single.study, single.spec)
    assert data.names == ["memory", "diverged"]
    rows = {r.number: r for r in data.rows}
    assert set(rows) == {n for n, p in enumerate(SINGLE_PLANS) if p.outcome in ("complete", "oom", "diverged")}
    assert not rows[3].feasible and rows[3].constraints["memory"] == 1500.0 - BUDGET_MB
    assert not rows[7].feasible and rows[7].constraints["diverged"] == 1.0
    assert all(rows[n].feasible for n in (0, 1, 5, 8, 9))
    assert data.budget == BUDGET_MB


def test_table_lists_every_trial_with_outcome_reason_and_knobs(single: Built) -> None:
    table = trials_table_data(single.study)
    keys = [c.key for c in table.columns]
    for key in ("number", "role", "outcome", "reason", "batch_size", "amp", "world_size", "num_workers",
                "throughput_samples_s", "peak_memory_mb", "loss", "time_to_first_step_s"):
        assert key in keys
    rows = [dict(zip(keys, row, strict=True)) for row in table.rows]
    assert [r["number"] for r in rows] == list(range(len(SINGLE_PLANS)))
    for row, plan in zip(rows, SINGLE_PLANS, strict=True):
        assert (row["role"], row["outcome"], row["reason"]) == (plan.role, plan.outcome, plan.reason)
        assert (row["batch_size"], row["amp"], row["throughput_samples_s"]) == (plan.batch_size, plan.amp,
                                                                               plan.throughput)
    assert rows[3]["feasible"] == "no" and rows[4]["feasible"] is None and rows[1]["feasible"] == "yes"


def test_a_study_without_autotune_attributes_still_reports() -> None:
    """Trials the tuner never annotated (killed before it told them, or a plain Optuna study) do not break it."""
    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_int("batch_size", 1, 8), n_trials=3)
    failed = study.ask()
    study.tell(failed, state=TrialState.FAIL)
    study.ask()  # still running
    data = report_data(study)
    assert [r[2] for r in data.table.rows] == ["complete"] * 3 + ["crashed", "running"]
    assert data.headline.baseline is None and data.headline.speedup is None
    html = render_html(data)
    assert html.count("plotly-graph-div") >= 3
