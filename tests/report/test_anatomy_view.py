"""The step anatomy view: a bar per configuration, the baseline and the chosen one marked, drawn stacked."""

from __future__ import annotations

import pytest
from rich.console import Console

from autotune.cli._results import best_payload, load_summary
from autotune.cli._run_summary import print_summary
from autotune.report import report_data
from autotune.report._anatomy import PARTS
from autotune.report._anatomy_figure import anatomy_figure

from .conftest import Built


def test_a_bar_per_measured_configuration_with_baseline_and_choice_marked(single: Built) -> None:
    bars = report_data(single.study, single.spec).anatomy
    # complete and pruned trials with a throughput: 0 (baseline), 1 (= 8, 9: the confirmed choice), 2, 3, 5, 7
    assert [b.trials for b in bars] == [(0,), (1, 8, 9), (2,), (3,), (5,), (7,)]
    baseline, chosen = bars[0], bars[1]
    assert baseline.baseline and not baseline.chosen and baseline.label == "#0 (baseline)"
    assert chosen.chosen and chosen.label == "#1 (chosen)"
    assert baseline.anatomy.data_wait_s == pytest.approx(0.030) and baseline.anatomy.sync_exposed_s == 0.0
    assert chosen.anatomy.data_wait_s == pytest.approx(0.002) and chosen.anatomy.sync_exposed_s == 0.004
    figure = anatomy_figure(bars)
    assert figure is not None and figure.layout.barmode == "stack"
    assert [t.name for t in figure.data] == list(PARTS.values())
    assert list(figure.data[0].x) == pytest.approx([1000 * b.anatomy.data_wait_s for b in bars])


def test_best_json_carries_both_anatomies_and_the_diagnosis(single: Built) -> None:
    anatomy = best_payload(str(single.yaml))["step_anatomy"]
    assert anatomy["baseline"]["data_wait_s"] == pytest.approx(0.030)
    assert anatomy["chosen"]["data_wait_s"] == pytest.approx(0.002)
    assert anatomy["baseline_binds"] == "input pipeline" and anatomy["chosen_binds"] == "computation"
    assert anatomy["moved_by"] == ["batch_size", "num_workers", "prefetch_factor", "world_size"]
    assert anatomy["diagnosis"].startswith(
        "step anatomy: the baseline spent 57% of a step waiting for data; the chosen configuration 7%."
    )


def test_the_run_summary_ends_with_the_diagnosis(single: Built) -> None:
    spec, summary = load_summary(str(single.yaml))
    console = Console(record=True, width=400)
    print_summary(console, summary, spec)
    last = console.export_text().strip().splitlines()[-1]
    assert last == (
        "step anatomy: the baseline spent 57% of a step waiting for data; the chosen configuration 7%. The baseline is "
        "bound by its input pipeline (57% of a step), the chosen configuration by its computation (76%); moved by "
        "batch_size 64->128, num_workers 0->1, prefetch_factor None->2, world_size 1->2"
    )


def test_the_live_view_and_the_trial_view_show_where_a_step_went() -> None:
    from autotune.cli._run_view import RunView
    from autotune.cli._trial_view import anatomy_cell
    from autotune.trial_result import StepAnatomy, Window

    anatomy = StepAnatomy.of(0.1, 0.061, 0.03, 0.0, 0.004)
    window = Window(step=8, samples=64, elapsed_s=1.0, window_throughput_samples_s=80.0, throughput_samples_s=80.0,
                    loss=0.5, peak_memory_mb=100.0, time_to_first_step_s=0.5, step_anatomy=anatomy)
    view = RunView(Console(width=200), "demo", 40)
    view.trial_progress(3.0, [window])
    assert view.progress.endswith("  data wait 61%")
    assert anatomy_cell(anatomy) == (
        "100.0 ms a step (slowest rank): 61% data wait, 30% forward/backward, 0% exposed sync, 4% optimizer, 5% other"
    )
