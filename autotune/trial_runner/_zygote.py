"""A warm interpreter that forks trials: ``python -m autotune.trial_runner._zygote``.

It imports torch (and what DDP pulls in) once, then serves one request per line on stdin — a JSON
object ``{"trial_dir", "world_size", "env"}`` — by forking a *leader* in a new session and answering
``{"pid": leader_pid}`` on stdout. The leader plays torchrun's part: it picks a free port, forks one
process per rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set
(torch.distributed's env:// rendezvous), waits for them, ends them all when one fails (writing a
torchrun-style failure report to launcher.err), and records its exit status in launcher.exit.

Forking skips the 2-4 s that a cold torchrun trial spends importing torch and torch._dynamo. The
zygote runs no torch operation, so no thread pool exists when it forks. It exits when stdin closes or
its parent (the tuner) dies.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from autotune.trial_runner._plan import LAUNCHER_ERR_FILE as ERR_FILE
from autotune.trial_runner._plan import LAUNCHER_EXIT_FILE as EXIT_FILE
from autotune.trial_runner._process import free_port, set_parent_death_signal

GRACE_S = 3.0


def preload() -> None:
    """Import what every rank needs, without running any torch operation."""
    from autotune.compat import torch_private

    torch_private.preload()

    import autotune.trial_runner._training
    import autotune.trial_runner.worker  # noqa: F401


def _write(path: Path, text: str) -> None:
    with contextlib.suppress(OSError):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def _failure_report(failures: list[tuple[int, int, int]]) -> str:
    """The part of torchrun's report that summarize_torchrun_failure reads."""
    lines = ["autotune.trial_runner.worker FAILED", "Failures:"]
    for i, (rank, pid, code) in enumerate(failures):
        lines += [f"[{i}]:", f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {code} (pid: {pid})"]
    return "\n".join(lines) + "\n"


def _rank(trial_dir: str, rank: int, world_size: int, port: int) -> None:  # pragma: no cover - in a fork
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
        GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    # The zygote's sys.path was fixed when it started; this trial's PYTHONPATH (the study's folder) comes first.
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    from autotune.trial_runner import worker

    worker.main(["worker", trial_dir])  # always leaves through os._exit


def leader(request: dict[str, Any]) -> int:  # pragma: no cover - runs in a forked child
    """Start the ranks of one trial and watch them, like torchrun's agent does."""
    trial_dir = Path(request["trial_dir"])
    world_size = int(request["world_size"])
    err = _as_trial_process(request, trial_dir)
    port = free_port()
    ranks: dict[int, int] = {}
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _rank(str(trial_dir), rank, world_size, port)
            os._exit(1)
        ranks[pid] = rank

    def on_term(signum: int, frame: object) -> None:
        _stop_all(ranks, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while ranks and time.monotonic() < deadline:
            _reap(ranks, {}, block=False)
            # A rank dies within milliseconds of SIGTERM; the tuner's next trial waits for this process to
            # be gone (a pruned trial's teardown took 0.12-0.23 s with 0.05 s naps here).
            time.sleep(0.002)
        _stop_all(ranks, signal.SIGKILL)
        _write(trial_dir / EXIT_FILE, "143")
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    statuses: dict[int, int] = {}
    failures: list[tuple[int, int, int]] = []
    while ranks:
        for pid, rank, code in _reap(ranks, statuses, block=True):
            if code != 0:
                failures.append((rank, pid, code))
                if len(failures) == 1:
                    _end_the_others(ranks, statuses, failures)
    code = 1 if failures else 0
    if failures:
        # Ranks killed by a signal first: they are the cause, the others' errors the consequence.
        failures.sort(key=lambda f: f[2] >= 0)
        err.write(_failure_report(failures))
    _write(trial_dir / EXIT_FILE, str(code))
    return code


def _as_trial_process(request: dict[str, Any], trial_dir: Path) -> Any:  # pragma: no cover - in the leader
    """The leader's environment, folder and standard streams become the trial's (stderr and stdout to
    launcher.err, which is returned; stdin from /dev/null: the zygote's request pipe is not the trial's business)."""
    os.environ.clear()
    os.environ.update(request["env"])
    with contextlib.suppress(OSError):
        os.chdir(request.get("cwd") or trial_dir)
    err = open(trial_dir / ERR_FILE, "a", buffering=1)  # noqa: SIM115 - the leader's stderr until exit
    os.dup2(err.fileno(), 2)
    os.dup2(err.fileno(), 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    return err


def _stop_all(ranks: dict[int, int], signum: int) -> None:
    for pid in ranks:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _end_the_others(
    ranks: dict[int, int], statuses: dict[int, int], failures: list[tuple[int, int, int]]
) -> None:  # pragma: no cover - in the leader
    """One rank failed: give the others a moment to record their side (their failures are added), then end
    them."""
    deadline = time.monotonic() + GRACE_S
    while ranks and time.monotonic() < deadline:
        for more in _reap(ranks, statuses, block=False):
            if more[2] != 0:
                failures.append(more)
        time.sleep(0.05)
    _stop_all(ranks, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while ranks and time.monotonic() < deadline:
        _reap(ranks, statuses, block=False)
        time.sleep(0.05)
    _stop_all(ranks, signal.SIGKILL)


def _reap(ranks: dict[int, int], statuses: dict[int, int], *, block: bool) -> list[tuple[int, int, int]]:
    """Collect exited ranks: (pid, rank, exit code; negative for a signal)."""
    done = []
    while ranks:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            ranks.clear()
            break
        if pid == 0:
            break
        block = False
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if pid in ranks:
            rank = ranks.pop(pid)
            statuses[rank] = code
            done.append((pid, rank, code))
    return done


def serve() -> None:  # pragma: no cover - exercised through WarmLauncher
    set_parent_death_signal(signal.SIGTERM)
    preload()
    gc.freeze()  # what preload imported stays out of every collection in the forks (the rank freezes the rest)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # leaders are reaped by the kernel
    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            set_parent_death_signal(signal.SIGTERM)  # the zygote going away ends the trial too
            code = 1
            try:
                code = leader(request)
            finally:
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
    # Stdin closed: the launcher is done. Leave without the interpreter's teardown of torch and the modules
    # preloaded with it (0.7-0.9 s here, paid at the end of every `autotune run` and calibrate()); nothing is
    # left to flush, and the leaders it forked end with it (their parent-death signal).
    os._exit(0)


if __name__ == "__main__":
    serve()
