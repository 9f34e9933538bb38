"""The machine's load while a trial ran: how much of the trial's cores (and GPUs) other processes used.

A trial's throughput is only as good as the machine was quiet: a second process on its cores makes the
one-rank default collapse. :class:`LoadMeter` reads the busy time of each held core (``/proc/stat``
through ``psutil.cpu_times(percpu=True)``: user, nice, system, irq, softirq and steal) at the trial's
start and end, and subtracts what the trial itself used in between: the tuner process, and the run's
processes (each sampled every poll and kept at the most seen) or, where more, the tuner's reaped
children (a local launcher's torchrun and everything it waited for). What is left, over the held cores'
capacity for the trial's wall time, is ``machine_load``: 0 on a quiet machine, 1 when others used a whole
core's worth per held core (more is possible: steal time). ``busy`` is ``machine_load > BUSY_LOAD``.

On CUDA the GPUs the trial held are asked (``nvidia-smi``, when installed) for compute processes at the
start and end; one that is not the trial's makes the trial busy too (``gpu_other_processes``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

from autotune.trial_runner._base import RunHandle

# A trial is measured on a busy machine when other processes used more than this fraction of its cores.
# A quarter of a core per held core is well above a quiet machine's background (a few percent: daemons,
# the tuner's own storage writes) and well below what one busy-loop beside a rank does (about 1.0).
BUSY_LOAD = 0.25

PROCESSES_EVERY = 10  # every process of the run (the launcher too) is sampled this often; ranks every poll

CpuTimes = Callable[[], Sequence[float]]  # busy seconds of every core, by core number


def busy_seconds_per_core() -> list[float]:
    """Busy (non-idle, non-iowait) CPU seconds of every core since boot, by core number."""
    out = []
    for t in psutil.cpu_times(percpu=True):
        out.append(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
                   + getattr(t, "steal", 0.0))
    return out


def _own_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _tuner_seconds() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's)."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


@dataclass(frozen=True)
class Load:
    """What :class:`LoadMeter` found: ``machine_load`` (None: not measured) and the GPU processes not the
    trial's (None: not asked)."""

    machine_load: float | None
    gpu_other_processes: int | None = None

    @property
    def busy(self) -> bool | None:
        if self.machine_load is None and self.gpu_other_processes is None:
            return None
        return bool((self.machine_load or 0.0) > BUSY_LOAD or (self.gpu_other_processes or 0) > 0)


class LoadMeter:
    """Measures others' use of ``cores`` (and ``gpus``) between :meth:`start` and :meth:`finish`.

    :meth:`sample` is given the trial's live processes every poll; each one's CPU time is kept at the
    largest value seen, so a DataLoader worker that exited still counts (up to its last sample).
    ``cpu_times``, ``clock`` and ``gpu_pids`` are injectable for tests.
    """

    def __init__(
        self,
        cores: Sequence[int],
        gpus: Sequence[str] = (),
        *,
        cpu_times: CpuTimes = busy_seconds_per_core,
        clock: Callable[[], float] = time.monotonic,
        gpu_pids: Callable[[Sequence[str]], set[int] | None] | None = None,
    ) -> None:
        self.cores = tuple(cores)
        self.gpus = tuple(gpus)
        self._cpu_times = cpu_times
        self._clock = clock
        self._gpu_pids = gpu_pids or gpu_compute_pids
        self._own: dict[int, float] = {}
        self._tuner_start = (0.0, 0.0)
        self._busy_start = 0.0
        self._t0 = 0.0
        self._gpu_seen: set[int] = set()
        self._gpu_asked = False

    @classmethod
    def for_handle(cls, handle: RunHandle) -> LoadMeter:
        """A meter of what ``handle`` holds (:meth:`RunHandle.held`); one that measures nothing when the run
        holds nothing known on this machine."""
        held = handle.held()
        return cls(*held) if held is not None else cls(())

    def sample_handle(self, handle: RunHandle, poll: int) -> None:
        """One poll's sample of the run's processes: the ranks and their workers every poll, every process
        of the run (launcher included) every ``PROCESSES_EVERY`` polls."""
        if not self.cores and not self.gpus:
            return
        for procs in handle.rank_processes().values():
            self.sample(procs)
        if poll % PROCESSES_EVERY == 1:
            self.sample(handle.processes())

    def _held_busy(self) -> float:
        times = self._cpu_times()
        return sum(times[c] for c in self.cores if 0 <= c < len(times))

    def start(self) -> None:
        self._t0 = self._clock()
        self._busy_start = self._held_busy()
        self._tuner_start = _tuner_seconds()
        self._ask_gpus()

    def sample(self, procs: Iterable[psutil.Process]) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                seconds = _own_seconds(proc)
                self._own[proc.pid] = max(seconds, self._own.get(proc.pid, 0.0))

    def _ask_gpus(self) -> None:
        if not self.gpus:
            return
        pids = self._gpu_pids(self.gpus)
        if pids is not None:
            self._gpu_asked = True
            self._gpu_seen |= pids

    def finish(self) -> Load:
        """Called once the run's processes are gone (and reaped)."""
        self._ask_gpus()
        wall = self._clock() - self._t0
        gpu_others = None
        if self._gpu_asked:
            gpu_others = len(self._gpu_seen - set(self._own) - {os.getpid()})
        if not self.cores or wall <= 0:
            return Load(None, gpu_others)
        own, children = (now - then for now, then in zip(_tuner_seconds(), self._tuner_start, strict=True))
        others = self._held_busy() - self._busy_start - own - max(children, sum(self._own.values()))
        return Load(round(max(0.0, others / (wall * len(self.cores))), 3), gpu_others)


def gpu_compute_pids(gpus: Sequence[str]) -> set[int] | None:
    """The pids of compute processes on ``gpus`` (indices or UUIDs, as CUDA_VISIBLE_DEVICES names them),
    from ``nvidia-smi``; None when it is not installed or does not answer."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        index = subprocess.run(
            [exe, "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    uuid_of: dict[str, str] = {}
    for line in index.splitlines():
        number, _, uuid = (part.strip() for part in line.partition(","))
        uuid_of[number] = uuid
    wanted = {uuid_of.get(g, g) for g in gpus}
    pids = set()
    for line in out.splitlines():
        uuid, _, pid = (part.strip() for part in line.partition(","))
        if uuid in wanted and pid.isdigit():
            pids.add(int(pid))
    return pids
