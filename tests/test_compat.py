"""Every private name of Optuna and torch that autotune reaches is still where autotune/compat reaches it: a
new version that moved one fails here, naming it, rather than in a tuner mid-study."""

from __future__ import annotations

import datetime
from pathlib import Path

import optuna
import pytest
import torch
import torch.distributed as dist

from autotune.compat import optuna_private, torch_private


def test_every_private_optuna_name_autotune_reaches_is_there() -> None:
    gone = optuna_private.missing()
    assert not gone, (f"optuna {optuna.__version__} moved {', '.join(gone)}: adapt autotune/compat/_optuna.py, "
                      "or pin optuna to the versions pyproject.toml names")


def test_every_private_torch_name_autotune_reaches_is_there() -> None:
    gone = torch_private.missing()
    assert not gone, f"torch {torch.__version__} moved {', '.join(gone)}: adapt autotune/compat/_torch.py"


def test_the_optuna_accessors_read_what_the_public_api_shows() -> None:
    study = optuna.create_study(storage="sqlite:///:memory:", direction="maximize")
    trial = study.ask()
    trial.set_user_attr("k", 1)
    storage = optuna_private.storage_of(study)
    assert optuna_private.study_id(study) == storage.get_study_id_from_name(study.study_name)
    frozen = optuna_private.trials_of(study)[0]
    assert optuna_private.trial_id(trial) == optuna_private.trial_id(frozen) == frozen._trial_id
    assert optuna_private.cached_trial(trial).user_attrs == {"k": 1}
    rdb = optuna_private.rdb_of(storage)
    assert rdb is not None and optuna_private.batched_writes_available(rdb)
    with optuna_private.attr_writer(rdb) as write:  # one transaction, read back through the public API
        write(True, optuna_private.trial_id(trial), "u", [1, 2])
        write(False, optuna_private.trial_id(trial), "s", "x")
    again = study.get_trials()[0]
    assert again.user_attrs["u"] == [1, 2] and again.system_attrs["s"] == "x"
    assert optuna_private.trials_of(study, [optuna.trial.TrialState.COMPLETE]) == []
    with optuna_private.heartbeat_thread(trial, study):
        pass
    assert optuna_private.rdb_of(optuna.storages.InMemoryStorage()) is None


def test_the_torch_accessors_work(tmp_path: Path) -> None:
    ckpt = torch_private.checkpointing()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    def wrapper(m: torch.nn.Module) -> torch.nn.Module:
        return ckpt.checkpoint_wrapper(m, checkpoint_impl=ckpt.CheckpointImpl.NO_REENTRANT)

    ckpt.apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper,
                                        check_fn=lambda m: isinstance(m, torch.nn.Linear))
    assert sum(isinstance(m, ckpt.CheckpointWrapper) for m in model.modules()) == 2
    model(torch.ones(1, 2)).sum().backward()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch_private.set_process_group_timeout(datetime.timedelta(seconds=7))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_a_sampler_can_be_given_optunas_own_acquisition_search() -> None:
    class OwnSearch(optuna.samplers.GPSampler):
        def _optimize_acqf(self, acqf: object, best_params: object) -> object:  # a search of its own
            raise AssertionError("the subclass's search ran")

    def objective(trial: optuna.Trial) -> float:
        return trial.suggest_float("x", 0.0, 1.0) ** 2 + trial.suggest_int("n", 1, 4)

    for sampler_class, fails in ((OwnSearch, True), (optuna_private.with_optuna_acquisition_search(OwnSearch), False)):
        study = optuna.create_study(sampler=sampler_class(seed=0, n_startup_trials=2))
        if fails:
            with pytest.raises(AssertionError, match="the subclass's search ran"):
                study.optimize(objective, n_trials=3)
        else:
            study.optimize(objective, n_trials=4)
            assert len(study.trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert optuna_private.with_optuna_acquisition_search(OwnSearch).__name__ == "OwnSearchWithOptunaSearch"


class _Twice:
    """A guard that makes every call twice, as a retry after a commit whose answer was lost would."""

    def __init__(self) -> None:
        self.calls = 0
        self.attempts = 0
        self.twice = False

    def __call__(self, call):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.twice:
            call()
        return call()

    def attempt(self, call):  # type: ignore[no-untyped-def]
        self.attempts += 1
        call()


def test_a_guarded_storage_makes_every_call_through_its_guard_and_a_repeated_finish_is_a_success(
    tmp_path: Path,
) -> None:
    rdb = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'g.db'}", heartbeat_interval=60)
    guard = _Twice()
    storage = optuna_private.guarded_storage(rdb, guard)
    assert optuna_private.rdb_of(storage) is rdb
    study = optuna.create_study(storage=storage, study_name="g")
    guard.twice = True
    trial = study.ask()  # create_new_trial twice: a second, orphaned RUNNING trial, as a lost answer leaves
    trial.set_user_attr("k", 1)
    with optuna_private.heartbeat_thread(trial, study):
        pass
    study.tell(trial, 1.0)  # its finish, tried twice: the second finds it done by the first, not an error
    assert guard.calls > 5 and guard.attempts >= 1
    done = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert [(t.number, t.value, t.user_attrs) for t in done] == [(trial.number, 1.0, {"k": 1})]
    # at the first try, a trial someone else finished is still an error (a stale trial failed by another worker)
    once = optuna_private.guarded_storage(rdb, _Once())
    finished = optuna_private.trial_id(study.ask())
    once.set_trial_state_values(finished, optuna.trial.TrialState.FAIL)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        once.set_trial_state_values(finished, optuna.trial.TrialState.FAIL)


class _Once:
    def __call__(self, call):  # type: ignore[no-untyped-def]
        return call()

    def attempt(self, call):  # type: ignore[no-untyped-def]
        call()


def test_rdb_storage_notices_of_a_lost_connection_are_dropped_others_kept() -> None:
    import logging

    optuna_private.quiet_lost_connection_notices()
    logger = logging.getLogger(optuna_private.RDB_LOGGER)
    lost = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "Caught an error from sqlalchemy: "
                             "(psycopg.OperationalError) server closed the connection unexpectedly", (), None)
    limit = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "Caught an error from sqlalchemy: "
                              "too many SQL variables. Falling back to a slower alternative.", (), None)
    assert not logger.filter(lost) and logger.filter(limit)
