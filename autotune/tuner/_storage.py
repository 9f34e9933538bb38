"""The study's storage: an RDB storage with heartbeats, and a lock every autotune process on it shares."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage

from autotune.compat import optuna_private
from autotune.errors import AutotuneError, UsageError, first_line
from autotune.spec import redact_url
from autotune.tuner._outage import Patience, patience_for

#: A running trial's heartbeat interval, and how long a heartbeat may be missing before another worker fails the
#: trial as stale and retries it (seconds). The environment variable AUTOTUNE_HEARTBEAT_GRACE_S overrides the
#: grace period (whole seconds >= 2); the interval is then a sixth of it, at least 1 s and at most 5 s.
HEARTBEAT_INTERVAL_S = 5
GRACE_PERIOD_S = 30
GRACE_ENV = "AUTOTUNE_HEARTBEAT_GRACE_S"
LOCK_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10
SCHEMA_LOCK = "autotune-schema"  # creating tables and studies: one process at a time per database
#: The engine of every RDB storage this process opened, while it lives (release_storages). The engine, not the
#: storage: a storage dropped by its caller is freed at once, its engine's pool only by the next garbage collection.
_ENGINES: weakref.WeakSet[Any] = weakref.WeakSet()


def make_storage(url: str) -> BaseStorage:
    """An RDB storage with heartbeats, so a trial whose tuner died is failed and retried by the next one; every
    call to it waits out an outage of the database (:mod:`autotune.tuner._outage`)."""
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several tuners on one machine share the file: wait for the lock instead of failing at once.
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
        engine_kwargs["connect_args"] = _connect_args(url, idle_in_transaction_s=grace_period_s())

    def connect() -> optuna.storages.RDBStorage:
        with quiet():
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval_s(),
                grace_period=grace_period_s(),
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2),
            )

    patience = patience_for(url, fresh=True)
    try:
        rdb = patience(connect)  # a worker (re)started while the database restarts waits for it too
    except AutotuneError:
        raise
    except Exception as e:
        raise AutotuneError(f"cannot open storage {redact_url(url)}: {first_line(e)}") from None
    optuna_private.quiet_lost_connection_notices()
    _ENGINES.add(rdb.engine)
    return optuna_private.guarded_storage(rdb, patience)


def release_storages() -> None:
    """Close the pooled connections of every storage :func:`make_storage` opened in this process: the SQLite
    file's handles, the PostgreSQL sessions. ``calibrate()``, ``load_calibration()`` and every command end with
    it, so that a launcher (or each rank) that goes on to train does not hold the study's database open
    meanwhile; Optuna objects still in hand stay usable (a later call connects again)."""
    for engine in list(_ENGINES):
        with contextlib.suppress(Exception):  # a server already gone: nothing is held
            engine.dispose()


def grace_period_s() -> int:
    """:data:`GRACE_PERIOD_S`, or the environment's ``AUTOTUNE_HEARTBEAT_GRACE_S`` (a bad value is bad input)."""
    text = os.environ.get(GRACE_ENV, "").strip()
    if not text:
        return GRACE_PERIOD_S
    value = int(text) if text.isdigit() else -1
    if value < 2:
        raise UsageError(f"{GRACE_ENV}={text!r}: not a whole number of seconds >= 2; unset it or give one, e.g. 30")
    return value


