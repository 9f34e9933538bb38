"""The study-file defaults (sampler gp, pruner best, confirmation on) on landscapes whose answer is known.

The trials' results come from a known function of the configuration (``Tuner(run_trial=...)``, the replay
seam); the study, sampler, pruner, baseline, confirmation and choice are the live code. The study file
names no sampler and no pruner. What a user relies on: pruning against the baseline, no infeasible trial as
a reference, the same winner in the CLI summary, `autotune best`, the report and calibrate(), and a
default configuration that can win.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from autotune.calibration import load_calibration
from autotune.cli._results import best_payload
from autotune.cli._run_summary import print_summary
from autotune.objectives import config_key
from autotune.report import headline_data
from autotune.search_space import TrialConfig
from autotune.trial_runner import Outcome
from autotune.tuner import Measured, NoLaunch, Tuner, TuneSummary, recorded_runner, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {
    "batch_size": {"choices": [8, 16, 32, 64, 128]},  # the workload's base batch is 32
    "num_workers": {"low": 0, "high": 2},
    "amp": {"choices": ["off", "bf16"]},
}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def _noise(config: TrialConfig, repeat: int, width: float = 0.03) -> float:
    """A deterministic +-width factor per (configuration, repeat): measurements are never exact."""
    digest = hashlib.sha256(f"{config.model_dump_json()}#{repeat}".encode()).digest()
    return 1.0 + width * (digest[0] / 127.5 - 1.0)


def _run(sd: StudyDir, landscape: Callable[[TrialConfig, int], Measured], n_trials: int) -> TuneSummary:
    spec = load_spec(str(sd.file))
    assert spec.sampler.name == "gp" and spec.pruner.name == "best"  # the defaults, not named in the file
    return Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=n_trials)


def _everywhere(sd: StudyDir, summary: TuneSummary) -> str:
    """The chosen configuration's key, asserted equal in every place a user reads it."""
    assert summary.best is not None and summary.best_config is not None
    key = summary.best.config_key
    payload = best_payload(str(sd.file))
    assert config_key({**payload["config"]}) == key
    assert payload["trial"] == summary.best_trial
    headline = headline_data(sd.load())
    assert headline.best is not None and config_key(dict(headline.best.config)) == key
    assert headline.speedup == summary.speedup
    calibration = load_calibration(str(sd.file))
    assert config_key(calibration.config.model_dump()) == key
    assert calibration.speedup == summary.speedup
    stored = sd.load().user_attrs.get("autotune_confirmation")  # absent when confirmation is off
    assert stored is None or stored["best_config_key"] == key
    return key


def _printed(summary: TuneSummary) -> str:
    console = Console(record=True, width=200)
    print_summary(console, summary)
    return console.export_text()


def test_where_the_defaults_are_fastest_autotune_keeps_them(study_dir: Callable[..., StudyDir]) -> None:
    # Every other configuration is slower than the defaults; a few are within 2% of them (noise decides).
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        speed = 1000.0 * (1 - 0.2 * abs(config.batch_size - 32) / 96) * (1 - 0.01 * config.num_workers)
        if config.amp == "bf16":
            speed *= 0.7
        return Measured(speed * _noise(config, repeat))

    sd = study_dir("defaults-fastest", search_space=SPACE, trial=TRIAL)
    summary = _run(sd, landscape, n_trials=10)
    baseline = summary.baseline
    assert baseline is not None and summary.best is not None and summary.best_config is not None
    true_best = landscape(TrialConfig.model_validate(baseline.config), 0).throughput_samples_s / _noise(
        TrialConfig.model_validate(baseline.config), 0)
    chosen = landscape(summary.best_config, 0).throughput_samples_s / _noise(summary.best_config, 0)
    assert chosen >= 0.97 * true_best
    assert summary.speedup is not None and summary.speedup >= 0.97
    key = _everywhere(sd, summary)
    text = _printed(summary)
    if key == baseline.config_key:
        assert summary.default_is_best
        assert "the default configuration is the best measured" in text
    assert "speedup: 0." not in text


