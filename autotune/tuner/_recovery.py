"""Recovery and heartbeats: trials whose tuner died are failed and queued again; a running trial beats.

A tuner on this host that no longer exists is seen at once (its pid); tuners elsewhere are found by
their heartbeat going stale (Optuna's RDB heartbeat, ``GRACE_PERIOD_S`` or ``AUTOTUNE_HEARTBEAT_GRACE_S``).
Ctrl-C and SIGTERM become :class:`Interrupted`, so the running trial is recorded before the run stops.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import math
import os
import signal
import socket
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune.compat import optuna_private
from autotune.trial_runner import start_ticks
from autotune.tuner._outage import hush_lost_stop, raise_lost_stop, stop_taken, stop_unless_inside, stop_waiting
from autotune.tuner._roles import INTERRUPTED, ROLE_CONFIRM
from autotune.tuner._storage import grace_period_s, heartbeat_interval_s, study_lock


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: the running trial was stopped and recorded; ``exit_code`` is 130 or 143.
    ``trial_stopped`` is False when none of this tuner's trials was running (it stopped before or between
    trials); ``recorded`` False when a stopped trial could not be recorded (the storage unreachable as the run
    stopped): the next run records it."""

    def __init__(self, exit_code: int, trial_stopped: bool = True, recorded: bool = True) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code
        self.trial_stopped = trial_stopped
        self.recorded = recorded

    def redeliver(self) -> None:
        """Hand the signal that stopped the run to the caller, now that the tuner's handler is gone, as if the
        tuner had not been there: SIGTERM again to this process (the caller's own handler runs, or the default
        action ends the process), KeyboardInterrupt for Ctrl-C (as Python's own SIGINT handler raises it). Returns
        only when the caller's SIGTERM handler returns."""
        if self.exit_code == 143:
            signal.raise_signal(signal.SIGTERM)
            return
        raise KeyboardInterrupt from self


def worker_identity() -> dict[str, Any]:
    """This tuner as its trials record it: host, pid and start (epoch seconds), and on Linux the machine's boot
    and the start in clock ticks since it, which :func:`_alive` compares instead of the start: a start in epoch
    seconds moves with the wall clock, and a step of a second made a live tuner look gone and its running trial
    was failed and run again by the tuner beside it."""
    me: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "start": psutil.Process().create_time()}
    ticks, boot = start_ticks(os.getpid()), _boot_id()
    if ticks is not None and boot is not None:
        me |= {"boot": boot, "start_ticks": ticks}
    return me


@functools.cache
def _boot_id() -> str | None:
    """This boot of the machine (Linux; else None): after a reboot, pids and their start ticks begin again."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _alive(worker: dict[str, Any]) -> bool:
    """Whether the tuner ``worker`` (:func:`worker_identity`, recorded on this host) still runs: its pid, started
    when it was (a reused pid is another process), not a zombie."""
    try:
        proc = psutil.Process(int(worker["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if "start_ticks" in worker and (ticks := start_ticks(proc.pid)) is not None:
            return worker.get("boot") == _boot_id() and ticks == int(worker["start_ticks"])
        return "start" not in worker or abs(proc.create_time() - float(worker["start"])) < 1.0
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False


def gone_from_here(worker: object) -> bool:
    """Whether a trial's recorded tuner (its ``worker`` attribute) ran on this host and no longer exists: its
    trial, still RUNNING in the study, runs nowhere (the next run fails it and queues it again)."""
    return isinstance(worker, dict) and worker.get("host") == socket.gethostname() and not _alive(worker)


def _orphaned(trial: FrozenTrial) -> bool:
    """A running trial no tuner has recorded itself on, for longer than the heartbeat grace period."""
    if trial.datetime_start is None:
        return False
    return (datetime.datetime.now() - trial.datetime_start).total_seconds() > grace_period_s()


def recover(study: optuna.Study, identity: dict[str, Any]) -> list[int]:
    """Fail trials left RUNNING by a dead tuner and queue them again. Returns their numbers.

    ``identity`` is this tuner's (:func:`worker_identity`): a trial recorded by a tuner on this host is
    failed when that process is gone, one recorded elsewhere only by its stale heartbeat.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental API notice
        optuna.storages.fail_stale_trials(study)
    storage = optuna_private.storage_of(study)
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        if isinstance(worker, dict):
            if worker.get("host") != identity["host"] or _alive(worker):
                continue
            reason = f"its tuner (pid {worker.get('pid')}) died; retried"
        elif _orphaned(trial):
            # Its tuner died between asking for it and recording itself on it (milliseconds): no one can
            # ever finish it, and as a running trial it would hold a place in the budget for good.
            reason = "its tuner died before the trial started"
        else:
            continue
        try:
            if not _fail_interrupted(storage, trial, reason):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        recovered.append(trial.number)
        if "config" in trial.user_attrs:  # else it had not started: the budget gets a new trial instead
            retry(study, trial)
    return recovered


