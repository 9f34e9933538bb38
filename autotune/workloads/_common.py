"""What the reference workloads share: checking their size arguments, seeded models, batches on the device,
and the cache folder where the file-reading workloads write their files once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from autotune.errors import WorkloadError

M = TypeVar("M", bound=nn.Module)


def check_sizes(workload: str, sizes: Mapping[str, Any], minimums: Mapping[str, int]) -> None:
    """Every one of ``sizes`` is an integer at least its minimum (1 unless ``minimums`` names another)."""
    for name, value in sizes.items():
        minimum = minimums.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise WorkloadError(f"{workload}: {name} must be an integer >= {minimum}, got {value!r}")


def seeded_model(seed: int, make: Callable[..., M], *args: Any) -> M:
    """``make(*args)`` with its initial weights drawn from ``seed``: the same in every trial, and the
    global RNG left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make(*args)


def batch_on(model: nn.Module, batch: Iterable[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The tensors of ``batch`` on the device of ``model``'s parameters."""
    device = next(model.parameters()).device
    return tuple(t.to(device, non_blocking=True) for t in batch)


def cache_folder(kind: str, key: Mapping[str, Any], root: str | None = None) -> Path:
    """The folder of one set of generated files: ``<root>/<kind>-<hash of key>``.

    ``root`` defaults to the user's cache, ``$XDG_CACHE_HOME/autotune/workloads`` (``~/.cache/...`` when
    the variable is unset); a relative ``root`` is taken from the working directory.
    """
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(base) / "autotune" / "workloads"
    else:
        folder = Path(root).expanduser()
    digest = hashlib.sha1(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:12]
    return folder.resolve() / f"{kind}-{digest}"


def write_once(folder: Path, write: Callable[[Path], None]) -> Path:
    """``folder``, made by ``write(tmp)`` into a temporary sibling renamed into place unless it exists.

    Ranks, DataLoader workers and ``validate`` may build the same files at once: each writes its own
    temporary folder, the first rename wins and the others' copies are removed, so a reader never sees a
    half-written folder.
    """
    if folder.is_dir():
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as e:
        raise WorkloadError(f"cannot write the workload's files under {folder.parent}: {e}; pass cache_dir=") from e
    try:
        write(tmp)
        try:
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