def heartbeat_interval_s() -> int:
    """A sixth of the grace period, within 1 and :data:`HEARTBEAT_INTERVAL_S` seconds (5 s at the default 30 s)."""
    return max(1, min(HEARTBEAT_INTERVAL_S, grace_period_s() // 6))


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hide Optuna's notices about experimental features autotune deliberately uses (heartbeats, group)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


@contextlib.contextmanager
def study_lock(url: str, name: str, *, wait: bool = True, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
    """A mutex shared by every autotune process on the database ``url``, one per ``name``.

    PostgreSQL: a session advisory lock (``pg_try_advisory_lock``); MySQL: ``GET_LOCK``; SQLite (one
    machine): ``flock`` on a file under the temp folder. The database or the kernel drops the lock when
    its holder dies. Yields True once held; with ``wait=False`` it yields False at once when another
    process holds it. Waiting longer than ``timeout_s`` is an AutotuneError.
    """
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    backend = parsed.get_backend_name()
    key = hashlib.sha256(f"autotune:{name}".encode()).digest()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            yield True  # one process only
            return
        folder = Path(tempfile.gettempdir()) / "autotune-locks"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (hashlib.sha256(os.path.abspath(parsed.database).encode() + key).hexdigest()[:32] + ".lock")
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            held = _poll(lambda: _flock(fd), url, name, wait, timeout_s)
            yield held
        finally:
            os.close(fd)
        return
    if backend not in ("postgresql", "mysql"):
        yield True
        return
    with _server_lock(url, backend, key, name, wait, timeout_s) as held:
        yield held


@contextlib.contextmanager
def _server_lock(url: str, backend: str, key: bytes, name: str, wait: bool, timeout_s: float) -> Iterator[bool]:
    """study_lock on PostgreSQL (an advisory lock) or MySQL (``GET_LOCK``), held by a connection of its own."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    if backend == "postgresql":
        number = int.from_bytes(key[:8], "big", signed=True)
        take = text("SELECT pg_try_advisory_lock(:k)").bindparams(k=number)
        give = text("SELECT pg_advisory_unlock(:k)").bindparams(k=number)
    else:
        label = "autotune:" + key.hex()[:40]
        take = text("SELECT GET_LOCK(:k, 0)").bindparams(k=label)
        give = text("SELECT RELEASE_LOCK(:k)").bindparams(k=label)
    engine = create_engine(url, poolclass=NullPool, connect_args=_connect_args(url))

    def acquire() -> tuple[Any, bool]:
        conn = engine.connect()
        try:
            held = _poll(lambda: bool(conn.execute(take).scalar()), url, name, wait, timeout_s)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn, held

    try:
        try:
            conn, held = patience_for(url)(acquire)  # a database restarting is waited for, as every call is
        except AutotuneError:
            raise
        except Exception as e:
            raise AutotuneError(f"cannot open storage {redact_url(url)}: {first_line(e)}") from None
        with conn:
            try:
                yield held
            finally:
                if held:
                    with contextlib.suppress(Exception):  # a restarted server has dropped it already
                        conn.execute(give)
                        conn.commit()
    finally:
        engine.dispose()


def _connect_args(url: str, idle_in_transaction_s: int | None = None) -> dict[str, Any]:
    """PostgreSQL's connection options. ``connect_timeout``: a host that does not answer at all is a failed try,
    waited out like a refused one, not a hang. ``idle_in_transaction_s``: the server ends a session of this
    process that sits inside a transaction that long, and the row locks it holds go with it. A worker frozen
    mid-write (SIGSTOP, a paused VM) would otherwise hold its trial's row lock for good, and every other
    worker failing that trial as stale would wait on it, forever: the grace period after which its trial is
    taken from it is also when its locks are. autotune's transactions last milliseconds."""
    if not url.startswith("postgresql"):
        return {}
    args: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
    if idle_in_transaction_s is not None:
        args["options"] = f"-c idle_in_transaction_session_timeout={idle_in_transaction_s * 1000}"
    return args


def unless_down(storage: BaseStorage, call: Callable[[], object]) -> bool:
    """``call()`` (a write to ``storage`` that may be skipped), True when it ran, False when skipped because the
    storage is unreachable right now (:meth:`autotune.tuner._outage.Patience.unless_down`)."""
    if isinstance(storage, optuna_private.GuardedStorage) and isinstance(storage.guard, Patience):
        return storage.guard.unless_down(call)
    call()
    return True


def _flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _poll(take: Callable[[], bool], url: str, name: str, wait: bool, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not take():
        if not wait:
            return False
        if time.monotonic() > deadline:
            raise AutotuneError(
                f"another autotune process has held the lock {name!r} on {redact_url(url)} for over "
                f"{timeout_s:g} s; is one stuck?"
            )
        time.sleep(0.05)
    return True


def missing_sqlite_file(url: str) -> bool:
    from sqlalchemy.engine import make_url

    with contextlib.suppress(Exception):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
            return not os.path.exists(parsed.database)
    return False