def test_the_baseline_reports_windows_and_search_trials_are_pruned_against_it(
    study_dir: Callable[..., StudyDir],
) -> None:
    # Only the baseline (batch 32, no workers, fp32) is fast; everything else is at most 60% of it.
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        base = config.batch_size == 32 and config.num_workers == 0 and config.amp == "off"
        return Measured((1000.0 if base else 400.0 + config.batch_size) * _noise(config, repeat))

    sd = study_dir("prune-vs-baseline", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    summary = _run(sd, landscape, n_trials=6)
    trials = sd.load().get_trials(deepcopy=False)
    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline" and baseline.state == TrialState.COMPLETE
    assert sorted(baseline.intermediate_values) == [5, 8, 11, 14, 17, 20]  # every window, never pruned
    first_window = TRIAL["warmup_steps"] + TRIAL["report_every"]
    search = [t for t in trials if t.user_attrs["role"] == "search"]
    assert search and all(t.state == TrialState.PRUNED for t in search)
    # stopped at the second measured window: one window after a warm-up is not evidence enough
    assert all(t.last_step == first_window + TRIAL["report_every"] for t in search)
    assert summary.default_is_best and summary.speedup == 1.0
    _everywhere(sd, summary)


def test_a_fast_configuration_over_the_memory_budget_never_sets_the_bar(study_dir: Callable[..., StudyDir]) -> None:
    # Throughput grows with the batch size; batch 64 and 128 grow past the 1000 MB budget after two windows.
    def landscape(config: TrialConfig, repeat: int) -> Measured:
        speed = {8: 300.0, 16: 500.0, 32: 700.0, 64: 1400.0, 128: 2000.0}[config.batch_size]
        speed *= 1 + 0.02 * config.num_workers
        memory = 200.0 + 5 * config.batch_size
        growth = 300.0 if config.batch_size >= 64 else 0.0
        return Measured(speed * _noise(config, repeat, 0.01), peak_memory_mb=memory, memory_growth_mb=growth)

    sd = study_dir("memory-landscape", search_space=SPACE, trial=TRIAL, constraints={"max_memory_mb": 1000})
    summary = _run(sd, landscape, n_trials=14)
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    oom = [t for t in trials if t.user_attrs.get("outcome") == Outcome.OOM.value]
    assert oom, "the sampler should have tried a batch over the budget"
    assert summary.best_config is not None and summary.best_config.batch_size == 32
    feasible_best = max(
        landscape(TrialConfig.model_validate(t.user_attrs["config"]), 0).throughput_samples_s
        for t in trials
        if TrialConfig.model_validate(t.user_attrs["config"]).batch_size <= 32
    )
    chosen = landscape(summary.best_config, 0).throughput_samples_s
    assert chosen >= 0.97 * feasible_best
    for t in trials:
        config = TrialConfig.model_validate(t.user_attrs["config"])
        if t.state == TrialState.PRUNED and config.batch_size <= 32:
            value = landscape(config, 0).throughput_samples_s
            assert value < 0.9 * feasible_best, (t.number, config.short(), value, feasible_best)
    _everywhere(sd, summary)


def test_no_trial_limit_means_until_the_timeout(study_dir: Callable[..., StudyDir]) -> None:
    # budget.n_trials: null is "no limit": the study runs past the old hidden default of 20 until timeout_s,
    # measured on the tuner's clock (each replayed trial advances it by 1 s), with the confirmation inside it.
    clock = [0.0]

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        clock[0] += 1.0
        return Measured(500.0 + config.batch_size + 10 * config.num_workers)

    # (The budget is under test, not the search: random sampling keeps two dozen trials quick.)
    sd = study_dir("no-limit", search_space=SPACE, trial=TRIAL, budget={"n_trials": None, "timeout_s": 30},
                   confirm={"method": "reruns", "top_k": 1, "repeats": 1}, sampler={"name": "random", "seed": 0})
    spec = load_spec(str(sd.file))
    assert spec.budget.n_trials is None
    # unpaired: each landscape reading is a second of this clock, and the anchor's blocks would be readings too
    tuner = Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape, paired=False), clock=lambda: clock[0])
    summary = tuner.run()
    trials = summary.study.get_trials(deepcopy=False)
    assert len([t for t in trials if t.user_attrs.get("role") in ("baseline", "search")]) > 20
    assert clock[0] <= 30  # no run started that would end past the deadline
    assert [t.user_attrs.get("role") for t in trials][-2:] == ["confirm", "confirm"]  # the top one and the baseline
    assert isinstance(optuna.load_study(study_name=sd.name, storage=sd.url).user_attrs["autotune_confirmation"], dict)


@pytest.mark.slow
def test_best_and_status_read_a_finished_study_without_its_workload(study_dir: Callable[..., StudyDir]) -> None:
    # Reading a stored study needs the storage only: `autotune best` and `status` work where the workload
    # cannot be imported (here: its file is gone).
    sd = study_dir("no-workload", search_space=SPACE, trial=TRIAL, confirm={"top_k": 0})
    summary = _run(sd, lambda config, repeat: Measured(500.0 + config.batch_size), n_trials=3)
    (sd.folder / "faulty.py").unlink()
    best = sd.cli("best", "study.yaml", "--format", "json")
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["trial"] == summary.best_trial
    status = sd.cli("status", "study.yaml")
    assert status.returncode == 0, status.stderr
    assert f"best so far: trial #{summary.best_trial}" in status.stdout


