"""A trial whose warm-up never settled is a low-confidence number: confirmation re-measures a winner until
one of its measurements settled (or max_repeats is spent), and the summary says so."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rich.console import Console

from autotune.cli._run_summary import noise_lines, print_summary
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, TuneSummary, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {"batch_size": {"choices": [16, 32, 64]}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}
CONFIRM = {"method": "reruns", "top_k": 1, "repeats": 1, "max_repeats": 4}


def _run(sd: StudyDir, landscape: Callable[[TrialConfig, int], Measured]) -> TuneSummary:
    spec = load_spec(str(sd.file))
    return Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=4)


def _confirm_runs(summary: TuneSummary) -> Counter[int]:
    return Counter(t.user_attrs["config"]["batch_size"] for t in summary.study.get_trials(deepcopy=False)
                   if t.user_attrs.get("role") == "confirm")


def _landscape(settles_from: int | None) -> Callable[[TrialConfig, int], Measured]:
    """64 is clearly the fastest; its measurements settle from its ``settles_from``-th on (None: never)."""
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        centre = {16: 600.0, 32: 1000.0, 64: 1500.0}[config.batch_size]
        settled = config.batch_size != 64 or (settles_from is not None and repeat >= settles_from)
        return Measured(centre * (1.01 if repeat % 2 else 0.99), settled=settled)
    return landscape


def test_an_unsettled_winner_is_remeasured_until_a_measurement_settles(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("unsettled-winner", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"},
                   pruner={"name": "none"}, confirm=CONFIRM)
    summary = _run(sd, _landscape(settles_from=3))
    # separated after one re-run, but its search trial, the search's second reading of it (the grid's three points
    # measured, the last trial reads the best again on purpose) and that re-run never settled: one more, which does
    assert _confirm_runs(summary) == Counter({64: 2, 32: 1})
    assert summary.best_config is not None and summary.best_config.batch_size == 64
    assert not any("low confidence" in line for line in noise_lines(summary))


def test_a_winner_that_never_settles_is_rerun_to_max_repeats_and_called_low_confidence(
    study_dir: Callable[..., StudyDir],
) -> None:
    sd = study_dir("never-settles", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"},
                   pruner={"name": "none"}, confirm=CONFIRM)
    summary = _run(sd, _landscape(settles_from=None))
    assert _confirm_runs(summary)[64] == 4  # to max_repeats
    trials = [t for t in summary.study.get_trials(deepcopy=False) if t.user_attrs["config"]["batch_size"] == 64]
    assert trials and all(t.user_attrs["settled"] is False for t in trials)
    assert any("low confidence" in line for line in noise_lines(summary))
    console = Console(record=True, width=200)
    print_summary(console, summary, load_spec(str(sd.file)))
    assert "no: low confidence" in console.export_text()
