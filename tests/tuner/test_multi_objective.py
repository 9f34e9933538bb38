"""Multi-objective studies: Optuna's pruners refuse them, autotune prunes them itself by dominance."""

from __future__ import annotations

from collections.abc import Callable

import optuna
import pytest
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.trial_runner import Window
from autotune.tuner import Tuner, pruning_hook, summarize
from autotune.workload_check import load_spec

from .conftest import StudyDir, assert_nothing_left

TWO_OBJECTIVES = [{"metric": "throughput"}, {"metric": "peak_memory_mb"}]


@pytest.mark.slow
def test_a_throughput_and_memory_study_runs_and_has_a_pareto_front(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir(
        "pareto", objectives=TWO_OBJECTIVES,
        search_space={"num_workers": {"low": 0, "high": 1}, "batch_size": {"choices": [16, 64]}},
        sampler={"name": "tpe", "seed": 0}, pruner={"name": "hyperband"}, confirm={"top_k": 0},
    )
    out = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "NotImplementedError" not in out.stdout + out.stderr
    study = sd.load()
    assert study.directions == [StudyDirection.MAXIMIZE, StudyDirection.MINIMIZE]
    assert study.metric_names == ["throughput_samples_s", "peak_memory_mb"]
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 3 and all(t.state.is_finished() for t in trials)
    for t in trials:
        if t.state == TrialState.COMPLETE:
            assert t.values == [t.user_attrs["throughput_samples_s"], t.user_attrs["peak_memory_mb"]]

    summary = summarize(study, load_spec(str(sd.file)))
    complete = {t.number for t in trials if t.state == TrialState.COMPLETE}
    assert summary.pareto_trials and set(summary.pareto_trials) <= complete
    assert sorted(summary.pareto_trials) == sorted(t.number for t in study.best_trials)
    assert_nothing_left(study, sd)


def _window(step: int, throughput: float, memory: float) -> Window:
    return Window(step=step, samples=step * 32, elapsed_s=1.0 + step / 10, window_throughput_samples_s=throughput,
                  throughput_samples_s=throughput, loss=0.5, peak_memory_mb=memory, time_to_first_step_s=1.0)


def _finished(throughput: float, memory: float, **attrs: object) -> optuna.trial.FrozenTrial:
    """A complete trial as the tuner stores it: its windows at steps 5, 8 and 11 (docs/storage.md)."""
    windows = [[step, throughput, memory, 0.5] for step in (5, 8, 11)]
    return optuna.trial.create_trial(
        values=[throughput, memory],
        user_attrs={"outcome": "complete", "role": "search", "windows": windows, **attrs},
        constraints={"memory": -1.0, "diverged": 0.0},
    )


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")
def test_the_multi_objective_pruning_hook_prunes_dominated_trials_only(study_dir: Callable[..., StudyDir]) -> None:
    sd = study_dir("hook", objectives=TWO_OBJECTIVES, pruner={"name": "hyperband", "n_startup_trials": 2})
    tuner = Tuner(load_spec(str(sd.file)))
    study = tuner.open()
    assert sd.db.exists()

    trial = study.ask()
    hook = pruning_hook(tuner.spec, study, trial, prune=True)
    assert hook is not None
    assert not hook(_window(8, 100.0, 900.0)), "nothing finished yet: nothing to compare with"

    for throughput, memory in ((1000.0, 300.0), (1100.0, 320.0), (900.0, 310.0)):
        study.add_trial(_finished(throughput, memory))
    # finished trials that do not count: an oom one and a pruned one, both far better on paper
    study.add_trial(optuna.trial.create_trial(
        values=[9000.0, 10.0], constraints={"memory": 50.0, "diverged": 0.0},
        user_attrs={"outcome": "oom", "windows": [[5, 9000.0, 10.0, 0.5]]},
    ))
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.PRUNED, intermediate_values={5: 9000.0},
        user_attrs={"outcome": "pruned", "windows": [[5, 9000.0, 10.0, 0.5]]},
    ))

    trial = study.ask()
    hook = pruning_hook(tuner.spec, study, trial, prune=True)
    assert hook is not None
    assert hook(_window(8, 500.0, 400.0)), "slower and bigger than every finished trial: pruned"
    assert not hook(_window(8, 500.0, 100.0)), "a trade-off (least memory) is kept"
    assert not hook(_window(8, 2000.0, 400.0)), "a trade-off (fastest) is kept"
    assert not hook(_window(8, 980.0, 305.0)), "within noise of the finished trials: kept"
    assert not hook(_window(3, 500.0, 400.0)), "no finished trial has a window this early"

    # only feasible trials whose outcome is complete are compared: an oom and a diverged trial do not
    # count, which leaves one comparable trial, fewer than n_startup_trials, so nothing is pruned
    other = Tuner(load_spec(str(sd.file)), storage_url=f"sqlite:///{sd.folder / 'other.db'}")
    other_study = other.open()
    other_study.add_trial(optuna.trial.create_trial(
        values=[9000.0, 10.0], constraints={"memory": 50.0, "diverged": 0.0},
        user_attrs={"outcome": "oom", "windows": [[5, 9000.0, 10.0, 0.5]]},
    ))
    other_study.add_trial(_finished(9000.0, 10.0, outcome="diverged"))
    other_study.add_trial(_finished(9000.0, 10.0))
    hook = pruning_hook(other.spec, other_study, other_study.ask(), prune=True)
    assert hook is not None
    assert not hook(_window(8, 500.0, 400.0)), "one comparable trial is below n_startup_trials (2)"
