"""Leases on this machine's cores and GPUs, so trials that run at the same time never share them.

Every autotune process on a machine sees the same lease folder (``$AUTOTUNE_LEASE_DIR``, by default
``<tmp>/autotune-leases``) holding one lock file per CPU core and per GPU. A trial holds ``fcntl.flock``
on the files of what it was given while it runs; the kernel drops a lock when its holder dies, so a lease
never outlives its tuner and there is nothing to clean up. Picking happens under one more lock
(``alloc.lock``) and takes all or nothing, so two tuners never each hold half of what both need.

What a trial asks for (:func:`request_for`):

- CPU trials take every core this process may run on, unless ``$AUTOTUNE_CORES_PER_RANK`` is set: then
  ``world_size x cores_per_rank`` cores. On a 2-core machine that means one trial at a time by default.
- CUDA trials take ``world_size`` GPUs and their share of the cores.

No scheduler: a trial that finds too little free waits (and says so once), polling, until a lease is
free or ``timeout_s`` passes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import LaunchError, UsageError

LEASE_DIR_ENV = "AUTOTUNE_LEASE_DIR"
CORES_PER_RANK_ENV = "AUTOTUNE_CORES_PER_RANK"


def default_lease_dir() -> Path:
    return Path(os.environ.get(LEASE_DIR_ENV) or Path(tempfile.gettempdir()) / "autotune-leases")


@dataclass(frozen=True)
class Request:
    """How many cores and GPUs one trial needs."""

    cores: int
    gpus: int = 0


def cores_per_rank() -> int | None:
    raw = os.environ.get(CORES_PER_RANK_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise UsageError(f"{CORES_PER_RANK_ENV}={raw!r} is not a positive integer; unset it or give e.g. 1")
    return int(raw)


def request_for(world_size: int, device: str, n_cores: int, n_gpus: int) -> Request:
    """The lease one trial of ``world_size`` ranks on ``device`` asks for on a machine with these devices."""
    per_rank = cores_per_rank()
    if device == "cuda":
        share = max(1, n_cores // max(1, n_gpus)) * world_size
        return Request(cores=min(n_cores, per_rank * world_size if per_rank else share), gpus=world_size)
    return Request(cores=min(n_cores, per_rank * world_size) if per_rank else n_cores)


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else those torch counts."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no torch CUDA build: no GPUs
        return []


@dataclass
class Lease:
    """Cores and GPUs held by one trial until :meth:`release` (or until this process dies)."""

    cores: tuple[int, ...]
    gpus: tuple[str, ...] = ()
    waited_s: float = 0.0
    _fds: list[int] = field(default_factory=list, repr=False)

    def env(self, world_size: int) -> dict[str, str]:
        """What the trial's processes need to stay inside the lease (GPUs; threads unless the user set them)."""
        out: dict[str, str] = {}
        if "OMP_NUM_THREADS" not in os.environ:
            out["OMP_NUM_THREADS"] = str(max(1, len(self.cores) // max(1, world_size)))
        if self.gpus:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return out

    def pin(self, pid: int = 0) -> None:
        """Bind ``pid`` (0: this process) to the leased cores; processes it starts later inherit that."""
        os.sched_setaffinity(pid, self.cores)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor drops the flock

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def borrowed(self) -> Lease:
        """The same cores and GPUs for a run that shares this lease: its release leaves this one held."""
        return Lease(self.cores, self.gpus)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _say(message: str) -> None:
    print(f"autotune: {message}", file=sys.stderr, flush=True)


class LeaseBoard:
    """This machine's cores and GPUs and the folder of their lock files.

    Args:
        folder: the lease folder (default ``$AUTOTUNE_LEASE_DIR`` or ``<tmp>/autotune-leases``).
        cores: the cores trials may use (default: this process's CPU affinity).
        gpus: the GPUs trials may use (default: :func:`visible_gpus`, looked up on first GPU request).
        notify: told once per wait that a trial waits for a lease.
    """

    def __init__(
        self,
        folder: Path | None = None,
        *,
        cores: Sequence[int] | None = None,
        gpus: Sequence[str] | None = None,
        notify: Callable[[str], None] = _say,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.folder = folder or default_lease_dir()
        self.cores = tuple(sorted(cores if cores is not None else os.sched_getaffinity(0)))
        self._gpus = tuple(gpus) if gpus is not None else None
        self.notify = notify
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep

    @property
    def gpus(self) -> tuple[str, ...]:
        if self._gpus is None:
            self._gpus = tuple(visible_gpus())
        return self._gpus

    def request(self, world_size: int, device: str) -> Request:
        return request_for(world_size, device, len(self.cores), len(self.gpus) if device == "cuda" else 0)

    def acquire(self, request: Request, *, timeout_s: float | None = None, what: str = "a trial") -> Lease:
        """Hold ``request``'s cores and GPUs, waiting while other trials on this machine hold them."""
        if request.gpus > len(self.gpus):
            raise LaunchError(
                f"{what} needs {request.gpus} GPUs, this machine shows {len(self.gpus)} "
                "(CUDA_VISIBLE_DEVICES); lower world_size"
            )
        self._ensure_folder()
        started = self.clock()
        told = False
        while True:
            with self._allocating(started, timeout_s, what):
                lease = self._try(request)
            if lease is not None:
                lease.waited_s = self.clock() - started
                return lease
            if not told:
                self.notify(
                    f"{what} waits for {_describe(request)}: another trial on this machine holds them "
                    f"(leases in {self.folder})"
                )
                told = True
            self._check_deadline(started, timeout_s, what, request)
            self.sleep(self.poll_s)

    # -- internals -------------------------------------------------------------------------------------
    def _ensure_folder(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.folder.stat().st_uid == os.getuid():
                # Shared by every user's tuners, like /tmp: anyone may add a lock file, no one remove another's.
                with contextlib.suppress(OSError):
                    os.chmod(self.folder, 0o1777)
        except OSError as e:
            raise LaunchError(f"cannot use the lease folder {self.folder}: {e}; set {LEASE_DIR_ENV}") from None

    def _open(self, name: str) -> int:
        path = self.folder / name
        try:
            # Read-only is enough for flock, and works on a lock file another user created.
            return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise LaunchError(f"cannot open the lease file {path}: {e}; set {LEASE_DIR_ENV}") from None

    def _take(self, name: str) -> int | None:
        fd = self._open(name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise LaunchError(f"cannot lock {self.folder / name}: {e}") from None
        return fd

    @contextlib.contextmanager
    def _allocating(self, started: float, timeout_s: float | None, what: str) -> Iterator[None]:
        """The allocation lock: held for the few microseconds of one all-or-nothing pick."""
        while (fd := self._take("alloc.lock")) is None:
            self._check_deadline(started, timeout_s, what, None)
            self.sleep(0.01)
        try:
            yield
        finally:
            os.close(fd)

    def _try(self, request: Request) -> Lease | None:
        fds: list[int] = []
        cores: list[int] = []
        gpus: list[str] = []
        try:
            for core in self.cores:
                if len(cores) == request.cores:
                    break
                if (fd := self._take(f"cpu{core}.lock")) is not None:
                    fds.append(fd)
                    cores.append(core)
            for gpu in self.gpus if request.gpus else ():
                if len(gpus) == request.gpus:
                    break
                if (fd := self._take(f"gpu-{_safe(gpu)}.lock")) is not None:
                    fds.append(fd)
                    gpus.append(gpu)
        except BaseException:
            Lease(tuple(cores), _fds=fds).release()
            raise
        lease = Lease(tuple(cores), tuple(gpus), _fds=fds)
        if len(cores) < request.cores or len(gpus) < request.gpus:
            lease.release()
            return None
        return lease

    def _check_deadline(self, started: float, timeout_s: float | None, what: str, request: Request | None) -> None:
        if timeout_s is not None and self.clock() - started > timeout_s:
            needed = _describe(request) if request else "the lease folder"
            raise LaunchError(
                f"{what} waited {timeout_s:g} s for {needed} held by other trials on this machine; "
                f"stop them or lower world_size"
            )


def _describe(request: Request) -> str:
    text = f"{request.cores} CPU core{'s' if request.cores != 1 else ''}"
    if request.gpus:
        text += f" and {request.gpus} GPU{'s' if request.gpus != 1 else ''}"
    return text


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
