"""Process plumbing the launchers, the ranks and the tuner share: dying with the parent, telling a process from
another on its reused pid, and a free local port."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
from pathlib import Path

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def die_with_tuner() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A ``preexec_fn``: the child gets SIGTERM when the tuner (its parent) dies."""
    set_parent_death_signal(signal.SIGTERM)


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since the machine booted (``/proc/PID/stat``, Linux); None
    when it is gone, a zombie, or this is not Linux. Another process on a reused pid started at another tick, and
    unlike a start in epoch seconds (the boot time read from the wall clock, plus these ticks) it does not move
    when the wall clock is stepped (NTP, a VM resumed from a snapshot)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on at ``host`` now (``""``: on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
