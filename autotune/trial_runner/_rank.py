"""Process hygiene inside a rank: logs, pid files, error records, and dying with the tuner."""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import shutil
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import IO

from autotune.errors import first_line
from autotune.trial_runner._plan import ERRORS_DIR
from autotune.trial_runner._process import set_parent_death_signal, start_ticks
from autotune.trial_runner._records import RankErrorRecord, write_record


def redirect_output(trial_dir: Path, rank: int) -> IO[str]:
    """Send this rank's stdout and stderr (file descriptors 1 and 2) to rank<N>.log in the trial folder."""
    log = open(trial_dir / f"rank{rank}.log", "a", buffering=1)  # noqa: SIM115 - lives as long as the rank
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    return log


def write_pid(trial_dir: Path, rank: int) -> None:
    """rank<N>.pid (as this node numbers its processes) and rank<N>.host (the node's hostname)."""
    (trial_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    (trial_dir / f"rank{rank}.host").write_text(socket.gethostname())


def make_scratch(trial_dir: Path, rank: int) -> None:
    """Make multiprocessing's scratch folder (/tmp/pymp-*) of this rank now, and record it in rank<N>.scratch.

    Made before the DataLoader forks its workers, it is theirs too: a worker that makes its own when it first
    shares a batch leaves it behind when it is killed at its rank's end, and a rank that leaves by ``os._exit``
    or dies by a signal never runs the finalizer that removes its own. :func:`remove_scratch` removes it,
    however the rank ended.
    """
    (trial_dir / f"rank{rank}.scratch").write_text(multiprocessing.util.get_temp_dir())


def remove_scratch(trial_dir: Path) -> None:
    """Remove the scratch folders the trial's ranks recorded (:func:`make_scratch`), once they are gone."""
    for record in trial_dir.glob("rank*.scratch"):
        with contextlib.suppress(OSError):
            path = Path(record.read_text().strip())
            if path.name.startswith("pymp-"):
                shutil.rmtree(path, ignore_errors=True)


def die_with_parents(tuner_pid: int | None, interval_s: float = 0.5) -> None:
    """Make this rank exit when its launcher (parent) or the tuner process is gone.

    The parent is covered by PR_SET_PDEATHSIG. The tuner is not our parent (torchrun is in between, and
    ranks live in sessions of their own), so a daemon thread watches it and takes the rank and its
    DataLoader workers down when it disappears — also when the tuner was killed with SIGKILL.
    """
    set_parent_death_signal()
    if os.getppid() == 1:  # the parent died before we could ask
        os._exit(1)
    if not tuner_pid:
        return
    started = start_ticks(tuner_pid)
    if started is None:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if start_ticks(tuner_pid) != started:
                kill_own_children()
                os._exit(1)

    threading.Thread(target=watch, name="autotune-tuner-watch", daemon=True).start()


def kill_own_children() -> None:
    """SIGKILL this process's descendants (DataLoader workers), so none outlives the rank."""
    try:
        import psutil

        children = psutil.Process().children(recursive=True)
    except Exception:
        return
    for child in children:
        with contextlib.suppress(Exception):
            child.kill()


def classify(error: BaseException) -> str:
    """oom | timeout (a collective timed out) | peer (another rank went away) | error."""
    text = f"{type(error).__name__}: {error}".lower()
    if type(error).__name__ == "OutOfMemoryError" or "out of memory" in text:
        return "oom"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(s in text for s in ("connection closed by peer", "connection reset by peer", "broken pipe",
                               "connection refused", "socket closed")):
        return "peer"
    return "error"


def write_error(trial_dir: Path, rank: int, error: BaseException) -> None:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    flat = [ln for chunk in lines for ln in chunk.rstrip("\n").splitlines()]
    record = RankErrorRecord(
        rank=rank,
        kind=classify(error),
        type=type(error).__name__,
        message=first_line(error)[:500],
        lines=flat[-60:],  # room for the user's frame under a library's (shown first by the CLI)
        time=time.time(),
    )
    with contextlib.suppress(Exception):  # the innermost frame in the workload's code, however deep below it
        from autotune.tracebacks import user_frame

        frame = user_frame(error.__traceback__)
        record.where = frame.where() if frame else None
    folder = trial_dir / ERRORS_DIR
    with contextlib.suppress(OSError):
        folder.mkdir(exist_ok=True)
        write_record(folder / f"rank{rank}.json", record)
    with contextlib.suppress(Exception):
        print("\n".join(flat), flush=True)
