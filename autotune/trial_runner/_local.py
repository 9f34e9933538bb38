"""The local launcher: one torchrun per trial on this machine, in a process session of its own."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from autotune.errors import LaunchError
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._exit import summarize_torchrun_failure
from autotune.trial_runner._lease import Lease, LeaseBoard
from autotune.trial_runner._plan import TrialPlan
from autotune.trial_runner._process import die_with_tuner

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

# Variables a trial's processes may inherit; everything else (tokens, cloud credentials, the tuner's own
# settings) stays behind. Prefixes end in '_'.
_ENV_KEEP = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES", "HF_HOME",
}
_ENV_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "GLOO_", "OMP_", "MKL_", "KMP_", "AUTOTUNE_")


def trial_environment(plan: TrialPlan, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a trial: what torch needs, nothing the trial has no use for."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_PREFIXES)}
    # The workload's own modules may live beside the study file.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (plan.base_dir, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // plan.config.world_size)))
    env.update(extra or {})
    return with_trial_env(env, plan)


def with_trial_env(env: dict[str, str], plan: TrialPlan) -> dict[str, str]:
    """``env`` with the trial's own variables on top: the study's ``env:`` values, and the thread count of a
    ``threads_per_rank`` that is a number (it overrides the launcher's and the user's OMP/MKL settings)."""
    env.update(plan.config.env)
    threads = plan.config.threads_per_rank
    if isinstance(threads, int):
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _start_child(cores: tuple[int, ...]) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Die with the tuner, and stay on the leased cores (every process the child starts inherits them)."""
    die_with_tuner()
    os.sched_setaffinity(0, cores)


# Processes this tuner started itself (torchrun, the warm zygote, srun): their Popen objects wait for them.
_LAUNCHED: set[int] = set()


def launched(pid: int) -> None:
    """Note a process started with Popen, so reap_orphans leaves its exit status to its Popen."""
    _LAUNCHED.add(pid)


def reap_orphans() -> None:
    """Collect exited orphans re-parented to us: the DataLoader workers of a rank that died or left, which
    we never saw alive (a worker living less than a poll interval). Without this they stay zombies."""
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in _LAUNCHED:
            continue
        with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)


_SUBREAPER = {"users": 0, "before": False}  # launchers alive that need it; whether we were one before


