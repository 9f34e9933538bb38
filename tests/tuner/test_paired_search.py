"""The paired search (issue 52): the baseline kept alive as an anchor and measured between trials, so that a
trial is pruned, fitted and entered in the race by its ratio to readings taken at the same time, not by raw
readings taken in another phase of a drifting machine."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.objectives import Paired
from autotune.pruners import NoiseAwarePruner
from autotune.samplers import PartialGPSampler
from autotune.samplers._gp_view import OnAnchor, WithPartial
from autotune.tuner._entrants import paired_candidates
from autotune.tuner._results import measured_groups
from autotune.workload_check import load_spec

from .conftest import assert_nothing_left, make_study

optuna.logging.set_verbosity(optuna.logging.WARNING)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def machine(t: float) -> float:
    """A stand-in clock's machine: ±12% over a 40 s period."""
    return 1 + 0.12 * math.sin(2 * math.pi * t / 40)


BASELINE, LEADER = 500.0, 1000.0  # true speeds (samples/s)


def _finished(study: optuna.Study, true_speed: float, at: float, *, key: str, paired: bool,
              state: optuna.trial.TrialState = optuna.trial.TrialState.COMPLETE) -> None:
    """A trial of ``true_speed`` that ran at second ``at``: its windows read the machine then, and (paired) the
    anchor's blocks around it read the baseline then too."""
    trial = study.ask()
    reading = true_speed * machine(at)
    for step in (6, 9, 12):
        trial.report(reading, step)
    attrs: dict[str, Any] = {"config_key": key, "config": {"key": key}, "outcome": state.name.lower(),
                             "throughput_samples_s": reading, "role": "search"}
    if paired:
        anchor = BASELINE * machine(at)
        attrs.update({Paired.BEFORE: anchor, Paired.SPEED: anchor, Paired.RATIO: reading / anchor})
    for name, value in attrs.items():
        trial.set_user_attr(name, value)
    if state == optuna.trial.TrialState.COMPLETE:
        study.tell(trial, reading)
    else:
        study.tell(trial, state=state)


def _judged(study: optuna.Study, true_speed: float, at: float, *, paired: bool) -> optuna.trial.FrozenTrial:
    """A running trial of ``true_speed`` at its first window, at second ``at``; paired: with the anchor's block
    taken just before it."""
    trial = study.ask()
    if paired:
        trial.set_user_attr(Paired.BEFORE, BASELINE * machine(at - 1))
        trial.set_user_attr(Paired.NOISE, 0.02)
    trial.report(true_speed * machine(at), 6)
    return study._storage.get_trial(trial._trial_id)


@pytest.mark.parametrize("paired", [True, False])
def test_a_configuration_near_the_leader_read_in_a_slow_phase_is_pruned_only_on_unpaired_readings(
    paired: bool,
) -> None:
    # The leader ran at second 10, the machine 12% fast; a configuration 2% slower is judged at second 30, 12% slow:
    # its reading is 23% below the leader's. Against the anchor read beside each, it is 2% below.
    study = optuna.create_study(direction="maximize")
    _finished(study, LEADER, 10, key="leader", paired=paired)
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=None)
    near = _judged(study, 0.98 * LEADER, 30, paired=paired)
    assert pruner.prune(study, near) is not paired  # unpaired, the drift prunes it: the failure
    # a configuration clearly worse is pruned on the paired evidence too, in any phase
    assert pruner.prune(study, _judged(study, 0.7 * LEADER, 30, paired=paired))
    assert pruner.prune(study, _judged(study, 0.7 * LEADER, 10, paired=paired))


def test_a_paired_trial_is_not_compared_with_an_unpaired_reference_and_the_anchor_noise_widens_the_margin() -> None:
    study = optuna.create_study(direction="maximize")
    _finished(study, LEADER, 10, key="unpaired", paired=False)  # read in the fast phase, without the anchor
    pruner = NoiseAwarePruner(0.0, n_startup_trials=1, margin=None)
    assert not pruner.prune(study, _judged(study, 0.5 * LEADER, 30, paired=True))  # nothing paired to compare with
    _finished(study, LEADER, 12, key="leader", paired=True)
    assert pruner.prune(study, _judged(study, 0.8 * LEADER, 30, paired=True))  # 20% below: clearly worse
    noisy = _judged(study, 0.8 * LEADER, 30, paired=True)
    study._storage.set_trial_user_attr(noisy._trial_id, Paired.NOISE, 0.1)  # one anchor block ±10%: 2·√1.5·10%
    assert not pruner.prune(study, study._storage.get_trial(noisy._trial_id))


