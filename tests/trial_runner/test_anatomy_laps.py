"""StepLaps' exposed synchronisation on the CPU, with the clock's waits standing in for the hook's work and for
the all-reduces still under way: each comm hook's own time counts, and so does what the backward takes after
the last hook returned; the computation between hooks does not. And what that relies on: DDP's backward
returns only once every bucket's all-reduce is done."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from autotune.trial_runner._anatomy import BUBBLE, FORWARD_BACKWARD, SYNC, TP_COMM, StepLaps


def _backward(laps: StepLaps) -> None:
    """Two buckets: 20 ms of computation, a hook taking 10 ms, 30 ms of computation, a hook taking 10 ms, then
    40 ms waiting for the all-reduces."""
    start = laps.mark()
    for _ in range(2):
        time.sleep(0.02)  # computation (the second time: 30 ms in all, below)
        laps.bucket_launched()
        time.sleep(0.01)  # the hook's division and launch
        laps.bucket_hooked()
    time.sleep(0.04)  # waiting on every bucket's all-reduce
    end = laps.lap(FORWARD_BACKWARD, start)
    laps.backward_done(end)


def test_the_hooks_and_the_wait_after_the_last_are_exposed() -> None:
    laps = StepLaps(torch.device("cpu"), sync=True)
    _backward(laps)
    parts = laps.take()
    # exposed: 2 x 10 ms of hooks + 40 ms of waiting; the 40 ms of computation stays in forward/backward
    assert parts[SYNC] >= 0.06
    assert parts[FORWARD_BACKWARD] >= 0.04
    assert parts[SYNC] + parts[FORWARD_BACKWARD] >= 0.10  # the whole backward, each part once
    assert laps.allreduce_calls == 2


class _Chunks:
    """A pipeline's chunk timer standing in for the stages': ``computing`` seconds computed since the last take."""

    def __init__(self, computing: float) -> None:
        self.computing = computing

    def take(self) -> float:
        return self.computing


def test_under_a_pipeline_the_parts_never_add_up_to_more_than_the_laps() -> None:
    """On a busy machine a tensor-parallel collective's lap can outlast the stages' timed chunks (CI read a step's
    parts 0.3% over the step): the tp part is what the bubble leaves of the laps, and the forward/backward 0."""
    laps = StepLaps(torch.device("cpu"), sync=False, pipeline=_Chunks(0.010), tp=True)
    start = laps.mark()
    time.sleep(0.05)
    lap = laps.lap(FORWARD_BACKWARD, start) - start
    laps.totals[TP_COMM] += 0.045  # tp collectives lapped inside it: 35 ms more than the chunks computed
    parts = laps.take()
    assert parts[BUBBLE] == pytest.approx(lap - 0.010)  # the lap less the chunks
    assert parts[TP_COMM] == pytest.approx(0.010) and parts[FORWARD_BACKWARD] == 0.0  # what the bubble left
    assert sum(parts) == pytest.approx(lap)  # each moment of the lap counted once


def test_off_it_reads_no_clock_but_still_counts_the_buckets() -> None:
    laps = StepLaps(torch.device("cpu"), sync=True, on=False)
    _backward(laps)
    assert laps.take() == [0.0] * 6 and laps.allreduce_calls == 2


def _rank(rank: int, store: str, out: str) -> None:
    import json

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    model = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(1 << 18)) for _ in range(8))  # 8 x 1 MB

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ps = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sum(((p * x).sum() for p in self.ps), torch.zeros(()))

    ddp = torch.nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=1)
    futures: list[torch.futures.Future[torch.Tensor]] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]
        futures.append(default_hooks.allreduce_hook(state, bucket))
        return futures[-1]

    ddp.register_comm_hook(None, hook)
    done = []
    for _ in range(3):  # the first step's single bucket, then DDP's rebuilt buckets
        futures.clear()
        for p in model:
            p.grad = None
        ddp(torch.full((1,), float(rank + 1))).backward()
        done.append([f.done() for f in futures])
    averaged = all(float(p.grad[0]) == 1.5 for p in model)  # (1 + 2) / 2 on both ranks
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"done": done, "averaged": averaged}, f)
    dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_backward_returns_once_every_buckets_all_reduce_is_done(tmp_path: Path) -> None:
    # what the exposed sync relies on: backward() waits for the earlier buckets' all-reduces too
    import json

    import torch.multiprocessing as mp

    out = tmp_path / "out.json"
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(out)), nprocs=2)
    result = json.loads(out.read_text())
    assert result["averaged"]
    assert result["done"][0] == [True] and len(result["done"][-1]) == 8 and all(result["done"][-1]), result
