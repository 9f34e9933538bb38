"""`autotune status`'s ± for a trial: its windows' interval, at least the study's interval of one run once the
study has re-measured configurations (a run's windows share its luck: benchmarks/trial_scatter.py)."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console

from autotune.cli._results import print_status
from autotune.objectives import measured_groups, pooled_sd, reading_noise
from autotune.search_space import TrialConfig
from autotune.trial_result import t975
from autotune.tuner import Measured, NoLaunch, Tuner, TuneSummary, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def _landscape(config: TrialConfig, repeat: int) -> Measured:
    """Every window of a run alike; re-runs of a configuration 2% apart."""
    centre = {16: 600.0, 32: 1000.0, 64: 1500.0}[config.batch_size]
    return Measured(centre * (1.01 if repeat % 2 else 0.99))


def _run(sd: StudyDir, landscape: Callable[[TrialConfig, int], Measured]) -> TuneSummary:
    """Three search trials: the baseline (batch 32), 32 again (queued on purpose: the search proposes no
    configuration twice), and one more of the grid."""
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(landscape))
    study = tuner.open()
    tuner.ensure_baseline(study)
    study.enqueue_trial({"batch_size": 32})
    return tuner.run(n_trials=3)


def test_status_gives_each_trial_at_least_the_studys_interval_of_one_run(study_dir: Callable[..., StudyDir]) -> None:
    """A trial's windows agree with each other (its throughput_spread is ~0 in this landscape) while re-runs of
    its configuration differ by 2%: once the study has re-measured configurations, `autotune status` shows a
    trial's ± as at least the study's interval of one run, not its windows' alone."""
    sd = study_dir("status-width", search_space={"batch_size": {"choices": [16, 32, 64]}}, trial=TRIAL,
                   sampler={"name": "grid"}, pruner={"name": "none"},
                   confirm={"top_k": 2, "repeats": 2, "max_repeats": 2})
    summary = _run(sd, _landscape)
    pooled = reading_noise(summary.study.trials, "throughput_samples_s")
    assert pooled is not None
    width = t975(pooled.df) * pooled.sd  # the interval of one run
    assert width > 0.01
    spreads = [t.user_attrs.get("throughput_spread") for t in summary.study.trials]
    assert all(s is not None and s < width for s in spreads)  # each run's windows alone say less
    out = io.StringIO()
    print_status(Console(file=out, width=200, color_system=None), str(sd.file))
    rows = [line.split() for line in out.getvalue().splitlines() if line.strip()[:1].isdigit()]
    shown = [row[4] for row in rows if len(row) > 4 and row[4].endswith("%")]
    assert shown and all(cell == f"{width:.0%}" for cell in shown)


def test_a_races_paced_blocks_do_not_widen_the_status_interval(study_dir: Callable[..., StudyDir]) -> None:
    """A race's entrants read in paced blocks, another measurement than a whole trial (here the blocks read at
    55% of the whole trials, as on a machine that got busy during the race). Pooled with the whole trials they
    would make every trial's ± far wider; `autotune status` pools whole readings only, as the pruner does (the
    baseline and the grid's batch 32 are one configuration read twice, 2% apart)."""
    calls = [0]

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        calls[0] += 1
        whole = calls[0] <= 3  # the three search trials; every later reading is a race block
        return Measured(_landscape(config, repeat).throughput_samples_s * (1.0 if whole else 0.55))

    sd = study_dir("status-race", search_space={"batch_size": {"choices": [16, 32, 64]}}, trial=TRIAL,
                   sampler={"name": "grid"}, pruner={"name": "none"}, confirm={"top_k": 2, "rounds": 6})
    summary = _run(sd, landscape)
    raced = [t for t in summary.study.trials if t.user_attrs.get("race")]
    assert raced, "the study raced"
    mixed = pooled_sd(g.values for g in measured_groups(summary.study, "throughput_samples_s"))
    whole = reading_noise(summary.study.trials, "throughput_samples_s")
    assert mixed is not None and whole is not None
    width = t975(whole.df) * whole.sd
    assert t975(mixed.df) * mixed.sd > 2 * width  # what pooling the blocks in would show
    out = io.StringIO()
    print_status(Console(file=out, width=200, color_system=None), str(sd.file))
    rows = [line.split() for line in out.getvalue().splitlines() if line.strip()[:1].isdigit()]
    shown = [row[4] for row in rows if len(row) > 4 and row[4].endswith("%")]
    assert len(shown) == len(summary.study.trials) and all(cell == f"{width:.0%}" for cell in shown), out.getvalue()