def _fail_interrupted(storage: Any, trial: FrozenTrial, reason: str) -> bool:
    """Record ``trial`` as interrupted (not its configuration's fault) and fail it in the storage; False when
    another process finished it first."""
    trial_id = optuna_private.trial_id(trial)
    storage.set_trial_user_attr(trial_id, "outcome", INTERRUPTED)
    storage.set_trial_user_attr(trial_id, "reason", reason)
    return bool(storage.set_trial_state_values(trial_id, state=TrialState.FAIL))


def others_at_work(study: optuna.Study, identity: dict[str, Any]) -> list[str]:
    """One line per other `autotune run` (or ``calibrate()``) whose trial is running in ``study`` now: a second
    run on a study shares its budget with the first, and says so, naming it."""
    others: dict[tuple[Any, Any], int] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        if isinstance(worker, dict) and (worker.get("host"), worker.get("pid")) != (identity["host"], identity["pid"]):
            others.setdefault((worker.get("host"), worker.get("pid")), trial.number)
    return [
        f"another autotune run (pid {pid} on {host}, running trial #{number}) is working on this study: the runs "
        "share its budget"
        for (host, pid), number in sorted(others.items(), key=lambda item: str(item[0]))
    ]


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue ``trial``'s configuration again, in its role, marked as a retry of it. A confirmation run is not
    queued again: the next confirmation chooses its own runs (a race its entrants) from the study as it is then,
    and a queued one would be taken by that confirmation's ask in place of the run it queued."""
    if trial.user_attrs.get("role") == ROLE_CONFIRM:
        return
    attrs = {k: v for k, v in trial.user_attrs.items() if k in ("role", "config", "confirms")}
    attrs["retry_of"] = trial.number
    study.enqueue_trial(trial.params, user_attrs=attrs, skip_if_exists=False)


def supersede_queued_confirmations(study: optuna.Study, url: str | None = None) -> list[int]:
    """Fail the confirmation runs still queued (WAITING) by an earlier run that stopped between queueing one and
    taking it, or by Optuna's retry of a stale one: a confirmation queues each of its runs and takes it at once,
    and Optuna hands out the oldest queued trial first (to the next confirmation, or to a search trial's ask).
    With ``url`` (the caller does not confirm), only while no run holds the study's confirmation lock: a run
    confirming now has its own run queued. Returns their numbers."""
    if url is not None:
        with study_lock(url, f"{study.study_name}:confirm", wait=False) as free:
            return supersede_queued_confirmations(study) if free else []
    storage = optuna_private.storage_of(study)
    superseded = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if trial.user_attrs.get("role") != ROLE_CONFIRM:
            continue
        if _fail_interrupted(storage, trial, "a confirmation run queued by an earlier run that stopped; the next "
                             "confirmation queued its own"):
            superseded.append(trial.number)
    return superseded


def ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():
        # Optuna notes that heartbeats are meant for Study.optimize; this loop records them itself.
        warnings.simplefilter("ignore", UserWarning)
        return study.ask()


class Heartbeat:
    """Records the running trial's heartbeat in the storage every heartbeat interval (5 s by default)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, clock: Callable[[], float]) -> None:
        self.storage = optuna_private.storage_of(study)
        self.trial_id = optuna_private.trial_id(trial)
        self.clock = clock
        self.last = -math.inf
        self.interval_s = heartbeat_interval_s()

    def __call__(self) -> None:
        raise_lost_stop()  # a checkpoint: each tick of a running trial, each block of a race
        now = self.clock()
        if now - self.last >= self.interval_s and hasattr(self.storage, "record_heartbeat"):
            self.last = now
            with contextlib.suppress(Exception):
                self.storage.record_heartbeat(self.trial_id)


def heartbeats(study: optuna.Study, clock: Callable[[], float]) -> Callable[[optuna.Trial], None]:
    """The heartbeat of several running trials (a race's entrants), one :class:`Heartbeat` each: a trial's is
    recorded once every heartbeat interval however often it is called (a race calls it after every block)."""
    beats: dict[int, Heartbeat] = {}

    def beat(trial: optuna.Trial) -> None:
        if trial.number not in beats:
            beats[trial.number] = Heartbeat(study, trial, clock)
        beats[trial.number]()

    return beat


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGTERM raises Interrupted(143) in the main thread, Ctrl-C KeyboardInterrupt as Python's own handler does;
    either waits for a storage call under way to end (:func:`~autotune.tuner._outage.stop_unless_inside`). A SIGTERM
    the process ignores (SIG_IGN) stays ignored; a caller's own SIGINT handler stays in place."""
    import threading

    stop_waiting(False)  # a run starts: an unreachable storage is waited for again (an earlier run stopped)
    stop_taken()  # and no earlier run's stop is pending
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop_unless_inside(Interrupted(143))

    def on_int(signum: int, frame: FrameType | None) -> None:
        stop_unless_inside(KeyboardInterrupt())

    def on_unraisable(unraisable: Any) -> None:
        if not hush_lost_stop(unraisable):
            previous_hook(unraisable)

    previous_hook, sys.unraisablehook = sys.unraisablehook, on_unraisable
    previous = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_int)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
        stop_taken()  # a stop lives as long as its run: none outlives it to stop a later heartbeat or ask
        sys.unraisablehook = previous_hook
