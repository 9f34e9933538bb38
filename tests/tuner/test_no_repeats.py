"""No configuration is proposed twice by accident: a search proposes every configuration of a small space before
any repeat, says when the space is exhausted, and from there reads configurations again only on purpose (queued,
marked ``reread_of``). Through the real Tuner on a replayed landscape (the search's decisions are the live
study's; only the measurement is replayed)."""

from __future__ import annotations

from collections.abc import Callable

import optuna
import pytest

from autotune.objectives import config_key
from autotune.search_space import TrialConfig, study_space
from autotune.tuner import EXHAUSTED_ATTR, Measured, NoLaunch, Observer, Tuner, open_study, replay_runner
from autotune.tuner._exhausted import REREAD, before_ask, reread
from autotune.workload_check import load_spec

from .conftest import StudyDir

WIDTHS = [5, 20, 40]  # the faulty workload's build(width=32): the baseline's width is not one of them
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def baseline_fastest(config: TrialConfig, repeat: int) -> Measured:
    """The baseline (width 32) reads 1,000 samples/s; every searched width reads 60-70% of it: each is pruned
    at its first window (the held-out study where 40 and 20 came twice, both pruned each time, and 5 never)."""
    width = config.hyperparameters["width"]
    return Measured(1000.0 if width == 32 else 600.0 + width * 2.0)


def _search(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if t.user_attrs.get("role") == "search"]


@pytest.mark.parametrize("sampler", ["gp", "tpe", "random", "qmc", "cmaes", "grid"])
def test_every_value_of_a_three_value_hyperparameter_comes_before_any_repeat_and_then_one_is_read_on_purpose(
    study_dir: Callable[..., StudyDir], sampler: str,
) -> None:
    sd = study_dir(f"three-{sampler}", hyperparameters={"width": {"choices": WIDTHS}}, trial=TRIAL,
                   sampler={"name": sampler, "seed": 0}, budget={"n_trials": 5}, confirm={"top_k": 0})
    lines: list[str] = []
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(baseline_fastest))
    tuner.observer.note = lines.append  # type: ignore[method-assign]
    summary = tuner.run()
    trials = summary.study.get_trials(deepcopy=False)
    assert trials[0].user_attrs["role"] == "baseline"
    assert trials[0].user_attrs["config"]["hyperparameters"]["width"] == 32
    search = _search(trials)
    widths = [t.user_attrs["config"]["hyperparameters"]["width"] for t in search]
    assert len(search) == 4 and sorted(widths[:3]) == WIDTHS, widths  # each once before any repeat
    assert all(REREAD not in t.user_attrs and "sampler" in t.user_attrs for t in search[:3])
    # the fourth reads one again on purpose: the least read, the best reading among equals (40: 680 samples/s)
    again = search[3]
    assert again.user_attrs.get(REREAD) == search[widths.index(40)].number and widths[3] == 40
    assert "sampler" not in again.user_attrs  # queued, not proposed
    exhausted = summary.study.user_attrs.get(EXHAUSTED_ATTR)
    assert isinstance(exhausted, dict) and exhausted["configurations"] == 3 and exhausted["trials"] == 4, exhausted
    assert sum("every configuration of the search space has been measured" in line for line in lines) == 1, lines


def test_a_point_whose_parameters_the_baseline_shares_but_not_its_fixed_knobs_is_still_searched(
    study_dir: Callable[..., StudyDir],
) -> None:
    # The baseline runs the workload's defaults whatever the space fixes: batch 32 with no DataLoader worker,
    # where the space's batch 32 has one. Its parameters are the space's point {batch_size: 32}; its
    # configuration is not, so that point is still measured, and then the space is exhausted.
    sd = study_dir("fixed-knob", search_space={"batch_size": {"choices": [16, 32]}, "num_workers": 1}, trial=TRIAL,
                   sampler={"name": "grid", "seed": 0}, budget={"n_trials": 5}, confirm={"top_k": 0})
    summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(),
                    run_trial=replay_runner(lambda config, repeat: Measured(1000.0))).run()
    trials = summary.study.get_trials(deepcopy=False)
    assert trials[0].params == {"batch_size": 32} and trials[0].user_attrs["config"]["num_workers"] == 0
    search = [(t.params["batch_size"], t.user_attrs["config"]["num_workers"]) for t in _search(trials)]
    assert sorted(search[:2]) == [(16, 1), (32, 1)] and sorted(search[2:]) == [(16, 1), (32, 1)], search
    assert summary.study.user_attrs[EXHAUSTED_ATTR]["configurations"] == 2
    rereads = [t for t in _search(trials) if REREAD in t.user_attrs]  # the budget's last two: read again
    assert len(rereads) == 2 and all(t.user_attrs["config"]["num_workers"] == 1 for t in rereads)


def test_a_worker_that_finds_every_configuration_taken_by_running_trials_reads_one_again_rather_than_stopping(
    study_dir: Callable[..., StudyDir],
) -> None:
    # Four workers on a three-value space: the fourth asks while the other three hold one configuration each,
    # running. None is finished, so none has a reading yet; the fourth worker still has budget, and stopping
    # there left it with "no trial completed" (exit 1) while the others went on. It reads one again instead.
    sd = study_dir("taken", hyperparameters={"width": {"choices": WIDTHS}}, trial=TRIAL,
                   sampler={"name": "random", "seed": 0}, budget={"n_trials": 12}, confirm={"top_k": 0})
    spec = load_spec(str(sd.file))
    space = study_space(spec)
    study = open_study(spec, space)
    running = []
    for _ in WIDTHS:  # the other workers' trials, asked and configured as the loop does, still running
        trial = study.ask()
        config = space.suggest(trial)
        trial.set_user_attr("config_key", config_key(config.model_dump()))
        trial.set_user_attr("role", "search")
        running.append(trial)
    taken = {study.get_trials(deepcopy=False)[t.number].params["hp.width"] for t in running}
    assert taken == set(WIDTHS), taken  # the sampler proposed each once: the space is exhausted
    before_ask(study, spec, Observer())  # raised SpaceExhausted
    waiting = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.WAITING]
    assert len(waiting) == 1 and waiting[0].user_attrs.get(REREAD) in {t.number for t in running}, waiting
    for trial in running:  # once they are read, the least read comes next as before
        study.tell(trial, 700.0)
    study.tell(study.ask(), 700.0)  # the queued re-read, read
    assert reread(study, spec, study.get_trials(deepcopy=False), study.sampler) is not None
