"""Every private name of Optuna that autotune reaches, in one place, each behind a function or named here.

Optuna has no public accessor for a study's storage or ids, a trial's id, a cached read of the trials, the
heartbeat thread Study.optimize runs, or a batched write of attributes; autotune's loop needs each. When a
new Optuna moves one of them, tests/test_compat.py fails naming it (:func:`missing`), instead of a tuner
failing mid-study. pyproject.toml bounds optuna to the minor versions this was tested with.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

GPSamplerT = TypeVar("GPSamplerT", bound=optuna.samplers.GPSampler)
T = TypeVar("T")

#: GPSampler's private attributes and methods that autotune's samplers set or override (autotune.samplers._gp):
#: the least noise variance of a fit, the fit's cache, the acquisition search, its settings and random state.
GP_SAMPLER_INTERNALS = (
    "_minimum_noise", "_gprs_cache_list", "_get_constraints_acqf_args", "_optimize_acqf",
    "_n_preliminary_samples", "_n_local_search", "_rng",
)
#: Optuna's GP modules its first fit imports (preloaded while the study opens).
GP_MODULES = ("optuna._gp.acqf", "optuna._gp.gp", "optuna._gp.optim_mixed", "optuna._gp.prior",
              "optuna._gp.search_space")


def storage_of(study: optuna.Study) -> BaseStorage:
    """The study's storage (``Study._storage``)."""
    storage: BaseStorage = study._storage
    return storage


def study_id(study: optuna.Study | Any) -> int:
    """The study's id in its storage (``Study._study_id``; also a FrozenStudy's)."""
    return int(study._study_id)


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (``Trial._trial_id``, ``FrozenTrial._trial_id``)."""
    return int(trial._trial_id)


def trials_of(study: Any, states: Sequence[TrialState] | None = None, *, use_cache: bool = False,
              deepcopy: bool = False) -> list[FrozenTrial]:
    """``Study._get_trials``: the trials without a copy, optionally from Optuna's cache (the GP sampler reads
    them several times an ask)."""
    return list(study._get_trials(deepcopy=deepcopy, states=None if states is None else tuple(states),
                                  use_cache=use_cache))


def heartbeat_thread(trial: optuna.Trial, study: optuna.Study) -> Any:
    """The thread that records the trial's heartbeat while it runs, as Study.optimize runs it
    (``optuna.storages._heartbeat.get_heartbeat_thread``)."""
    from optuna.storages._heartbeat import get_heartbeat_thread

    return get_heartbeat_thread(trial_id(trial), storage_of(study))


def cached_trial(trial: optuna.Trial) -> FrozenTrial:
    """The frozen trial an ``optuna.Trial`` keeps in step with what it writes (``Trial._cached_frozen_trial``)."""
    frozen: FrozenTrial = trial._cached_frozen_trial
    return frozen


def rdb_of(storage: BaseStorage) -> RDBStorage | None:
    """The RDB storage behind ``storage`` (Optuna wraps it in a cache, ``_backend``; a
    :class:`GuardedStorage` wraps that), or None."""
    for _ in range(3):
        if isinstance(storage, RDBStorage):
            return storage
        storage = getattr(storage, "_backend", storage)
    return None


class Guard(Protocol):
    """How a :class:`GuardedStorage` makes its calls: ``guard(call)`` returns ``call()`` (waiting out an
    outage, or raising); ``guard.attempt(call)`` tries once and may skip it (a heartbeat)."""

    def __call__(self, call: Callable[[], T]) -> T: ...

    def attempt(self, call: Callable[[], object]) -> None: ...


def _guarded(name: str) -> Callable[..., Any]:
    def method(self: GuardedStorage, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(self._backend, name)
        return self.guard(lambda: inner(*args, **kwargs))

    method.__name__ = name
    return method


class _LostConnection(logging.Filter):
    """Drops RDBStorage's notice that a read failed and it falls back to a slower query when the read failed
    because the connection was lost: the fallback fails too, and the storage's guard says it in one line."""

    WORDS = ("connection", "server closed", "terminating", "could not connect", "shutting down", "starting up")

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Caught an error from sqlalchemy") and any(w in text for w in self.WORDS))