@pytest.mark.slow
# real ranks, and the choice must be at least as fast as the baseline: with no other test beside it (the replays
# above measure nothing and run anywhere)
@pytest.mark.xdist_group("timing")
def test_autotune_run_at_the_defaults_with_real_ranks(study_dir: Callable[..., StudyDir]) -> None:
    # The real CLI, real torchrun ranks on a tiny model, no sampler or pruner named: the baseline reports its
    # windows, and the summary, `autotune best` and the report name one winner.
    sd = study_dir("e2e-defaults", search_space={"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0,
                   "high": 1}}, confirm={"top_k": 1, "rounds": 4}, sampler={"seed": 0})
    out = sd.cli("run", "study.yaml", "--n-trials", "5")
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline" and baseline.state == TrialState.COMPLETE
    assert sorted(baseline.intermediate_values) == [w[0] for w in baseline.user_attrs["windows"]]
    assert baseline.intermediate_values  # the first comparison of the `best` pruner
    record = study.user_attrs["autotune_confirmation"]
    best = sd.cli("best", "study.yaml", "--format", "json")
    assert best.returncode == 0, best.stderr
    payload = json.loads(best.stdout)
    assert config_key(payload["config"]) == record["best_config_key"]
    headline = headline_data(study)
    assert headline.best is not None and config_key(dict(headline.best.config)) == record["best_config_key"]
    assert payload["speedup_vs_baseline"] == record["speedup"] == headline.speedup
    assert record["speedup"] is not None and record["speedup"] >= 1.0
    if record["default_is_best"]:
        assert "the default configuration is the best measured" in out.stdout
    else:
        assert f"speedup: {record['speedup']:.2f}x" in out.stdout
    # The replay is the tuner: the same study replayed from its own recorded trials, same seed, makes the
    # same decisions trial by trial (configuration, outcome, the step a pruned trial stopped at).
    records = {t.user_attrs["config_key"]: _record_of(t) for t in trials if t.user_attrs["role"] != "confirm"}
    replayed = study_dir("e2e-defaults-replayed", search_space={"batch_size": {"choices": [16, 32, 64]},
                         "num_workers": {"low": 0, "high": 1}}, confirm={"top_k": 1, "rounds": 4},
                         sampler={"seed": 0})
    lookup = recorded_runner(lambda config: records[config_key(config.model_dump())])
    Tuner(load_spec(str(replayed.file)), launcher=NoLaunch(), run_trial=lookup).run(n_trials=5)
    again = replayed.load().get_trials(deepcopy=False)

    def decisions(ts: list[optuna.trial.FrozenTrial]) -> list[tuple[str, str, int | None]]:
        return [(t.user_attrs["config_key"], t.user_attrs["outcome"], t.last_step) for t in ts
                if t.user_attrs["role"] != "confirm"]

    assert decisions(again) == decisions(trials)


def test_with_trial_samples_loss_is_reported_and_compared_at_equal_samples(
    study_dir: Callable[..., StudyDir],
) -> None:
    # trial.samples: 960. A batch-64 trial reaches 960 samples in 15 steps, a batch-16 one in 60 (capped at
    # max_steps); their values are reported at the samples seen, so the pruner compares equal samples.
    sd = study_dir("equal-samples", search_space={"batch_size": {"choices": [16, 32, 64]}},
                   trial={**TRIAL, "max_steps": 100, "samples": 960}, objectives=[{"metric": "loss"}],
                   confirm={"top_k": 0})
    _run(sd, lambda config, repeat: Measured(1000.0, loss=1.0 + config.batch_size / 100), n_trials=4)
    for t in sd.load().get_trials(deepcopy=False):
        batch = t.user_attrs["config"]["global_batch"]
        assert sorted(t.intermediate_values) == [w[0] * batch for w in t.user_attrs["windows"]]
        if t.user_attrs["outcome"] == "complete":
            assert 960 <= t.user_attrs["samples"] < 960 + batch  # equal samples seen, to within one batch

def _record_of(t: optuna.trial.FrozenTrial) -> dict[str, object]:
    """A finished trial as a landscape record (what recorded_runner replays)."""
    attrs = t.user_attrs
    return {
        "outcome": attrs["outcome"], "reason": attrs["reason"], "wall_s": attrs["wall_s"],
        "throughput_samples_s": attrs["throughput_samples_s"], "training_s": attrs["training_s"],
        "throughput_spread": attrs["throughput_spread"], "settled": attrs["settled"],
        "windows": [{"step": w[0], "elapsed_s": 0.0, "throughput_samples_s": w[1], "peak_memory_mb": w[2],
                     "loss": w[3]} for w in attrs["windows"]],
    }
