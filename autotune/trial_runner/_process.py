"""Process plumbing the launchers and the ranks share: dying with the parent, and a free local port."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def die_with_tuner() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A ``preexec_fn``: the child gets SIGTERM when the tuner (its parent) dies."""
    set_parent_death_signal(signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on at ``host`` now (``""``: on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