#: The logger of ``optuna.storages._rdb.storage`` (its notices: "Caught an error from sqlalchemy: ...").
RDB_LOGGER = "optuna.storages._rdb.storage"


def quiet_lost_connection_notices() -> None:
    """Install :class:`_LostConnection` on Optuna's RDB storage logger (once)."""
    logger = logging.getLogger(RDB_LOGGER)
    if not any(isinstance(f, _LostConnection) for f in logger.filters):
        logger.addFilter(_LostConnection())


def guarded_storage(rdb: RDBStorage, guard: Guard) -> GuardedStorage:
    """``rdb`` as Optuna would use it (in its cache, ``get_storage``), every call through ``guard``."""
    return GuardedStorage(optuna.storages.get_storage(rdb), guard)


class GuardedStorage(BaseStorage, BaseHeartbeat):
    """Optuna's storage (``_CachedStorage`` over an RDBStorage) with every call made through ``guard``: the one
    seam where autotune waits out a storage outage. Optuna sees a storage with heartbeats, as before.

    Two calls are not plain retries. ``set_trial_state_values`` retried after a lost connection may find its
    own earlier try committed (the trial already in that state): that is its success, not
    UpdateFinishedTrialError. ``record_heartbeat`` is tried once and skipped while the storage is away.
    """

    def __init__(self, backend: BaseStorage, guard: Guard) -> None:
        self._backend: Any = backend
        self.guard = guard

    def __getattr__(self, name: str) -> Any:
        # Anything else Optuna or autotune reads of the storage (remove_session, the RDB's attributes).
        return getattr(self.__dict__["_backend"], name)

    create_new_study = _guarded("create_new_study")
    delete_study = _guarded("delete_study")
    set_study_user_attr = _guarded("set_study_user_attr")
    set_study_system_attr = _guarded("set_study_system_attr")
    get_study_id_from_name = _guarded("get_study_id_from_name")
    get_study_name_from_id = _guarded("get_study_name_from_id")
    get_study_directions = _guarded("get_study_directions")
    get_study_user_attrs = _guarded("get_study_user_attrs")
    get_study_system_attrs = _guarded("get_study_system_attrs")
    get_all_studies = _guarded("get_all_studies")
    create_new_trial = _guarded("create_new_trial")
    set_trial_param = _guarded("set_trial_param")
    get_trial_id_from_study_id_trial_number = _guarded("get_trial_id_from_study_id_trial_number")
    get_trial_number_from_id = _guarded("get_trial_number_from_id")
    get_trial_param = _guarded("get_trial_param")
    set_trial_intermediate_value = _guarded("set_trial_intermediate_value")
    set_trial_user_attr = _guarded("set_trial_user_attr")
    set_trial_system_attr = _guarded("set_trial_system_attr")
    get_trial = _guarded("get_trial")
    get_all_trials = _guarded("get_all_trials")
    get_n_trials = _guarded("get_n_trials")
    get_best_trial = _guarded("get_best_trial")
    get_trial_params = _guarded("get_trial_params")
    get_trial_user_attrs = _guarded("get_trial_user_attrs")
    get_trial_system_attrs = _guarded("get_trial_system_attrs")
    _get_stale_trial_ids = _guarded("_get_stale_trial_ids")
    get_heartbeat_interval = _guarded("get_heartbeat_interval")
    get_heartbeat_stale_trial_callback = _guarded("get_heartbeat_stale_trial_callback")
    get_failed_trial_callback = _guarded("get_failed_trial_callback")

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        tries = 0

        def call() -> bool:
            nonlocal tries
            tries += 1
            try:
                return bool(self._backend.set_trial_state_values(trial_id, state=state, values=values))
            except optuna.exceptions.UpdateFinishedTrialError:
                if tries > 1 and self._backend.get_trial(trial_id).state == state:
                    return True  # an earlier try committed before its connection dropped
                raise

        return self.guard(call)

    def record_heartbeat(self, trial_id: int) -> None:
        self.guard.attempt(lambda: self._backend.record_heartbeat(trial_id))