def test_the_gp_fits_each_trials_ratio_to_its_anchor_while_the_user_reads_samples_per_second() -> None:
    study = optuna.create_study(direction="maximize")
    _finished(study, LEADER, 10, key="fast-phase", paired=True)
    _finished(study, 1.1 * LEADER, 30, key="slow-phase", paired=True)  # the better one, read slower
    _finished(study, 0.9 * LEADER, 30, key="pruned", paired=True, state=optuna.trial.TrialState.PRUNED)
    raw = [t.values[0] for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    assert raw[1] < raw[0]  # the objective values stay the readings (samples/s)
    fitted = WithPartial(study).fitted()
    assert [round(t.values[0], 6) for t in fitted] == [2.0, 2.2, 1.8]  # the ratios, the pruned trial's too
    assert [t.values[0] for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))] == raw


def test_past_the_hand_over_tpe_fits_the_same_ratios_a_pruned_trials_windows_included() -> None:
    study = optuna.create_study(direction="maximize")
    _finished(study, LEADER, 10, key="fast-phase", paired=True)
    _finished(study, 1.1 * LEADER, 30, key="slow-phase", paired=True)
    _finished(study, 0.9 * LEADER, 30, key="pruned", paired=True, state=optuna.trial.TrialState.PRUNED)
    seen = OnAnchor(study)._get_trials(deepcopy=False)
    assert [round(t.values[0], 6) for t in seen[:2]] == [2.0, 2.2]
    assert {round(v, 6) for v in seen[2].intermediate_values.values()} == {1.8}  # the windows TPE ranks it by
    assert study.trials[2].intermediate_values[6] == pytest.approx(0.9 * LEADER * machine(30))  # stored: samples/s
    # and the default sampler hands TPE that view once it has handed over
    read: list[list[float]] = []

    class Recording(optuna.samplers.TPESampler):
        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
            read.append([t.values[0] for t in study._get_trials(deepcopy=False, states=(
                optuna.trial.TrialState.COMPLETE,))])
            return {}

    sampler = PartialGPSampler(seed=0, max_trials=2)
    sampler._tpe = Recording(seed=0)
    sampler.sample_relative(study, study._storage.get_trial(study.ask()._trial_id), {})
    assert [round(v, 6) for v in read[0]] == [2.0, 2.2]


def test_the_race_enters_the_configurations_with_the_best_ratios_to_the_anchor(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "entrants", "entrants", search_space={"batch_size": {"choices": [16, 32, 64]}})
    spec = load_spec(str(sd.file))
    study = optuna.create_study(direction="maximize")
    # the best (batch 64) was read in the slow phase, below batch 32's fast-phase reading; batch 16 is the baseline
    for batch, speed, at, role in ((16, BASELINE, 5, "baseline"), (32, 0.95 * LEADER, 10, "search"),
                                   (64, LEADER, 30, "search")):
        trial = study.ask()
        reading = speed * machine(at)
        trial.report(reading, 6)
        anchor = BASELINE * machine(at)
        key = f"batch-{batch}"
        for name, value in {"config_key": key, "config": {"batch_size": batch}, "outcome": "complete",
                            "role": role, "throughput_samples_s": reading, Paired.SPEED: anchor,
                            Paired.RATIO: reading / anchor}.items():
            trial.set_user_attr(name, value)
        study.tell(trial, reading)
    groups = measured_groups(study, spec)
    assert max(groups, key=lambda g: g.median).config_key == "batch-32"  # by raw readings, the wrong one leads
    entrants = paired_candidates(study, spec, groups, 1)
    assert entrants is not None and [g.config_key for g in entrants] == ["batch-64"]