def become_subreaper() -> bool:
    """Orphans of our trials (a DataLoader worker whose rank died) are re-parented to us, so we find them.
    Returns whether this process was a subreaper already (so :func:`stop_being_subreaper` can restore it)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return bool(was.value)
    return False


def stop_being_subreaper() -> None:
    """Undo :func:`become_subreaper`: a calibrate() caller's process is left as it was."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class ProcessTreeHandle(RunHandle):
    """A run rooted at one local process (torchrun, or srun): tracks its whole tree and kills it all."""

    def __init__(
        self, proc: subprocess.Popen[bytes], trial_dir: Path, log_err: Path, lease: Lease | None = None
    ) -> None:
        self.proc = proc
        launched(proc.pid)
        self.trial_dir = trial_dir
        self.log_err = log_err
        self.lease = lease  # released by terminate(), once nothing of the run is left
        self._seen: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            self._seen[proc.pid] = psutil.Process(proc.pid)

    def poll(self) -> int | None:
        return self.proc.poll()

    def held(self) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
        return None if self.lease is None else (self.lease.cores, self.lease.gpus)

    def _rank_pids(self) -> dict[int, int]:
        pids = {}
        for path in self.trial_dir.glob("rank*.pid"):
            with contextlib.suppress(ValueError, OSError):
                pids[int(path.stem.removeprefix("rank"))] = int(path.read_text())
        return pids

    def _remember(self, proc: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            if proc.pid not in self._seen:
                proc.create_time()  # pins identity against pid reuse
                self._seen[proc.pid] = proc

    def processes(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            root = self._seen.get(self.proc.pid)
            if root is not None:
                for child in root.children(recursive=True):
                    self._remember(child)
        for pid in self._rank_pids().values():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                self._remember(proc)
                for child in proc.children(recursive=True):
                    self._remember(child)
        alive = []
        for proc in list(self._seen.values()):
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def rank_processes(self) -> dict[int, list[psutil.Process]]:
        out: dict[int, list[psutil.Process]] = {}
        for rank, pid in sorted(self._rank_pids().items()):
            proc = self._seen.get(pid)
            if proc is None:
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    self._remember(proc)
            if proc is None:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    out[rank] = [proc, *proc.children(recursive=True)]
        return out

    def terminate(self, grace_s: float) -> None:
        procs = self.processes()
        groups = set()
        for proc in procs:
            with contextlib.suppress(psutil.Error, OSError):
                groups.add(os.getpgid(proc.pid))
        groups.discard(os.getpgid(0))
        _signal(groups, procs, signal.SIGCONT)  # a paced run frozen between blocks takes no SIGTERM until continued
        _signal(groups, procs, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        _signal(groups, alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self._reap()
        leftover = [p for p in self.processes() if p.pid != self.proc.pid]
        if leftover:
            for proc in leftover:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(leftover, timeout=5)
            self._reap()
        if self.lease is not None:
            self.lease.release()

    def _reap(self) -> None:
        """Collect orphans that were re-parented to us (we are a subreaper), so no zombie stays."""
        for pid in list(self._seen):
            if pid == self.proc.pid:
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        reap_orphans()

    def exit_summary(self) -> str:
        try:
            text = self.log_err.read_text(errors="replace")
        except OSError:
            return ""
        return summarize_torchrun_failure(text)


def _signal(groups: set[int], procs: list[psutil.Process], sig: signal.Signals) -> None:
    """Send ``sig`` to every process group in ``groups``, then to each of ``procs`` (one that left its group)."""
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


class MachineLauncher(Launcher):
    """What the launchers that start trials on this machine share: extra environment, the core/GPU lease
    board every trial leases from before it starts, and being the subreaper of the trials' orphans."""

    def __init__(
        self, env: dict[str, str] | None = None, leases: LeaseBoard | None = None, lease_timeout_s: float | None = None
    ) -> None:
        self.extra_env = env or {}
        self.leases = leases or LeaseBoard()
        self.lease_timeout_s = lease_timeout_s
        _SUBREAPER["users"] += 1
        was = become_subreaper()
        if _SUBREAPER["users"] == 1:
            _SUBREAPER["before"] = was
        self._subreaper = True

    paces = True

    @contextlib.contextmanager
    def sharing(self, plan: TrialPlan) -> Iterator[None]:
        lease = lease_for(self.leases, plan, None, self.lease_timeout_s)
        self._shared: Lease | None = lease
        try:
            yield
        finally:
            self._shared = None
            lease.release()

    def lease(self, plan: TrialPlan, trial_dir: Path) -> Lease:
        """The lease a run starts under: its own, or the one shared inside :meth:`sharing` (which its handle's
        terminate leaves held)."""
        shared = getattr(self, "_shared", None)
        if shared is not None:
            return shared.borrowed()
        return lease_for(self.leases, plan, trial_dir, self.lease_timeout_s)

    def close(self) -> None:
        """Stop being the subreaper of trial orphans once no launcher needs it, unless this process was one
        before the first launcher (a calibrate() caller's process is left as it was)."""
        if not getattr(self, "_subreaper", False):
            return
        self._subreaper = False
        _SUBREAPER["users"] -= 1
        if _SUBREAPER["users"] == 0 and not _SUBREAPER["before"]:
            reap_orphans()
            stop_being_subreaper()


class LocalLauncher(MachineLauncher):
    """torchrun on this machine: ``--nproc-per-node=W`` with a c10d rendezvous on a free local port.

    torchrun runs in a new session (its own process group) and receives SIGTERM when the tuner dies; the
    ranks themselves watch the tuner too (see ``_rank.die_with_parents``). Each trial first leases its
    cores (and GPUs) on this machine (``_lease``): launch waits while other trials hold them, then pins
    the run to them.
    """

    name = "local"

    def command(self, plan: TrialPlan, trial_dir: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={plan.config.world_size}",
            "--nnodes=1",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=localhost:0",
            "--monitor-interval=0.1",
            "-m",
            "autotune.trial_runner.worker",
            str(trial_dir),
        ]

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        out, err = trial_dir / "launcher.out", trial_dir / "launcher.err"
        lease = self.lease(plan, trial_dir)
        try:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    self.command(plan, trial_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=plan.base_dir,
                    env=trial_environment(plan, {**lease.env(plan.config.world_size), **self.extra_env}),
                    start_new_session=True,
                    preexec_fn=functools.partial(_start_child, lease.cores),
                )
        except OSError as e:
            lease.release()
            raise LaunchError(f"cannot start torchrun for {trial_dir}: {e}") from e
        except BaseException:
            lease.release()
            raise
        return ProcessTreeHandle(proc, trial_dir, err, lease=lease)


def lease_for(leases: LeaseBoard, plan: TrialPlan, trial_dir: Path | None, timeout_s: float | None) -> Lease:
    """Hold the cores (and GPUs) of one trial (None: of a race, see ``MachineLauncher.sharing``). A trial that
    had to wait for them has its launch time in config.json moved to now, so its time to first step does not
    count the wait."""
    request = leases.request(plan.config.world_size, plan.config.device)
    what = f"trial {trial_dir.name}" if trial_dir is not None else "the confirmation race"
    lease = leases.acquire(request, timeout_s=timeout_s, what=what)
    if lease.waited_s > 0.05 and trial_dir is not None:
        plan.model_copy(update={"launched_at": time.time()}).write(trial_dir)
    return lease