@contextlib.contextmanager
def attr_writer(rdb: RDBStorage) -> Iterator[Any]:
    """A function ``write(user: bool, trial_id, key, value)`` that sets trial attributes in one transaction,
    committed when the block ends (``_create_scoped_session``, ``_set_trial_attr_without_commit``)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(rdb.scoped_session, True) as session:
        def write(user: bool, trial: int, key: str, value: Any) -> None:
            model = models.TrialUserAttributeModel if user else models.TrialSystemAttributeModel
            rdb._set_trial_attr_without_commit(session, model, trial, key, value)

        yield write


def batched_writes_available(rdb: RDBStorage | None) -> bool:
    """Whether :func:`attr_writer` works with this Optuna and storage."""
    if rdb is None or not hasattr(rdb, "_set_trial_attr_without_commit"):
        return False
    try:
        from optuna.storages._rdb import models  # noqa: F401
        from optuna.storages._rdb.storage import _create_scoped_session  # noqa: F401
    except ImportError:
        return False
    return True


def distribution_contains(distribution: optuna.distributions.BaseDistribution, value: Any) -> bool:
    """Whether ``value`` lies in ``distribution`` (``BaseDistribution._contains`` of its internal form);
    ValueError or TypeError for a value of the wrong kind."""
    return bool(distribution._contains(distribution.to_internal_repr(value)))


def preload_gp_modules() -> None:
    """Import what GPSampler's first fit imports (:data:`GP_MODULES`)."""
    for name in GP_MODULES:
        importlib.import_module(name)


def with_optuna_acquisition_search(sampler_class: type[GPSamplerT]) -> type[GPSamplerT]:
    """A subclass of ``sampler_class`` (a GPSampler) that searches its acquisition function with Optuna's own
    search (``GPSampler._optimize_acqf``), whatever search the class has of its own: autotune's GP as it was
    before its batched coordinate search on a large discrete space, kept for benchmarks/scale.py to compare."""

    class WithOptunaSearch(sampler_class):  # type: ignore[valid-type,misc]
        def _optimize_acqf(self, acqf: Any, best_params: Any) -> Any:
            return optuna.samplers.GPSampler._optimize_acqf(self, acqf, best_params)

    WithOptunaSearch.__name__ = WithOptunaSearch.__qualname__ = f"{sampler_class.__name__}WithOptunaSearch"
    return WithOptunaSearch


def missing() -> list[str]:
    """Every private name above that this Optuna lacks, as ``module.name`` (empty when all are there)."""
    gone: list[str] = []
    for module, names in (
        ("optuna.storages._heartbeat", ("get_heartbeat_thread", "BaseHeartbeat")),
        ("optuna.storages._rdb.storage", ("_create_scoped_session", "_logger")),
        ("optuna.storages._rdb.models", ("TrialUserAttributeModel", "TrialSystemAttributeModel")),
        *((name, ()) for name in GP_MODULES),
    ):
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            gone.append(module)
            continue
        gone += [f"{module}.{n}" for n in names if not hasattr(loaded, n)]
    gone += [f"optuna.storages.RDBStorage.{n}" for n in ("_set_trial_attr_without_commit",)
             if not hasattr(RDBStorage, n)]
    gone += [f"optuna.distributions.BaseDistribution.{n}" for n in ("_contains",)
             if not hasattr(optuna.distributions.BaseDistribution, n)]
    sampler = optuna.samplers.GPSampler()
    gone += [f"optuna.samplers.GPSampler.{n}" for n in GP_SAMPLER_INTERNALS if not hasattr(sampler, n)]
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    for obj, what, names in (
        (study, "optuna.Study", ("_storage", "_study_id", "_get_trials")),
        (trial, "optuna.Trial", ("_trial_id", "_cached_frozen_trial")),
        (study.get_trials()[0], "optuna.trial.FrozenTrial", ("_trial_id",)),
        (optuna.create_study(storage="sqlite:///:memory:")._storage, "a cached RDB storage", ("_backend",)),
    ):
        gone += [f"{what}.{n}" for n in names if obj is None or not hasattr(obj, n)]
    return gone