def _drift_benchmark(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("drift_decisions", None)
    return importlib.import_module("drift_decisions")


@pytest.mark.slow
def test_the_replayed_drift_prunes_the_true_best_unpaired_and_the_paired_search_chooses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/drift_decisions.py at the study file's defaults, one 40 s wave of ±12%, pruning window by window:
    # in seed 4 (and 0, while a trial was judged on its first window) the unpaired search pruned the true best
    # against a configuration read in a fast phase and chose one 4% slower (the failure); paired, the true
    # best runs to its end, races, and is chosen. One seed here: the suite's time.
    bench = _drift_benchmark(monkeypatch)
    for seed in (4,):
        before = bench.one(seed, "wave", tmp_path / f"unpaired-{seed}", None, paired=False)
        assert before["best_sampled"] == ["pruned"] and before["of_best"] < 0.97
        after = bench.one(seed, "wave", tmp_path / f"paired-{seed}", None, paired=True)
        assert "complete" in after["best_sampled"] and after["best_raced"] and after["of_best"] >= 0.97


@pytest.mark.slow
def test_a_live_study_keeps_the_baseline_alive_as_its_anchor_and_pairs_every_search_trial(tmp_path: Path) -> None:
    sd = make_study(tmp_path / "anchor", "anchor", search_space={"batch_size": {"choices": [16, 32, 64]}},
                    sampler={"name": "grid"}, confirm={"top_k": 1, "rounds": 4, "block_s": 0.2})
    out = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "paired search: the baseline kept alive as the anchor" in out.stdout
    study = sd.load()
    anchor = study.user_attrs[Paired.STUDY_ATTR]
    assert anchor["failed"] is None and len(anchor["blocks"]) == 3 and all(b > 0 for b in anchor["blocks"])
    baseline = next(t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "baseline")
    assert baseline.user_attrs[Paired.RATIO] == 1.0
    search = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("role") == "search"]
    assert len(search) == 2
    for t in search:  # each launched after an anchor block, and told with the block after it
        a = t.user_attrs
        assert a[Paired.BEFORE] in anchor["blocks"] and a[Paired.SPEED] > 0
        assert a[Paired.RATIO] == pytest.approx(a["throughput_samples_s"] / a[Paired.SPEED])
    assert (sd.runs / "anchor" / "config.json").exists()
    assert_nothing_left(study, sd)


def test_an_anchor_block_far_below_the_last_ones_is_read_again(tmp_path: Path) -> None:
    # A block a fifth or more below the anchor's recent ones read something else holding the machine (a quickstart
    # on a busy machine read 510 samples/s between 2,965 and 1,557): one more block is read in its place, once.
    from types import SimpleNamespace

    from autotune.tuner import Observer
    from autotune.tuner._anchor import Anchor

    sd = make_study(tmp_path / "disturbed", "disturbed", search_space={"batch_size": {"choices": [16, 32]}})
    blocks = iter([1000.0, 990.0, 500.0, 1010.0, 700.0, 720.0])

    class Entrant:
        def block(self, timeout_s: float) -> Any:
            return SimpleNamespace(window_throughput_samples_s=next(blocks))

    anchor = Anchor(load_spec(str(sd.file)), lambda plan, folder: Entrant(), Observer())  # type: ignore[arg-type,return-value]
    anchor._entrant = Entrant()  # type: ignore[assignment]
    assert [anchor._read() for _ in range(4)] == [1000.0, 990.0, 1010.0, 720.0]
    assert anchor.readings == [1000.0, 990.0, 1010.0, 720.0] and anchor.disturbed == 2



def test_while_the_anchor_starts_its_trial_is_this_runs_so_a_second_run_names_it_and_leaves_it_be(
    tmp_path: Path,
) -> None:
    # The anchor starts as the first search trial is configured (a launch and a warm-up: seconds, 30 and more on a
    # slow workload or a loaded machine). A second run that opened the study then found a running trial on no run's
    # record: it named no run at work (CI: a second run started on a loaded machine waited for that line for good),
    # and past the grace period it would have failed the trial as one whose tuner died before recording itself.
    from autotune.tuner import Measured, NoLaunch, Tuner
    from autotune.tuner._recovery import others_at_work
    from autotune.tuner._replay import ReplayEntrant, ReplayRunner

    opened: list[optuna.Study] = []
    seen: dict[str, Any] = {}

    class Watched(ReplayEntrant):
        def start(self, timeout_s: float) -> None:  # the anchor's start (the race's entrants start later)
            if not seen:  # what another run opening the study reads now
                (running,) = opened[0].get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                seen["worker"] = running.user_attrs.get("worker")
                seen["others"] = others_at_work(opened[0], {"host": "elsewhere", "pid": 1})
            super().start(timeout_s)

    class Runner(ReplayRunner):
        def paced(self, plan: Any, trial_dir: Path) -> ReplayEntrant:
            return Watched(self.landscape, plan, trial_dir, self.seen, self.machine)

    sd = make_study(tmp_path / "starting", "starting", search_space={"batch_size": {"choices": [16, 32, 64]}},
                    sampler={"name": "grid"})
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(),
                  run_trial=Runner(lambda config, repeat: Measured(100.0 * config.batch_size)))
    open_study = tuner.open
    tuner.open = lambda: opened.append(open_study()) or opened[0]  # type: ignore[method-assign]
    tuner.run(n_trials=2)
    assert seen["worker"] == tuner.identity  # recover() leaves a live run's trial be
    assert len(seen["others"]) == 1 and f"pid {tuner.identity['pid']} " in seen["others"][0]
