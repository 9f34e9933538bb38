"""Measuring a rank's memory: device memory on CUDA, the PSS of a rank's process tree on the CPU."""

from __future__ import annotations

import contextlib
import os

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
