"""A storage that goes away for a while: every storage call waits for it, within a limit.

Every call autotune makes to a study's storage (Optuna's reads and writes, the batched attribute writes, the
heartbeats, the study lock) goes through one :class:`Patience` per storage URL and process. When a call fails
because the database cannot be reached (PostgreSQL stopped or restarting, a dropped connection, SQLite's
file locked past its timeout), it is said once on stderr and the call is retried with bounded back-off
(0.5 s doubling to 5 s) until the storage answers, then that is said once too. A storage that stays away for
longer than :data:`STORAGE_WAIT_S` (``AUTOTUNE_STORAGE_WAIT_S`` in the environment) ends the wait with
:class:`StorageUnreachable`, one line, exit status 1; from then on every call of this process fails at once,
so the code that cleans up after it (a trial's processes, the launcher) does not wait again.

Only a storage this process has reached is waited for: a PostgreSQL URL that never answered (a typo, a server
not started) fails at once with the database's own error, as before there was a study to protect. (SQLite is
always waited for: its "database is locked" is another run's transaction, not a wrong URL.)

A heartbeat is not waited for: it is tried once and skipped while the storage is away (the next one comes
:data:`~autotune.tuner._storage.HEARTBEAT_INTERVAL_S` later). Nor is a running trial's report to the pruner
(:meth:`Patience.unless_down`): the trial runs on under its limits and its result is written once the storage
is back. A full disk under an SQLite study
(``database or disk is full``) is not an outage: it is one line naming the file, at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from autotune.errors import AutotuneError, UsageError, first_line
from autotune.spec import redact_url

T = TypeVar("T")

#: How long a storage may stay unreachable before the worker gives up (seconds); the environment variable
#: AUTOTUNE_STORAGE_WAIT_S overrides it.
STORAGE_WAIT_S = 120.0
WAIT_ENV = "AUTOTUNE_STORAGE_WAIT_S"
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0

# What a database says when it is not there (or not yet, or no longer): sqlalchemy's OperationalError and
# InterfaceError carry these. Anything else (a constraint, a bad value) is a real error, raised at once.
_FULL = ("database or disk is full", "disk i/o error", "no space left on device")


# Set while the run stops (Ctrl-C, SIGTERM, a full disk): a call that finds the storage unreachable then fails at
# once instead of waiting, so recording the stopped trial cannot hold up the stop past its grace period.
_STOPPING = threading.Event()


def stop_waiting(stopping: bool = True) -> None:
    """From now on (``stopping``) a storage call that finds the storage unreachable raises
    :class:`StorageUnreachable` at once instead of waiting: the run is stopping, and what it cannot record now the
    next run recovers (a trial whose tuner is gone is failed and queued again). ``False``: wait again (a run
    starts)."""
    if stopping:
        _STOPPING.set()
    else:
        _STOPPING.clear()


# A stop (SIGTERM, Ctrl-C) that came while the main thread was inside a storage call, or inside a section that must
# not be cut in half (asking for a trial and taking it as this run's): raised as the outermost one ends.
_sections = 0
_held_stop: BaseException | None = None
# A stop a signal handler raised, until the run takes it (:func:`stop_taken`). Python swallows an exception raised
# inside a weakref callback, a __del__ or a finalizer of the garbage collector ("Exception ignored in ..."): a
# SIGTERM that landed in one, while a finished trial was told, was lost and the run went on to its end, exit 0.
_raised_stop: BaseException | None = None


def stop_unless_inside(stop: BaseException) -> None:
    """Raise ``stop`` (a signal handler's), unless the main thread is inside :func:`whole`: then it is held and raised
    as that ends. A storage call cut in half keeps what it had open: under SQLite a read stopped mid-fetch keeps its
    cursor alive (in SQLAlchemy's compiled result, out of reach), and CPython's sqlite3 keeps the cursor's read lock
    until the cursor goes, not on rollback, not on close; recording the stopped trial then waited out the 60 s busy
    timeout and failed, a minute past any grace period."""
    global _held_stop, _raised_stop
    _raised_stop = stop
    if _sections:
        _held_stop = stop
        return
    raise stop


def hush_lost_stop(unraisable: Any) -> bool:
    """Whether ``unraisable`` (what :data:`sys.unraisablehook` is given) is the run's own stop, swallowed where
    Python ignores exceptions: it is not an error to print ("Exception ignored in ..." and a traceback, beside the
    run's one line), since :func:`raise_lost_stop` raises it again at the run's next checkpoint."""
    return _raised_stop is not None and unraisable.exc_value is _raised_stop


def raise_lost_stop() -> None:
    """Raise again a stop a signal handler raised that has not reached the run (swallowed where Python ignores
    exceptions: a weakref callback, a __del__), unless the main thread is inside :func:`whole`, which raises it
    as it ends. The run's checkpoints call it: each tick of a running trial, each block of a race (the
    heartbeat), and before each trial is claimed."""
    if _raised_stop is not None and not _sections and threading.current_thread() is threading.main_thread():
        raise _raised_stop


def stop_taken() -> None:
    """The run has its stop in hand (or a run starts): no checkpoint raises it again."""
    global _raised_stop
    _raised_stop = None


@contextlib.contextmanager
def whole() -> Iterator[None]:
    """A section of the main thread a stop does not cut (:func:`stop_unless_inside`); other threads' are not."""
    global _sections, _held_stop
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _sections += 1
    try:
        yield
    finally:
        _sections -= 1
        if not _sections and _held_stop is not None:
            stop, _held_stop = _held_stop, None
            raise stop


def stop_held() -> bool:
    """Whether a stop waits for the section it came in to end (a storage call waiting out an outage gives up)."""
    return _held_stop is not None


class _Down(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class StorageUnreachable(AutotuneError):
    """The study's storage stayed unreachable longer than the wait allowed; the run stops (exit status 1)."""


class StorageFull(AutotuneError):
    """The study's SQLite file could not be written: its disk is full."""


def wait_limit_s() -> float:
    """:data:`STORAGE_WAIT_S`, or the environment's ``AUTOTUNE_STORAGE_WAIT_S`` (a bad value is bad input)."""
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return STORAGE_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UsageError(f"{WAIT_ENV}={text!r}: not a number of seconds >= 0; unset it or give one, e.g. 120")
    return value


def _causes(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def classify(error: BaseException) -> str | None:
    """``"down"`` when ``error`` says the database cannot be reached, ``"full"`` when its disk is full, else
    None."""
    from sqlalchemy import exc

    for cause in _causes(error):
        if isinstance(cause, exc.OperationalError | exc.InterfaceError) or (
            isinstance(cause, exc.DBAPIError) and cause.connection_invalidated
        ):
            text = str(cause).lower()
            return "full" if any(f in text for f in _FULL) else "down"
    return None


# What only a running PostgreSQL server says (a connection it accepted, then closed as it shut down or started):
# a storage that answered this way exists at that URL, so a process that never reached it before still waits.
_SERVER_WORDS = ("administrator command", "database system is shutting down", "database system is starting up",
                 "database system is in recovery mode", "server closed the connection unexpectedly")


def answered(error: BaseException) -> bool:
    """Whether ``error`` came from a PostgreSQL server that was reached (it is restarting), not from a URL that
    leads nowhere (refused, unknown host, wrong password)."""
    return any(w in str(cause).lower() for cause in _causes(error) for w in _SERVER_WORDS)


def _folder_of(url: str) -> str:
    from sqlalchemy.engine import make_url

    return os.path.dirname(os.path.abspath(make_url(url).database or ".")) or "."


def _reason(error: BaseException) -> str:
    """The database's own words, one line, without sqlalchemy's wrapping."""
    for cause in _causes(error):
        orig = getattr(cause, "orig", None)
        if orig is not None:
            return first_line(orig)
    return first_line(error)


class Patience:
    """The guard of one storage URL in this process: ``patience(call)`` returns ``call()``, waiting out
    an outage of the storage (module docstring). Thread-safe: the heartbeat thread shares it."""

    def __init__(self, url: str, *, limit_s: float | None = None, say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = url
        self.where = redact_url(url)
        self.sqlite = url.startswith("sqlite")
        self.limit_s = wait_limit_s() if limit_s is None else limit_s
        self.say = say or _stderr
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.gave_up: str | None = None
        self.outages = 0

    @property
    def reached(self) -> bool:
        """Whether this process has had an answer from the storage (through any guard of its URL)."""
        return self.url in _REACHED

    def __call__(self, call: Callable[[], T]) -> T:
        """``call()``, retried with back-off while the storage is unreachable, up to the limit."""
        backoff = FIRST_BACKOFF_S
        while True:
            try:
                return self._once(call)
            except _Down as down:
                if _STOPPING.is_set() or stop_held():
                    raise StorageUnreachable(f"storage {self.where} is unreachable ({_reason(down.error)}) while "
                                             "the run stops") from None
                self._give_up_if_late(down.error)
                self.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def attempt(self, call: Callable[[], object]) -> None:
        """``call()`` once; skipped (said once) while the storage is unreachable: for heartbeats."""
        try:
            self._once(call)
        except (_Down, StorageUnreachable):
            return

    def unless_down(self, call: Callable[[], object]) -> bool:
        """``call()`` once, True when it ran; False (skipped) while the storage is unreachable, so a running
        trial's reports do not hold up its monitor. Past the limit, StorageUnreachable, as any call."""
        try:
            self._once(call)
        except _Down as down:
            self._give_up_if_late(down.error)
            return False
        return True

    def _once(self, call: Callable[[], T]) -> T:
        if self.gave_up is not None:
            raise StorageUnreachable(self.gave_up)
        try:
            with whole():  # a stop lands after the call, not inside it
                result = call()
        except Exception as e:
            kind = classify(e)
            if kind == "full" and self.sqlite:
                raise StorageFull(
                    f"no space left for the study's storage {self.where}: {_reason(e)}; free space in "
                    f"{_folder_of(self.url)} and rerun: finished trials are kept"
                ) from None
            if kind == "down" and answered(e):  # the server itself said it is stopping: the URL is right
                _REACHED.add(self.url)
            if kind is None or (kind == "down" and not self.sqlite and not self.reached):
                raise
            self._went_down(e)
            raise _Down(e) from None
        _REACHED.add(self.url)
        self._came_back()
        return result

    def _went_down(self, error: BaseException) -> None:
        with self._lock:
            if self.down_since is None:
                self.down_since = self.clock()
                self.outages += 1
                self.say(f"warning: storage {self.where} is unreachable ({_reason(error)}); waiting up to "
                         f"{self.limit_s:g} s for it to come back ({WAIT_ENV})")

    def _give_up_if_late(self, error: BaseException) -> None:
        with self._lock:
            since = self.down_since
            if since is None or self.clock() - since <= self.limit_s:
                return
            self.gave_up = (
                f"storage {self.where} unreachable for over {self.limit_s:g} s ({_reason(error)}); stopped, the "
                "running trial's processes ended and finished trials kept: rerun once the storage is back "
                f"(or raise {WAIT_ENV})"
            )
        raise StorageUnreachable(self.gave_up)

    def _came_back(self) -> None:
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is None:
                return
            away = self.clock() - self.down_since
            self.down_since = None
        self.say(f"storage {self.where} is reachable again after {away:.0f} s; resuming")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_PATIENCE: dict[str, Patience] = {}
_REACHED: set[str] = set()  # the storage URLs this process has had an answer from
_PATIENCE_LOCK = threading.Lock()


def patience_for(url: str, *, fresh: bool = False) -> Patience:
    """This process's guard of the storage ``url`` (one per URL: one line per outage, one give-up). ``fresh``
    (a storage opened anew) forgets an earlier give-up and reads the limit again."""
    if fresh:
        with _PATIENCE_LOCK:
            _PATIENCE.pop(url, None)
    with _PATIENCE_LOCK:
        found = _PATIENCE.get(url)
        if found is None:
            found = _PATIENCE[url] = Patience(url)
        return found
