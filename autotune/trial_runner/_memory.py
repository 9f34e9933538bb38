"""Measuring a rank's memory: device memory on CUDA, the PSS of a rank's process tree on the CPU."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import psutil
import torch


def tree_memory_mb(procs: list[psutil.Process]) -> float:
    """The memory of a rank and its DataLoader workers, in MB: the sum of their PSS (proportional set
    size: a page shared by k processes counts 1/k in each), so the copy-on-write pages a worker shares
    with its rank are counted once, not once per worker. RSS where PSS cannot be read."""
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            try:
                total += proc.memory_full_info().pss
            except (psutil.AccessDenied, AttributeError):
                total += proc.memory_info().rss
    return total / 2**20


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: max_memory_allocated. CPU: this rank and its DataLoader workers now, as the sum of their PSS
    (a copy-on-write page a worker shares with the rank counts once, not once per worker), or this rank's
    own peak RSS (VmHWM) when that is larger. The caller keeps the maximum over windows."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    procs = [psutil.Process()]
    with contextlib.suppress(psutil.Error):
        procs += psutil.Process().children(recursive=True)
    return max(tree_memory_mb(procs), _hwm_kb(os.getpid()) / 1024)


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak_rss() -> None:
    """Reset this process's peak RSS so it measures this rank only (not what a parent held before fork)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class MemorySampler:
    """A rank's peak memory, read on a thread of its own every ``every_s`` seconds, off the training loop.

    Reading the PSS of a rank's tree takes tens of ms (more with DataLoader workers: one smaps_rollup per
    process). Taken inside the loop it costs the loop that time; left out of the window's time, it handed
    the workers free time to fill their prefetch queue, and the window after each reading ran on batches
    made while nobody was counting — measured on the MLP with 2 workers at batch 256, the first measured
    window read 2,500-3,250 samples/s against ~2,000-2,400 after it, and the pruner compared other trials
    with that figure. On the thread, the reading overlaps training as any background work would, the same in
    short trials and long runs. ``peak`` is the largest reading so far; :meth:`read` reads now, on the
    caller's thread (CUDA: a counter, read by the loop at every boundary; the CPU: at the last boundary,
    after :meth:`stop`). ``log``, when given, gets (the loop's step at the reading, seconds it took)."""

    def __init__(self, device: torch.device, every_s: float, log: list[tuple[int, float]] | None = None) -> None:
        self.device, self.every_s, self.log = device, every_s, log
        self.peak = 0.0
        self.step = 0  # the training loop's step, set by the loop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device.type != "cuda":
            self._thread = threading.Thread(target=self._run, name="autotune-memory", daemon=True)

    def start(self) -> None:
        if self._thread is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=10)

    def read(self) -> float:
        started = time.perf_counter()
        self.peak = max(self.peak, peak_memory_mb(self.device))
        if self.log is not None:
            self.log.append((self.step, time.perf_counter() - started))
        return self.peak

    def _run(self) -> None:
        while True:
            self.read()
            if self._stop.wait(self.every_s):
                return
