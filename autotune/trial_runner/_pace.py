"""Paced runs: several configurations alive at once, measured one block at a time, the others frozen.

A confirmation race (autotune/tuner/_race.py) compares configurations on readings taken seconds apart, so
that the machine's drift (10-11% on the 2-core VM, at every time scale from 1.5 s to 30 s) is shared by the
readings it compares instead of deciding between them. Each configuration is one run launched with
``pace_steps``: after its warm-up its ranks train in blocks of that many steps. Between blocks every rank
waits at a gate in the trial folder (``gate``: the blocks released so far, written by the tuner; ``parked``:
the blocks done, written by rank 0 as it stops), outside the timed part of the loop, and the tuner then
freezes the run's ranks and DataLoader workers (SIGSTOP to each): a frozen run neither uses a
core nor prefetches during another's block, and starts its next block with the queue it ended the last with.

The tuner does not look for a block's end: it sleeps in poll(2) on a pipe (``parked.fifo``, :class:`Wake`)
into which rank 0 writes a byte as it parks, so it wakes at the block's end and freezes the run then. Looking
for the end every 0.5 ms cost 0.13 of a core, taken from the run being measured; the wait wakes only every
``WAKE_S`` besides, to notice a run that exited or hangs.

Rank side: :class:`Gate`. Tuner side: :class:`PacedRun`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from autotune.errors import LaunchError
from autotune.trial_result import RecordError, Window
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._exit import classify_exit
from autotune.trial_runner._monitor import MetricsTail, prepare_trial_folder
from autotune.trial_runner._plan import (
    DONE_FILE,
    GATE_FILE,
    METRICS_FILE,
    PARKED_FILE,
    WAKE_FILE,
    TrialPlan,
)
from autotune.trial_runner._rank import remove_scratch
from autotune.trial_runner._records import DoneRecord, read_record

GATE_POLL_S = 0.0005  # how often a parked rank looks at the gate (it is frozen most of the time it waits)
WAKE_S = 0.1  # while a block runs the tuner also wakes this often (has the run exited?), as the monitor does
TERMINATE_GRACE_S = 3.0


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _write_int(path: Path, value: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(value))
    tmp.replace(path)


FINISH = -1  # the gate's value that ends a paced run: the ranks leave the loop, evaluate and write done.json


def _wake(path: Path) -> None:
    """One byte into the tuner's wake pipe. No reader (the tuner is gone, or nobody waits on this run) or a
    full pipe (the tuner has bytes it did not read yet): nothing to wake, the parked file says it all."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"\0")
    except OSError:
        pass
    finally:
        os.close(fd)


