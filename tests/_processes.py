"""Finding the processes a test left behind: those of a trial folder, or those the tuner started in a folder."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil


def fd_targets(pid: int) -> list[str]:
    """What the open file descriptors of ``pid`` point at (paths, ``socket:[...]``, ``pipe:[...]``)."""
    folder = f"/proc/{pid}/fd"
    targets = []
    try:
        names = os.listdir(folder)
    except OSError:
        return targets
    for name in names:
        try:
            targets.append(os.readlink(f"{folder}/{name}"))
        except OSError:
            continue
    return targets


def find_processes(match: Callable[[psutil.Process, str, str], bool], exclude: tuple[int, ...] = ()) -> list[str]:
    """``"pid cmdline"`` of every live process for which ``match(proc, cwd, cmdline)`` holds (``proc.info`` also
    holds its ``create_time``)."""
    found = []
    for proc in psutil.process_iter(["pid", "cwd", "cmdline", "status", "create_time"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid in exclude:
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            if match(proc, proc.info["cwd"] or "", cmdline):
                found.append(f"{proc.pid} {cmdline}")
        except psutil.Error:
            continue
    return found


def leftovers(trial_dir: Path) -> list[str]:
    """Live processes of a trial: its folder in their command line (torchrun, cold ranks) or among their
    open files (ranks forked by the warm launcher and their DataLoader workers hold rank<N>.log)."""
    needle = str(trial_dir)
    return find_processes(
        lambda proc, _cwd, cmdline: needle in cmdline or any(t.startswith(needle) for t in fd_targets(proc.pid)),
        exclude=(os.getpid(),),
    )


def zygotes(recursive: bool = False) -> set[int]:
    """The live warm zygotes among this process's children (with ``recursive``, its descendants)."""
    found = set()
    for proc in psutil.Process().children(recursive=recursive):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "autotune.trial_runner._zygote" in " ".join(proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def processes_in(folder: Path, exclude: tuple[int, ...] = ()) -> list[str]:
    """Processes started from ``folder`` (the tuner runs there, so its launcher, warm zygote, torchrun, ranks
    and DataLoader workers inherit it as their working directory) or naming it on their command line."""
    needle = str(folder)
    return find_processes(
        lambda _proc, cwd, cmdline: cwd == needle or cwd.startswith(f"{needle}/") or needle in cmdline, exclude
    )


def wait_until_none(find: Callable[[], list[str]], within_s: float) -> list[str]:
    """``find()`` once it finds nothing, or what it still finds after ``within_s``."""
    deadline = time.monotonic() + within_s
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_no_leftovers(trial_dir: Path, within_s: float = 5.0) -> list[str]:
    """:func:`leftovers` of ``trial_dir`` once none is left, or what is still alive after ``within_s``."""
    return wait_until_none(lambda: leftovers(trial_dir), within_s)


def wait_none_in(folder: Path, within_s: float = 10.0) -> list[str]:
    """:func:`processes_in` ``folder`` once none is left, or what is still alive after ``within_s``."""
    return wait_until_none(lambda: processes_in(folder), within_s)



def _family_processes(root: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(root)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def process_family(root: int) -> list[int]:
    """``root`` and every process descended from it (by parent pid) at this moment."""
    return [p.pid for p in _family_processes(root)]


def family_cpu_s(root: int) -> float:
    """The CPU seconds of ``root`` and its descendants: the living ones' own and what they reaped of theirs (a
    process that left the family, such as a daemon reparented to init, is not counted)."""
    total = 0.0
    for process in _family_processes(root):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:  # ended meanwhile
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total
