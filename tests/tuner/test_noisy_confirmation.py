"""The confirmation stage through the real Tuner (a replayed landscape): it repeats the leading
configurations until the winner's interval separates from the runner-up's, ``confirm.max_repeats`` is
spent or the runs left could not separate them, and re-measures a first trial that read far below its re-run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import optuna

from autotune.cli._run_summary import noise_lines
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Tuner, TuneSummary, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {"batch_size": {"choices": [16, 32, 64]}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def _run(sd: StudyDir, landscape: Callable[[TrialConfig, int], Measured], n_trials: int = 4,
         again: int | None = None) -> TuneSummary:
    """The study; with ``again``, that batch size queued once more right after the baseline: the search proposes
    no configuration twice, and a second reading of one is queued on purpose."""
    spec = load_spec(str(sd.file))
    tuner = Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape))
    if again is not None:
        study = tuner.open()
        tuner.ensure_baseline(study)
        study.enqueue_trial({"batch_size": again})
    return tuner.run(n_trials=n_trials)


def _confirm_runs(study: optuna.Study) -> Counter[int]:
    return Counter(t.user_attrs["config"]["batch_size"] for t in study.get_trials(deepcopy=False)
                   if t.user_attrs.get("role") == "confirm")


def test_leaders_that_max_repeats_could_not_separate_are_called_a_tie_without_more_runs(
    study_dir: Callable[..., StudyDir],
) -> None:
    # 32 (the baseline) and 64 alternate +-15% around 1000 and 1030: 3% apart, runs scattering ~20%: two more
    # runs each could not part them, so the confirmation stops after its first round.
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        centre = {16: 600.0, 32: 1000.0, 64: 1030.0}[config.batch_size]
        return Measured(centre * (1.15 if repeat % 2 else 0.85))

    sd = study_dir("noisy-tie", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"},
                   pruner={"name": "none"}, confirm={"method": "reruns", "top_k": 2, "repeats": 1, "max_repeats": 3})
    summary = _run(sd, landscape, again=32)  # the baseline's configuration read twice in the search
    runs = _confirm_runs(summary.study)
    assert runs[32] == 1 and runs[64] == 1  # `repeats` only: the re-runs left could not separate them
    assert runs[16] == 0  # not among the top_k
    record = summary.study.user_attrs["autotune_confirmation"]
    assert record["separated"] is False and record["separable"] is False
    assert record["statement"].startswith("tied within noise with #")
    assert any(line.endswith("more re-runs, up to confirm.max_repeats, could not have separated them")
               for line in noise_lines(summary))


def test_overlapping_leaders_that_could_still_separate_are_rerun_until_they_do(
    study_dir: Callable[..., StudyDir],
) -> None:
    # 64 is 40% ahead of 32 (the baseline), their runs scatter -12%, 0, +12% in turn: after one confirmation
    # run each the intervals overlap, but the re-runs left could part them, and do.
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        centre = {16: 600.0, 32: 1000.0, 64: 1400.0}[config.batch_size]
        return Measured(centre * (0.88, 1.0, 1.12)[repeat % 3])

    sd = study_dir("noisy-parting", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"},
                   pruner={"name": "none"}, confirm={"method": "reruns", "top_k": 1, "repeats": 1, "max_repeats": 6})
    summary = _run(sd, landscape)
    runs = _confirm_runs(summary.study)
    assert runs[64] > 1 and runs[32] > 1 and runs[64] < 6  # re-run past `repeats`, stopped once apart
    record = summary.study.user_attrs["autotune_confirmation"]
    assert record["separated"] is True and record["separable"] is True
    assert record["statement"].startswith("best by ")
    assert not any("could not have separated" in line for line in noise_lines(summary))


def test_separated_leaders_stop_at_repeats_and_say_best_by(study_dir: Callable[..., StudyDir]) -> None:
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        centre = {16: 600.0, 32: 1000.0, 64: 1500.0}[config.batch_size]
        return Measured(centre * (1.01 if repeat % 2 else 0.99))

    sd = study_dir("noisy-apart", search_space=SPACE, trial=TRIAL, sampler={"name": "grid"},
                   pruner={"name": "none"}, confirm={"method": "reruns", "top_k": 1, "repeats": 2, "max_repeats": 6})
    summary = _run(sd, landscape, again=32)
    assert _confirm_runs(summary.study) == Counter({64: 2, 32: 2})  # separated after `repeats`: no more
    record = summary.study.user_attrs["autotune_confirmation"]
    assert record["separated"] is True and record["statement"].startswith("best by 49% (± ")  # 1485 / 1000
    assert record["statement"].endswith("over #0")  # the runner-up: the baseline
    assert record["speedup_half_width"] is not None and record["speedup_half_width"] < 0.2


def test_a_first_trial_far_below_its_rerun_is_remeasured_not_averaged_in(study_dir: Callable[..., StudyDir]) -> None:
    # The baseline (32) reads 922 as the study's first trial and 1,605 after; 64 reads 2,809.
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        if config.batch_size == 32:
            return Measured(922.0 if repeat == 0 else 1605.0)
        return Measured({16: 600.0, 64: 2809.0}[config.batch_size])

    # (The baseline's batch, 32, is not searched: its only measurements are the baseline and confirmations.)
    sd = study_dir("cold-baseline", search_space={"batch_size": {"choices": [16, 64]}}, trial=TRIAL,
                   sampler={"name": "grid"}, pruner={"name": "none"},
                   confirm={"method": "reruns", "top_k": 1, "repeats": 1})
    summary = _run(sd, landscape, n_trials=3)
    record = summary.study.user_attrs["autotune_confirmation"]
    assert record["left_out"] == [0]
    assert _confirm_runs(summary.study)[32] == 2  # re-measured once more after the first was left out
    assert record["baseline"]["values"] == [1605.0, 1605.0]
    assert f"{summary.speedup:.2f}" == "1.75"  # not the 2.23x of the cold first trial averaged in


def test_when_the_default_wins_after_its_cold_first_trial_is_left_out_its_rerun_is_the_chosen_trial(
    study_dir: Callable[..., StudyDir],
) -> None:
    # The baseline (32) reads 922 cold and 1,605 re-run; 64 reads 1,550: the default is best, measured by its re-runs
    # only, so the chosen trial is a re-run of it, not the left-out first trial (3 workers on one SQLite file
    # starting at once load the machine during that first trial: tests/reliability/test_storage_load.py).
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        if config.batch_size == 32:
            return Measured(922.0 if repeat == 0 else 1605.0)
        return Measured({16: 600.0, 64: 1550.0}[config.batch_size])

    sd = study_dir("cold-default", search_space={"batch_size": {"choices": [16, 64]}}, trial=TRIAL,
                   sampler={"name": "grid"}, pruner={"name": "none"},
                   confirm={"method": "reruns", "top_k": 1, "repeats": 1, "max_repeats": 1})
    summary = _run(sd, landscape, n_trials=3)
    record = summary.study.user_attrs["autotune_confirmation"]
    assert record["left_out"] == [0] and record["default_is_best"] is True
    chosen = summary.study.trials[record["best_trial"]]
    assert chosen.user_attrs["role"] == "confirm" and chosen.user_attrs["config"]["batch_size"] == 32
    assert summary.best_trial == record["best_trial"] and summary.speedup == 1.0


def test_max_repeats_below_repeats_is_a_one_line_error(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("bad-max", search_space=SPACE, trial=TRIAL, confirm={"method": "reruns", "top_k": 1, "repeats": 3,
                                                                  "max_repeats": 2})
    out = sd.cli("validate", "study.yaml", "--no-build")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: study.yaml: confirm: max_repeats (2) is below repeats (3); raise it or leave it out")
