"""A trial's attributes written in one storage transaction, not one each.

Between two trials the tuner stores some thirty attributes on the trial that ended (its result, docs/storage.md)
and the system attributes of its artifacts, and four on the next one (its role, config, key, worker). Through
Optuna's ``Trial.set_user_attr`` each is a transaction of its own — on SQLite a commit with an fsync, some
10-25 ms on a busy disk — and the next trial waits for all of them. :func:`set_user_attrs` and
:class:`BatchedSystemAttrs` write the same rows, with Optuna's own code, in one transaction on an
:class:`~optuna.storages.RDBStorage` (a trial's result with its artifacts' metadata; its configuration with its
predicted memory). On any other storage (or an Optuna without these internals) they fall back
to one call per attribute. What is stored is the same either way.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.storages import BaseStorage

from autotune.compat import optuna_private
from autotune.samplers import CONSTRAINTS_PREFIX

__all__ = ["CONSTRAINTS_PREFIX", "BatchedSystemAttrs", "set_user_attrs"]


def _write(storage: BaseStorage, trial_id: int, user: dict[str, Any], system: dict[str, Any]) -> None:
    rdb = optuna_private.rdb_of(storage)
    if rdb is None or not optuna_private.batched_writes_available(rdb):
        for key, value in user.items():
            storage.set_trial_user_attr(trial_id, key, value)
        for key, value in system.items():
            storage.set_trial_system_attr(trial_id, key, value)
        return

    def batch() -> None:
        with optuna_private.attr_writer(rdb) as write:
            for key, value in user.items():
                write(True, trial_id, key, value)
            for key, value in system.items():
                write(False, trial_id, key, value)

    # Past Optuna's storage object: made through the storage's guard (a database restarting is waited for).
    guard = storage.guard if isinstance(storage, optuna_private.GuardedStorage) else None
    guard(batch) if guard is not None else batch()



def set_user_attrs(
    trial: optuna.Trial, attrs: dict[str, Any], constraints: dict[str, float] | None = None,
    system_attrs: dict[str, Any] | None = None,
) -> None:
    """``trial.set_user_attr(k, v)`` for every item, and ``trial.set_constraint(name, value)`` for every
    constraint, in one transaction (set_constraint reads the trial's system attributes and commits, per
    constraint), with ``system_attrs`` (its artifacts' metadata) in it too. A finished trial raises
    :class:`optuna.exceptions.UpdateFinishedTrialError` and nothing is written, as Optuna does."""
    system = {f"{CONSTRAINTS_PREFIX}{name}": float(value) for name, value in (constraints or {}).items()}
    system.update(system_attrs or {})
    if not attrs and not system:
        return
    _write(trial.storage, optuna_private.trial_id(trial), attrs, system)
    cached = optuna_private.cached_trial(trial)
    cached.user_attrs.update(attrs)  # what Trial.set_user_attr keeps in step
    cached.system_attrs.update(system)  # and set_constraint


class BatchedSystemAttrs:
    """A storage for ``optuna.artifacts.upload_artifact``: it reads through to the study's storage and keeps the
    system attributes it sets (each artifact's metadata) until :meth:`flush` writes them in one transaction."""

    def __init__(self, storage: BaseStorage) -> None:
        self._storage = storage
        self._pending: dict[int, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._pending.setdefault(trial_id, {})[key] = value

    def pending(self) -> dict[str, Any]:
        """The system attributes kept and not written, of the one trial they were set on (taken: not flushed)."""
        pending, self._pending = self._pending, {}
        assert len(pending) <= 1, "pending() is for one trial's attributes"
        return next(iter(pending.values()), {})

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for trial_id, attrs in pending.items():
            _write(self._storage, trial_id, {}, attrs)
