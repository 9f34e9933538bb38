"""Every private name of torch that autotune reaches, in one place.

Activation checkpointing applied by module type lives only in
``torch.distributed.algorithms._checkpoint.checkpoint_wrapper`` (what torchtitan and Lightning use), and a
process group's timeout can be changed after start-up only through ``distributed_c10d._set_pg_timeout``.
torch is imported when a function is called, not with this module: the tuner and the CLI import autotune
without paying for torch. tests/test_compat.py fails naming a name a new torch moved (:func:`missing`).
"""

from __future__ import annotations

import datetime
import importlib
from typing import Any, NamedTuple

CHECKPOINT_MODULE = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"
CHECKPOINT_NAMES = ("CheckpointImpl", "CheckpointWrapper", "apply_activation_checkpointing", "checkpoint_wrapper")


class Checkpointing(NamedTuple):
    """torch's activation-checkpointing wrappers (:data:`CHECKPOINT_MODULE`)."""

    CheckpointImpl: Any
    CheckpointWrapper: type
    apply_activation_checkpointing: Any
    checkpoint_wrapper: Any


def checkpointing() -> Checkpointing:
    """torch's activation-checkpointing wrappers."""
    module = importlib.import_module(CHECKPOINT_MODULE)
    return Checkpointing(*(getattr(module, name) for name in CHECKPOINT_NAMES))


def set_process_group_timeout(timeout: datetime.timedelta) -> None:
    """Change the default process group's collective timeout after start-up (``_set_pg_timeout``)."""
    import torch.distributed as dist

    dist.distributed_c10d._set_pg_timeout(timeout)


PRELOADED = ("torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel", "torch.utils.data")


def preload() -> None:
    """Import what every rank needs (:data:`PRELOADED`, torch._dynamo among them: 2-4 s of a cold start),
    without running any torch operation."""
    for name in PRELOADED:
        importlib.import_module(name)


def dataloader_worker_failure() -> RuntimeError | None:
    """The error of a DataLoader worker of this process that died (``torch._C._error_if_any_worker_fails``,
    what the DataLoader itself checks), or None while every worker lives."""
    import torch

    try:
        torch._C._error_if_any_worker_fails()
    except RuntimeError as e:
        return e
    return None


def missing() -> list[str]:
    """Every private name above that this torch lacks, as ``module.name`` (empty when all are there)."""
    gone: list[str] = []
    try:
        module = importlib.import_module(CHECKPOINT_MODULE)
    except ImportError:
        gone.append(CHECKPOINT_MODULE)
    else:
        gone += [f"{CHECKPOINT_MODULE}.{n}" for n in CHECKPOINT_NAMES if not hasattr(module, n)]
    import torch.distributed.distributed_c10d as c10d

    if not hasattr(c10d, "_set_pg_timeout"):
        gone.append("torch.distributed.distributed_c10d._set_pg_timeout")
    import torch

    if not hasattr(torch._C, "_error_if_any_worker_fails"):
        gone.append("torch._C._error_if_any_worker_fails")
    try:
        importlib.import_module("torch._dynamo")
    except ImportError:
        gone.append("torch._dynamo")
    return gone
