"""The workloads that read files: image files decoded in ``__getitem__`` (images) and tokenised shards
streamed through an IterableDataset (text_shards); each writes its files once to a cache folder."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F
from torch.utils.data import DataLoader

from autotune import WorkloadError
from autotune.trial_runner._data import StreamShare
from autotune.workload import Workload, is_stream, load_workload
from autotune.workloads._common import cache_folder, write_once

IMAGES = {"width": 8, "depth": 2, "crop_size": 16, "file_size": 32, "samples": 40, "num_classes": 3, "seed": 3}
SHARDS = {"d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 32, "max_bytes": 40_000, "shard_tokens": 4096}


def images(tmp_path: Path, **overrides: Any) -> Workload:
    return load_workload("autotune.workloads.images:build", {**IMAGES, "cache_dir": str(tmp_path), **overrides})


def shards(tmp_path: Path, **overrides: Any) -> Workload:
    return load_workload("autotune.workloads.text_shards:build", {**SHARDS, "cache_dir": str(tmp_path), **overrides})


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_images_are_files_written_once_then_decoded(tmp_path: Path, image_format: str) -> None:
    workload = images(tmp_path, image_format=image_format)
    train, held_out = workload.dataset(), workload.eval_dataset()  # type: ignore[misc]
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # no temporary copy left
    suffix = ".jpg" if image_format == "jpeg" else ".png"
    files = sorted(folder.glob(f"*{suffix}"))
    assert len(files) == 40 and len(train) == 36 and len(held_out) == 4
    with Image.open(files[0]) as image:
        assert image.format == ("JPEG" if image_format == "jpeg" else "PNG") and image.size == (32, 32)
    written = {p: p.stat().st_mtime_ns for p in files}
    images(tmp_path, image_format=image_format).dataset()  # a second build reads the same files
    assert {p: p.stat().st_mtime_ns for p in files} == written
    x, y = train[5]
    # uint8 pixels from the workers; the loss converts and normalises the batch in the rank
    assert x.shape == (3, 16, 16) and x.dtype == torch.uint8 and y.dtype == torch.int64
    model = workload.model()
    batch = (torch.stack([x, train[6][0]]), torch.stack([y, train[6][1]]))
    normalised = (batch[0].float() / 255 - 0.5) / 0.25
    assert torch.equal(workload.loss(model, batch), F.cross_entropy(model(normalised), batch[1]))
    assert torch.equal(train[5][0], x)  # an item's augmentation comes from (seed, index)
    assert not torch.equal(train[6][0], x)
    assert 0 <= int(y) < 3 and json.loads((folder / "labels.json").read_text())[5] == int(y)
    os.remove(files[0])  # the file is read at each access: a missing one is an error
    with pytest.raises(FileNotFoundError):
        train[0]


def test_the_default_cache_folder_follows_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = cache_folder("images", {"a": 1})
    assert folder.parent == (tmp_path / "xdg" / "autotune" / "workloads").resolve()
    assert folder.name.startswith("images-") and folder != cache_folder("images", {"a": 2})
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_folder("images", {"a": 1}).parent == (Path.home() / ".cache" / "autotune" / "workloads").resolve()


@pytest.mark.slow
def test_the_image_model_learns(tmp_path: Path) -> None:
    workload = images(tmp_path, width=20, depth=3, samples=400)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters(), workload.base_lr)
    losses = []
    for _ in range(2):
        for batch in DataLoader(workload.dataset(), batch_size=32, shuffle=True, drop_last=True):
            loss = workload.loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert np.mean(losses[-3:]) < 0.75 * np.mean(losses[:3]), losses


def test_image_sizes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="images: crop_size must be an integer >= 8"):
        images(tmp_path, crop_size=4)
    with pytest.raises(WorkloadError, match="image_format must be 'jpeg' or 'png'"):
        images(tmp_path, image_format="gif")


def test_text_shards_are_a_stream_of_token_files(tmp_path: Path) -> None:
    workload = shards(tmp_path)
    stream = workload.dataset()
    assert is_stream(stream) and not hasattr(stream, "__len__")
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((folder / "shards.json").read_text())
    assert len(manifest) == 10 and all(m["tokens"] == 4096 for m in manifest[:-1])
    tokens = np.concatenate([np.fromfile(folder / m["file"], dtype=np.uint16) for m in manifest])
    assert tokens.max() < 256 and len(tokens) == 40_000  # byte tokens, stored as uint16
    windows = list(stream)
    assert len(windows) == sum((m["tokens"] - 1) // 32 for m in manifest[:-1])  # the last shard held out
    x, y = windows[0]
    assert x.shape == y.shape == (32,) and x.dtype == torch.int64 and torch.equal(x[1:], y[:-1])
    first_pass = [w[0] for w in windows]
    stream.set_epoch(1)
    second_pass = [w[0] for w in stream]
    assert sorted(map(tuple, first_pass)) == sorted(map(tuple, second_pass))  # the same windows
    assert not all(torch.equal(a, b) for a, b in zip(first_pass, second_pass, strict=True))  # another order


@pytest.mark.slow
def test_text_shards_split_over_ranks_and_real_workers_read_each_window_once(tmp_path: Path) -> None:
    stream = shards(tmp_path).dataset()
    whole = sorted(tuple(x.tolist()) for x, _ in stream)
    parts = []
    for rank in range(2):
        loader = DataLoader(StreamShare(stream, rank, 2), batch_size=None, num_workers=2)
        parts.extend(tuple(x.tolist()) for x, _ in loader)
    assert sorted(parts) == whole


@pytest.mark.slow
def test_text_shards_train(tmp_path: Path) -> None:
    workload = shards(tmp_path)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters(), workload.base_lr)
    losses = []
    for batch in itertools.islice(DataLoader(workload.dataset(), batch_size=16), 40):
        loss = workload.loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.75 * np.mean(losses[:5])


def test_text_shards_need_two_shards(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="at least two are needed"):
        shards(tmp_path, shard_tokens=50_000).dataset()


def test_files_written_at_once_by_two_builders_end_as_one_folder(tmp_path: Path) -> None:
    folder = tmp_path / "data"

    def write(tmp: Path, text: str) -> None:
        (tmp / "f").write_text(text)

    def losing(tmp: Path) -> None:  # another builder finishes first, while this one writes
        write(tmp, "mine")
        write_once(folder, lambda t: write(t, "theirs"))

    assert write_once(folder, losing) == folder
    assert (folder / "f").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # the loser's temporary folder is gone
    assert write_once(folder, lambda t: write(t, "again")) == folder and (folder / "f").read_text() == "theirs"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["images", "text_shards"])
def test_a_real_trial_of_two_ranks_with_workers_trains_on_the_files(tmp_path: Path, name: str) -> None:
    from autotune.search_space import TrialConfig
    from autotune.spec import TrialLimits
    from autotune.trial_runner import TrialPlan, WarmLauncher, run_trial

    args = {**(IMAGES if name == "images" else SHARDS), "cache_dir": str(tmp_path / "cache")}
    built = load_workload(f"autotune.workloads.{name}:build", args)
    built.dataset()  # the files, written once before the ranks read them
    config = TrialConfig.create(
        base_lr=built.base_lr, base_batch_size=built.base_batch_size, batch_size=4, world_size=2, num_workers=1
    )
    plan = TrialPlan(
        config=config,
        entrypoint=f"autotune.workloads.{name}:build",
        args=args,
        base_dir=str(tmp_path),
        limits=TrialLimits(warmup="fixed", warmup_steps=2, max_steps=8, max_seconds=90, hang_seconds=30),
    )
    launcher = WarmLauncher()  # the default launcher: ranks forked from the warm zygote, as a study runs them
    try:
        result = run_trial(plan, tmp_path / "trial", launcher)
    finally:
        launcher.close()
    assert result.outcome.value == "complete", result.reason
    assert result.throughput_samples_s and result.throughput_samples_s > 0
    applied = json.loads((tmp_path / "trial" / "applied.json").read_text())["dataloader"]
    assert applied["sampler"] == ("DistributedSampler" if name == "images" else None)
