"""Applying the knobs of a trial's config inside a rank: the rank's process (threads), activation checkpointing,
DDP's arguments, FSDP2 sharding; each writes what it applied, read back from what took it, into applied.json.

A knob's application lives here: one that acts on the whole rank process in :func:`start_rank`, a DDP
argument through the knob table (``ddp_argument=``: :func:`wrap_ddp` passes it and reads it back)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from autotune.compat import torch_private
from autotune.knobs import DDP_ARGUMENTS, ddp_arguments
from autotune.trial_runner._records import AppliedRecord, ThreadsSetting


def start_rank(cfg: Any, local_world_size: int, device_type: str) -> AppliedRecord:
    """Apply the knobs that act on the whole rank process, before anything is built (the intra-op threads), and
    start the rank's applied.json with what they became."""
    threads = apply_threads(cfg.threads_per_rank, local_world_size, cfg.num_workers, device_type)
    return AppliedRecord(
        torch_threads=threads, threads_per_rank=ThreadsSetting(setting=cfg.threads_per_rank, resolved=threads)
    )


# DDP knobs applied.json has a field of its own for (older than ``AppliedRecord.knobs``).
_DDP_FIELDS = {"bucket_cap_mb": "ddp_bucket_bytes_cap", "gradient_as_bucket_view": "ddp_gradient_as_bucket_view",
               "static_graph": "ddp_static_graph"}


def wrap_ddp(model: torch.nn.Module, cfg: Any, device_ids: list[int] | None, applied: AppliedRecord) -> Any:
    """``DistributedDataParallel`` with the configuration's DDP knobs, and in applied.json what the DDP object
    holds of each (its attribute of the knob's name; the bucket as ``bucket_bytes_cap``)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, device_ids=device_ids, **ddp_arguments(cfg))
    applied.ddp_bucket_bytes_cap = ddp.bucket_bytes_cap
    applied.ddp_gradient_as_bucket_view = ddp.gradient_as_bucket_view
    applied.ddp_static_graph = ddp.static_graph
    held = {name: getattr(ddp, name) for name in DDP_ARGUMENTS if name not in _DDP_FIELDS and hasattr(ddp, name)}
    if held:
        applied.knobs = {**(applied.knobs or {}), **held}
    return ddp


def apply_checkpointing(model: torch.nn.Module, types: tuple[type, ...]) -> int:
    """Wrap every module of ``types`` in a non-reentrant activation checkpoint; returns how many."""
    ckpt = torch_private.checkpointing()

    def wrapper(module: torch.nn.Module) -> torch.nn.Module:
        return ckpt.checkpoint_wrapper(module, checkpoint_impl=ckpt.CheckpointImpl.NO_REENTRANT)

    ckpt.apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=wrapper, check_fn=lambda m: isinstance(m, types)
    )
    return sum(isinstance(m, ckpt.CheckpointWrapper) for m in model.modules())


THREAD_WORDS: dict[str, str] = {
    "auto": "the rank's share of the cores less its DataLoader workers",
    "share": "the rank's share of the cores",
    "half": "half the rank's share of the cores",
}
"""What each word of ``threads_per_rank`` resolves to in a rank (:func:`resolve_threads`); the share is the
cores this process may run on divided by the ranks on its machine, so no word runs more intra-op threads
than cores across the machine's ranks. Every count is at least 1."""


def compute_threads(local_world_size: int, num_workers: int) -> int:
    """Intra-op threads per rank on CPU: this rank's share of the cores, less its DataLoader workers
    (each worker runs one thread), so that compute and data loading do not fight over the same cores.
    This is ``threads_per_rank: auto``."""
    return resolve_threads("auto", local_world_size, num_workers)


def resolve_threads(setting: int | str, local_world_size: int, num_workers: int) -> int:
    """The intra-op thread count ``threads_per_rank`` gives a rank with ``local_world_size`` ranks on its machine
    and ``num_workers`` DataLoader workers: a number as it is, a word of :data:`THREAD_WORDS` against the share."""
    if isinstance(setting, int):
        return setting
    share = len(os.sched_getaffinity(0)) // max(1, local_world_size)
    counts = {"auto": share - num_workers, "share": share, "half": share // 2}
    if setting not in counts:
        raise ValueError(f"threads_per_rank: unknown word {setting!r}; give a number or one of {', '.join(counts)}")
    return max(1, counts[setting])


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def apply_threads(setting: int | str, local_world_size: int, num_workers: int, device_type: str) -> int:
    """Set this rank's intra-op threads from ``threads_per_rank``: torch's pool and the OpenMP/MKL variables
    (which the rank's children and compiled kernels read). A number or a word (:func:`resolve_threads`);
    ``auto`` on CUDA leaves torch's default. Returns the thread count in force."""
    threads = None if setting == "auto" and device_type != "cpu" else resolve_threads(
        setting, local_world_size, num_workers)
    if threads is not None:
        torch.set_num_threads(threads)
        for name in THREAD_ENV:
            os.environ[name] = str(threads)
        limit_blas(threads)
    return torch.get_num_threads()


def limit_blas(threads: int) -> None:
    """Give numpy's BLAS (OpenBLAS or MKL, through threadpoolctl) the rank's thread count.

    BLAS reads its thread count once, when numpy is imported. A rank forked from the warm launcher's zygote
    inherits the zygote's count (this machine's cores), so at two ranks each ran two BLAS threads on a
    2-core machine: the MLP dataset's 256-sample probe, two 64x64 matrix products per mixing round, took
    0.25-0.29 s in each rank instead of 0.02-0.03 s (spinning BLAS threads on oversubscribed cores), and so
    would any numpy matrix work in a workload's dataset. A torchrun rank reads OMP_NUM_THREADS at its start
    and gets the same count this way."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


def blas_threads() -> int | None:
    """The thread count of the BLAS numpy loaded (None when threadpoolctl sees none)."""
    from threadpoolctl import threadpool_info

    return max((int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"), default=None)


def shard_model(model: torch.nn.Module, units: tuple[type, ...], cfg: Any, device: torch.device) -> int:
    """FSDP2 over every rank: ``fully_shard`` every module of ``units``, then the root (:func:`shard_units`).
    Returns the number of sharded units, the root included."""
    from torch.distributed.device_mesh import init_device_mesh

    return shard_units([model], units, cfg, init_device_mesh(device.type, (dist.get_world_size(),)))


def shard_units(roots: list[torch.nn.Module], units: tuple[type, ...], cfg: Any, mesh: Any) -> int:
    """FSDP2 over a one-dimensional ``mesh`` (every rank, or a parallel mesh's dp axis): ``fully_shard`` every
    module of ``units`` inside each of ``roots`` (the model, or a pipeline's stages), then each root; amp becomes
    the MixedPrecisionPolicy. ``fsdp`` frees gathered parameters after forward (ZeRO-3-like), ``fsdp_no_reshard``
    keeps them (ZeRO-2-like). Returns the number of sharded units, the roots included."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if cfg.amp == "off":
        policy = MixedPrecisionPolicy()
    else:
        dtype = torch.bfloat16 if cfg.amp == "bf16" else torch.float16
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    reshard = cfg.sharding == "fsdp"
    count = 0
    for root in roots:
        for module in [m for m in root.modules() if units and isinstance(m, units) and m is not root]:
            fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
            count += 1
        fully_shard(root, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
        count += 1
    return count

