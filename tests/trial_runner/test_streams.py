"""A workload whose dataset is a stream (an IterableDataset, no len()): every sample once per pass across the
ranks and their DataLoader workers, in real trials (real ranks, real workers) and in a real study."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import Launcher, LocalLauncher, TrialPlan, TrialResult, WarmLauncher, run_trial
from autotune.trial_runner._data import StreamShare
from autotune.workload import is_stream
from tests._cli import autotune
from tests.trial_runner.stream_workload import Numbers, ShardedNumbers

HERE = Path(__file__).parent
N = 64  # numbers in the stream: 2 ranks x 2 workers x 4 batches of 4, so that a pass leaves nothing over


def _run(
    folder: Path,
    launcher: Launcher,
    kind: str,
    *,
    world_size: int = 2,
    num_workers: int = 2,
    n: int = N,
    max_steps: int = 16,
    samples: int | None = None,
    evaluate: bool = False,
) -> TrialResult:
    config = TrialConfig.create(
        base_lr=1e-3, base_batch_size=4, batch_size=4, world_size=world_size, num_workers=num_workers
    )
    plan = TrialPlan(
        config=config,
        entrypoint="stream_workload.py:build",
        args={"record_dir": str(folder), "kind": kind, "n": n},
        base_dir=str(HERE),
        evaluate=evaluate,
        limits=TrialLimits(
            warmup="fixed", warmup_steps=2, max_steps=max_steps, samples=samples, max_seconds=90, hang_seconds=30
        ),
    )
    return run_trial(plan, folder / "trial", launcher)


def _seen(folder: Path, world_size: int) -> list[list[list[int]]]:
    """Per rank, the numbers of each batch it trained on, in order."""
    return [
        [json.loads(line) for line in (folder / "seen" / f"rank{r}.jsonl").read_text().splitlines()]
        for r in range(world_size)
    ]


def _passes(seen: list[list[list[int]]], per_pass: int) -> list[list[int]]:
    """The numbers all ranks trained on in each pass (``per_pass`` batches of each rank), sorted."""
    steps = len(seen[0])
    return [
        sorted(v for rank in seen for batch in rank[start : start + per_pass] for v in batch)
        for start in range(0, steps, per_pass)
    ]


def _write_parquet(folder: Path, files: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "parquet").mkdir(parents=True)
    per = N // files
    for f in range(files):
        pq.write_table(pa.table({"x": list(range(f * per, (f + 1) * per))}), folder / "parquet" / f"part{f}.parquet")


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "launcher"), [("plain", "warm"), ("sharded", "warm"), ("plain", "torchrun")])
def test_two_ranks_two_workers_see_each_number_once_per_pass(
    tmp_path: Path, warm_launcher: WarmLauncher, kind: str, launcher: str
) -> None:
    result = _run(tmp_path, warm_launcher if launcher == "warm" else LocalLauncher(), kind, evaluate=True)
    assert result.outcome.value == "complete", result.reason
    seen = _seen(tmp_path, 2)
    assert [len(rank) for rank in seen] == [16, 16]  # max_steps: 16 steps, each rank one batch a step
    # a pass is 8 batches of each rank (2 workers x 4 batches): twice over, each number once
    assert _passes(seen, 8) == [list(range(N)), list(range(N))]
    # the held-out stream (the same numbers, in each rank's share, without workers): each number once
    assert result.eval_loss == pytest.approx((N - 1) / 2)
    applied = json.loads((tmp_path / "trial" / "applied.json").read_text())["dataloader"]
    assert applied["num_workers"] == 2 and applied["sampler"] is None
    assert applied["split"] == (
        "StreamShare: shard(num_shards, index)" if kind == "sharded" else "StreamShare: every P-th item"
    )


@pytest.mark.slow
def test_a_hugging_face_stream_over_parquet_files_is_split_by_rank_and_worker(
    tmp_path: Path, warm_launcher: WarmLauncher
) -> None:
    _write_parquet(tmp_path, files=4)
    result = _run(tmp_path, warm_launcher, "hf", evaluate=True)
    assert result.outcome.value == "complete", result.reason
    seen = _seen(tmp_path, 2)
    assert _passes(seen, 8) == [list(range(N)), list(range(N))]
    assert result.eval_loss == pytest.approx((N - 1) / 2)
    applied = json.loads((tmp_path / "trial" / "applied.json").read_text())["dataloader"]
    assert applied["split"] == "datasets.distributed.split_dataset_by_node"


@pytest.mark.slow
def test_the_samples_limit_ends_a_stream_trial(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, "plain", world_size=1, num_workers=0, max_steps=100, samples=40)
    assert result.outcome.value == "complete", result.reason
    (seen,) = _seen(tmp_path, 1)
    assert len(seen) == 10  # 40 samples in batches of 4
    assert [v for batch in seen for v in batch] == list(range(40))  # one rank, no worker: the stream in order


def test_a_stream_too_short_for_one_batch_is_a_one_line_crash(tmp_path: Path, warm_launcher: WarmLauncher) -> None:
    result = _run(tmp_path, warm_launcher, "plain", world_size=1, num_workers=0, n=3)
    assert result.outcome.value == "crashed"
    assert result.reason.startswith(
        "rank 0: DatasetTooSmall: the stream gave rank 0 no full batch of 4 in a whole pass (it is split over "
        "1 rank(s) x 1 DataLoader worker(s), each batching its own share); use a smaller batch_size or fewer "
        "num_workers, or a longer stream"
    ), result.reason
    # it depends on the configuration (the batch, the workers, the ranks): never a broken workload
    from autotune.tuner import find_broken
    from tests.test_broken_workload import trial

    assert find_broken([trial(i, reason=result.reason, lines=[]) for i in range(3)]) is None


@pytest.mark.parametrize("stream", [Numbers(24), ShardedNumbers(24)], ids=["plain", "sharded"])
def test_stream_shares_cover_the_stream_once_over_ranks_and_real_workers(stream: Any) -> None:
    values: list[int] = []
    for rank in range(3):
        loader = DataLoader(StreamShare(stream, rank, 3), batch_size=None, num_workers=2)
        values.extend(int(t.item()) for t in loader)
    assert sorted(values) == list(range(24))


def test_a_pass_is_an_epoch_for_the_stream() -> None:
    stream = Numbers(4)
    share = StreamShare(stream, 0, 1)
    for _ in range(3):
        list(share)
    assert stream.epochs == [0, 1, 2]


@pytest.mark.slow  # importing datasets takes seconds
def test_what_is_a_stream(tmp_path: Path) -> None:
    assert is_stream(Numbers(2)) and not is_stream(torch.utils.data.TensorDataset(torch.zeros(2)))
    _write_parquet(tmp_path, files=2)
    from datasets import load_dataset

    files = [str(p) for p in sorted((tmp_path / "parquet").iterdir())]
    assert is_stream(load_dataset("parquet", data_files=files, split="train", streaming=True))
    assert not is_stream(load_dataset("parquet", data_files=files, split="train"))  # map-style: indexed


@pytest.mark.slow
def test_a_study_trains_on_a_hugging_face_stream(tmp_path: Path) -> None:
    _write_parquet(tmp_path, files=4)
    (tmp_path / "study.yaml").write_text(
        "name: hf-stream\n"
        f"workload: {{entrypoint: {HERE / 'stream_workload.py'}:build, args: {{record_dir: {tmp_path}, kind: hf}}}}\n"
        "search_space: {num_workers: {choices: [0, 2]}, world_size: {choices: [1, 2]}}\n"
        "trial: {warmup: fixed, warmup_steps: 2, max_steps: 8, max_seconds: 60}\n"
        "budget: {n_trials: 3}\nconfirm: {top_k: 0}\n"
    )
    validate = autotune("validate", "study.yaml", cwd=tmp_path)  # in this process: the CLI, not its start
    assert validate.exit_code == 0, validate.stdout + validate.stderr
    assert "a stream" in " ".join(validate.stdout.split())
    out = autotune("run", "study.yaml", cwd=tmp_path)  # in this process: the CLI, not its start
    assert out.exit_code == 0, out.stdout + out.stderr
    best = autotune("best", "study.yaml", "--format", "json", cwd=tmp_path)  # in this process: the CLI, not its start
    assert best.exit_code == 0, best.stderr
    assert json.loads(best.stdout)["config"]["num_workers"] in (0, 2)
    import optuna

    study = optuna.load_study(study_name="hf-stream", storage=f"sqlite:///{tmp_path / 'hf-stream.db'}")
    outcomes = [t.user_attrs["outcome"] for t in study.trials]
    assert len(outcomes) == 3 and set(outcomes) <= {"complete", "pruned"}, outcomes  # each one trained


@pytest.mark.slow  # importing datasets takes seconds
def test_each_pass_of_a_shuffled_hugging_face_stream_is_a_new_epoch(tmp_path: Path) -> None:
    from datasets import load_dataset

    from autotune.trial_runner._data import train_data

    _write_parquet(tmp_path, files=4)
    files = [str(p) for p in sorted((tmp_path / "parquet").iterdir())]
    stream = load_dataset("parquet", data_files=files, split="train", streaming=True).shuffle(seed=1, buffer_size=16)
    config = TrialConfig.create(base_lr=1e-3, base_batch_size=4, batch_size=4)
    data = train_data(stream, config, rank=1, world_size=2, seed=0, collate_fn=None)
    batches = data.batches()
    passes = [[int(v) for _ in range(8) for v in next(batches)["x"]] for _ in range(2)]  # 32 of 64 a pass
    assert sorted(passes[0]) == sorted(passes[1])  # this rank's share: the same numbers
    assert passes[0] != passes[1]  # in another order: the split stream's epoch moved
