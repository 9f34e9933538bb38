"""Core and GPU leases: trials running at the same time on one machine never share what they measure on."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from autotune.errors import LaunchError, UsageError
from autotune.trial_runner import Outcome, TrialResult, WarmLauncher, run_trial
from autotune.trial_runner._lease import LeaseBoard, Request, request_for

from .test_launchers import plan


def board(folder: Path, said: list[str] | None = None, cores: tuple[int, ...] = (0, 1),
          gpus: tuple[str, ...] = ()) -> LeaseBoard:
    return LeaseBoard(folder, cores=cores, gpus=gpus, notify=(said if said is not None else []).append, poll_s=0.02)


def test_a_held_core_is_not_given_twice_and_the_waiter_says_so(tmp_path: Path) -> None:
    said: list[str] = []
    first = board(tmp_path).acquire(Request(2))
    assert first.cores == (0, 1)
    with pytest.raises(LaunchError, match=r"waited 0.3 s for 1 CPU core held by other trials"):
        board(tmp_path, said).acquire(Request(1), timeout_s=0.3, what="trial trial-0007")
    assert said == [f"trial trial-0007 waits for 1 CPU core: another trial on this machine holds them "
                    f"(leases in {tmp_path})"]
    first.release()
    second = board(tmp_path).acquire(Request(1), timeout_s=0.3)
    assert second.cores == (0,) and second.waited_s < 0.3


def test_leases_are_disjoint_and_all_or_nothing(tmp_path: Path) -> None:
    one = board(tmp_path).acquire(Request(1))
    with pytest.raises(LaunchError):
        board(tmp_path).acquire(Request(2), timeout_s=0.2)  # needs both: must not keep core 1 meanwhile
    other = board(tmp_path).acquire(Request(1), timeout_s=0.2)
    assert {one.cores, other.cores} == {(0,), (1,)}


def test_a_waiting_trial_starts_when_the_lease_is_released(tmp_path: Path) -> None:
    held = board(tmp_path).acquire(Request(2))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(board(tmp_path).acquire, Request(2), timeout_s=10)
        time.sleep(0.3)
        assert not waiting.done()
        held.release()
        lease = waiting.result(timeout=5)
    assert lease.cores == (0, 1) and lease.waited_s >= 0.3


def test_gpus_are_leased_one_per_rank(tmp_path: Path) -> None:
    request = request_for(world_size=1, device="cuda", n_cores=8, n_gpus=2)
    assert request == Request(cores=4, gpus=1)  # its share of the cores
    first = board(tmp_path, cores=tuple(range(8)), gpus=("0", "1")).acquire(request)
    second = board(tmp_path, cores=tuple(range(8)), gpus=("0", "1")).acquire(request, timeout_s=0.2)
    assert {first.gpus, second.gpus} == {("0",), ("1",)}
    assert set(first.cores).isdisjoint(second.cores)
    assert second.env(1)["CUDA_VISIBLE_DEVICES"] == second.gpus[0]
    with pytest.raises(LaunchError, match="needs 3 GPUs, this machine shows 2"):
        board(tmp_path, gpus=("0", "1")).acquire(Request(1, gpus=3))


def test_what_a_trial_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_CORES_PER_RANK", raising=False)
    assert request_for(2, "cpu", n_cores=16, n_gpus=0) == Request(16)  # every core: measured alone
    monkeypatch.setenv("AUTOTUNE_CORES_PER_RANK", "3")
    assert request_for(2, "cpu", n_cores=16, n_gpus=0) == Request(6)
    assert request_for(8, "cpu", n_cores=16, n_gpus=0) == Request(16)  # never more than the machine
    monkeypatch.setenv("AUTOTUNE_CORES_PER_RANK", "two")
    with pytest.raises(UsageError, match="AUTOTUNE_CORES_PER_RANK='two' is not a positive integer"):
        request_for(1, "cpu", n_cores=2, n_gpus=0)


HOLDER = """
import sys, time
from pathlib import Path
from autotune.trial_runner._lease import LeaseBoard, Request
lease = LeaseBoard(Path(sys.argv[1]), cores=(0, 1)).acquire(Request(2))
print("held", flush=True)
time.sleep(600)
"""


def test_a_lease_dies_with_its_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LaunchError):
            board(tmp_path).acquire(Request(1), timeout_s=0.2)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert board(tmp_path).acquire(Request(2), timeout_s=2).cores == (0, 1)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)


def _affinity_at_first_window(trial_dir: Path, seen: dict[str, set[int]]) -> object:
    def on_window(window: object) -> bool:
        pid = int((trial_dir / "rank0.pid").read_text())
        seen[trial_dir.name] = set(psutil.Process(pid).cpu_affinity())
        return True  # prune: the trial has shown what it runs on

    return on_window


@pytest.mark.slow
@pytest.mark.own_zygote  # two launchers at once, each pinning its zygote to its cores
def test_two_trials_on_one_machine_run_one_after_the_other_by_default(tmp_path: Path) -> None:
    said: list[str] = []
    launchers = [WarmLauncher(leases=board(tmp_path / "leases", said, cores=tuple(sorted(os.sched_getaffinity(0)))))
                 for _ in range(2)]
    ended: dict[str, float] = {}

    def one(i: int) -> TrialResult:
        trial_dir = tmp_path / f"t{i}"
        result = run_trial(plan(limits={"max_steps": 8}), trial_dir, launchers[i])
        ended[trial_dir.name] = time.time()
        return result

    results = _side_by_side(one, launchers)
    assert [r.outcome for r in results] == [Outcome.COMPLETE, Outcome.COMPLETE]
    assert len(said) == 1 and "waits for" in said[0]
    waiter = said[0].split()[1]  # "trial t1 waits for ..."
    first = "t0" if waiter == "t1" else "t1"
    started = json.loads((tmp_path / waiter / "config.json").read_text())["launched_at"]
    assert started >= ended[first] - 0.5  # the waiter began once the first trial was gone


@pytest.mark.own_zygote  # two launchers at once, each pinning its zygote to its cores
def test_with_cores_per_rank_trials_run_side_by_side_on_their_own_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cores = tuple(sorted(os.sched_getaffinity(0)))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    monkeypatch.setenv("AUTOTUNE_CORES_PER_RANK", "1")
    said: list[str] = []
    launchers = [WarmLauncher(leases=board(tmp_path / "leases", said, cores=cores)) for _ in range(2)]
    seen: dict[str, set[int]] = {}

    def one(i: int) -> TrialResult:
        trial_dir = tmp_path / f"t{i}"
        return run_trial(plan("slow", at_step=1, limits={"max_steps": 100000}), trial_dir, launchers[i],
                         on_window=_affinity_at_first_window(trial_dir, seen))

    results = _side_by_side(one, launchers)
    assert [r.outcome for r in results] == [Outcome.PRUNED, Outcome.PRUNED]
    assert said == []  # nobody waited
    assert len(seen["t0"]) == len(seen["t1"]) == 1 and seen["t0"] != seen["t1"]


def _side_by_side(one: Callable[[int], TrialResult], launchers: list[WarmLauncher]) -> list[TrialResult]:
    """``one(0)`` and ``one(1)`` at the same time; the launchers are closed after."""
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            return [f.result(timeout=120) for f in [pool.submit(one, i) for i in range(2)]]
    finally:
        for launcher in launchers:
            launcher.close()