class Wake:
    """The tuner's end of a paced run's wake pipe (a FIFO in the trial folder): :meth:`wait` sleeps until rank
    0 writes a byte into it (True) or ``timeout_s`` passes (False). The tuner holds a write end of its own, so
    that the pipe does not read as hung up (ready at every poll) once rank 0 closes its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.mkfifo(path)
        self._fds: tuple[int, ...] = ()
        try:
            self._read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            self._fds = (self._read,)
            self._write = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            self._fds += (self._write,)
        except OSError:
            self.close()
            path.unlink(missing_ok=True)
            raise
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        self.wakeups = 0  # waits that returned: woken by a byte or by the timeout
        self.woken = 0  # of those, woken by a byte

    def wait(self, timeout_s: float) -> bool:
        ready = bool(self._poll.poll(max(0.0, timeout_s) * 1000))
        self.wakeups += 1
        if ready:
            self.woken += 1
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 4096):
                    pass
        return ready

    def close(self) -> None:
        """Close both ends and remove the pipe (once: a second call does nothing)."""
        fds, self._fds = self._fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if fds:
            with contextlib.suppress(OSError):
                self.path.unlink()


class Gate:
    """A rank's stop between blocks: :meth:`wait` records the blocks done and returns True once the tuner
    released the next one, False when it asked the run to finish (:data:`FINISH`)."""

    def __init__(self, trial_dir: Path, rank: int) -> None:
        self.gate = trial_dir / GATE_FILE
        self.parked = trial_dir / PARKED_FILE
        self.wake = trial_dir / WAKE_FILE
        self.rank = rank
        self.blocks = 0

    def wait(self, blocks: int) -> bool:
        self.blocks = blocks
        if self.rank == 0:
            _write_int(self.parked, blocks)
            _wake(self.wake)
        while True:
            allowed = _read_int(self.gate)
            if allowed == FINISH:
                return False
            if allowed > blocks:
                return True
            time.sleep(GATE_POLL_S)


class PacedRunFailed(RuntimeError):
    """A paced run ended or stalled before its block did: its reason is the message."""


class PacedRun:
    """One configuration of a race: launched, warmed up, and then measured a block at a time.

    :meth:`start` launches it and returns once its warm-up is done and it is frozen; :meth:`block` thaws it,
    releases one block, waits for the block's window and freezes it again; :meth:`close` ends it (nothing of
    it is left). Either raises :class:`PacedRunFailed` when the run exits or makes no progress in time.
    """

    def __init__(
        self,
        launcher: Launcher,
        plan: TrialPlan,
        trial_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = 0.0005,
    ) -> None:
        if not plan.pace_steps:
            raise ValueError("a paced run needs plan.pace_steps")
        self.launcher = launcher
        self.plan = plan
        self.trial_dir = trial_dir
        self.clock = clock
        self.poll_s = poll_s
        self.handle: RunHandle | None = None
        self.tail = MetricsTail(trial_dir / METRICS_FILE)
        self.windows: list[Window] = []
        self.blocks = 0
        self._frozen: list[int] = []
        self.wake: Wake | None = None  # None where the folder holds no pipe: the wait looks every poll_s
        self.wall_s = 0.0  # seconds this run was running (launch to its warm-up's end, plus its blocks)

    def start(self, timeout_s: float) -> None:
        self.plan = prepare_trial_folder(self.plan, self.trial_dir)
        try:
            _write_int(self.trial_dir / GATE_FILE, 0)
        except OSError as e:
            raise LaunchError(f"cannot write the trial folder {self.trial_dir}: {e.strerror or e}") from e
        with contextlib.suppress(OSError):  # a file system without pipes: the wait looks instead
            self.wake = Wake(self.trial_dir / WAKE_FILE)
        began = self.clock()
        self.handle = self.launcher.launch(self.plan, self.trial_dir)
        self._until_parked(0, began + timeout_s)
        # The ranks and their (persistent) DataLoader workers, listed once: freezing and thawing them is then a
        # signal each, not a walk of the process tree. While a rank waits at the gate its workers still fill
        # their queue; a walk of some ms at every block's end and start gave an input-bound configuration that
        # much free prefetch a block.
        self._frozen = [p.pid for procs in self.handle.rank_processes().values() for p in procs]
        self._signal(signal.SIGSTOP)
        self.wall_s += self.clock() - began

    def block(self, timeout_s: float) -> Window:
        """Run one block; its window (``window_throughput_samples_s`` is the block's reading)."""
        began = self.clock()
        self._signal(signal.SIGCONT)
        _write_int(self.trial_dir / GATE_FILE, self.blocks + 1)
        self._until_parked(self.blocks + 1, began + timeout_s)
        self._signal(signal.SIGSTOP)
        self.wall_s += self.clock() - began
        self.blocks += 1
        deadline = self.clock() + 5.0  # rank 0 writes the window before it parks; read until it is there
        while len(self.windows) < self.blocks:
            self.windows += self.tail.read()
            if len(self.windows) < self.blocks:
                if self.clock() > deadline:
                    raise PacedRunFailed(f"block {self.blocks} left no window in {METRICS_FILE}")
                time.sleep(self.poll_s)
        return self.windows[self.blocks - 1]

    def finish(self, timeout_s: float) -> dict[str, object] | None:
        """Let the run end as a trial does: its ranks leave the loop, evaluate the workload's eval_dataset when
        the plan says so, and rank 0 writes done.json, which is returned (None: it did not within
        ``timeout_s``). The run is ended either way."""
        handle = self._handle()
        try:
            self._signal(signal.SIGCONT)
            _write_int(self.trial_dir / GATE_FILE, FINISH)
            deadline = self.clock() + timeout_s
            done = self.trial_dir / DONE_FILE
            while not done.exists() and handle.poll() is None and self.clock() < deadline:
                time.sleep(self.poll_s * 10)
            try:
                record = read_record(done, DoneRecord)
            except RecordError as e:
                raise PacedRunFailed(f"its done record does not parse: {e}") from None
            return asdict(record) if record is not None else None
        finally:
            self.close()

    def close(self) -> None:
        try:
            if self.handle is not None:
                self.handle.terminate(TERMINATE_GRACE_S)
                remove_scratch(self.trial_dir)
        finally:
            if self.wake is not None:
                self.wake.close()
                self.wake = None

    def _signal(self, sig: signal.Signals) -> None:
        for pid in self._frozen:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _handle(self) -> RunHandle:
        if self.handle is None:
            raise LaunchError("the paced run was not started")
        return self.handle

    def _until_parked(self, blocks: int, deadline: float) -> None:
        """Sleep until rank 0 parks after ``blocks`` blocks (0: its warm-up), woken by it (:class:`Wake`)."""
        handle = self._handle()
        parked = self.trial_dir / PARKED_FILE
        while True:
            if parked.exists() and _read_int(parked) >= blocks:
                return
            code = handle.poll()
            if code is not None:
                raise PacedRunFailed(self._why_ended(code))
            now = self.clock()
            if now > deadline:
                raise PacedRunFailed(
                    f"no {'warm-up end' if blocks == 0 else f'end of block {blocks}'} within its time: stopped"
                )
            if self.wake is not None:
                self.wake.wait(min(WAKE_S, deadline - now))
            else:
                time.sleep(self.poll_s)

    def _why_ended(self, code: int) -> str:
        outcome, reason, _, _ = classify_exit(self.trial_dir, self._handle())
        return f"{outcome.value} (exit status {code}): {reason}"
