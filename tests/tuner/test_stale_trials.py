"""A trial another worker failed as stale while this worker still runs it (a heartbeat that lapsed on a loaded
machine): the run stops at its next window and the study goes on; the worker does not end with a traceback."""

from __future__ import annotations

from collections.abc import Callable

import optuna
import pytest
from optuna.trial import TrialState

from autotune.trial_runner import Window
from autotune.tuner import Tuner, pruning_hook
from autotune.workload_check import load_spec

from .conftest import StudyDir


def _window(step: int) -> Window:
    return Window(step=step, samples=step * 32, elapsed_s=1.0 + step / 10, window_throughput_samples_s=100.0,
                  throughput_samples_s=100.0, loss=0.5, peak_memory_mb=900.0, time_to_first_step_s=1.0)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")
@pytest.mark.parametrize("prune", [True, False])
def test_a_trial_failed_as_stale_by_another_worker_stops_at_its_next_window(
    study_dir: Callable[..., StudyDir], prune: bool
) -> None:
    # Seen with 4 PostgreSQL workers on a loaded machine: the report of a window of a trial another worker had
    # failed as stale (and queued again) raised UpdateFinishedTrialError and ended the worker, exit 1.
    sd = study_dir("stale-window")
    tuner = Tuner(load_spec(str(sd.file)))
    study = tuner.open()
    trial = study.ask()
    hook = pruning_hook(tuner.spec, study, trial, prune=prune)
    assert hook is not None
    assert not hook(_window(4))
    elsewhere = optuna.load_study(study_name=study.study_name, storage=f"sqlite:///{sd.db}")
    elsewhere.tell(trial.number, state=TrialState.FAIL)  # the other worker's stale-trial check
    assert hook(_window(8)), "stopped: the study runs it again elsewhere"
    assert study.get_trials(deepcopy=False)[trial.number].state == TrialState.FAIL
