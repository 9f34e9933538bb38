"""Building one rank's training: the process group, the model as the knobs wrap it (checkpointing, compile,
DDP or FSDP2), and what every rank applied, gathered for applied.json."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autotune.search_space import TrialConfig
from autotune.trial_runner._apply import (
    THREAD_ENV,
    apply_checkpointing,
    blas_threads,
    shard_model,
    shard_units,
    wrap_ddp,
)
from autotune.trial_runner._mesh import Mesh, apply_tensor_parallel, build_mesh
from autotune.trial_runner._pipeline import Pipeline, build_stages
from autotune.trial_runner._records import AppliedRecord, RankFacts
from autotune.workload import Workload


@dataclass
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    trial_dir: Path

    @classmethod
    def from_env(cls, trial_dir: Path) -> RankContext:
        # torchrun's variables, never SLURM_*: inside an allocation SLURM_PROCID leaks into every rank.
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])),
            trial_dir=trial_dir,
        )


def rank_device(cfg: TrialConfig, ctx: RankContext) -> torch.device:
    if cfg.device == "cuda":
        torch.cuda.set_device(ctx.local_rank)
        return torch.device("cuda", ctx.local_rank)
    return torch.device("cpu")


def init_distributed(device: torch.device, startup_timeout_s: float) -> None:
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=startup_timeout_s), **kwargs)


@dataclass
class WrappedModel:
    """The model as the trial trains it: ``model`` (DDP-wrapped when ``ddp`` is set), the bare ``module``; under
    the parallel mesh (``mesh`` set) this rank's part of the model, its ``pipeline`` (None without one), and
    ``replicate``: the gradients are averaged over the dp axis by the step itself (sharding ddp)."""

    model: torch.nn.Module
    module: torch.nn.Module
    ddp: Any  # DistributedDataParallel or None
    fsdp: bool
    mesh: Mesh | None = None
    pipeline: Pipeline | None = None
    replicate: bool = False


def wrap_model(
    workload: Workload, cfg: TrialConfig, ctx: RankContext, device: torch.device, applied: AppliedRecord
) -> WrappedModel:
    """The workload's model with checkpointing, compile and DDP or FSDP2 applied as ``cfg`` says."""
    model = workload.model()
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the workload's model has no trainable parameters")
    mesh = build_mesh(cfg, device, ctx.rank)
    if mesh is not None:
        return wrap_on_mesh(model, workload, cfg, device, mesh, applied)
    if cfg.activation_checkpointing:
        wrapped = apply_checkpointing(model, workload.checkpoint_modules)
        if wrapped == 0:
            raise ValueError("activation_checkpointing: no module of checkpoint_modules found in the model")
        applied.checkpoint_wrappers = wrapped
    model.to(device)
    if cfg.compile != "off":
        # Compiled in place before DDP/FSDP wrap it (the module tree is unchanged); the compile itself
        # happens lazily in the first step, a warm-up step.
        model.compile(mode=cfg.compile)
    if cfg.sharding != "ddp":
        applied.fsdp_units = shard_model(model, workload.shard_units, cfg, device)
        applied.fsdp_reshard_after_forward = cfg.sharding == "fsdp"
        return WrappedModel(model, model, None, True)
    if ctx.world_size == 1:
        return WrappedModel(model, model, None, False)
    ddp = wrap_ddp(model, cfg, [ctx.local_rank] if device.type == "cuda" else None, applied)
    return WrappedModel(ddp, model, ddp, False)


def wrap_on_mesh(
    model: torch.nn.Module, workload: Workload, cfg: TrialConfig, device: torch.device, mesh: Mesh,
    applied: AppliedRecord,
) -> WrappedModel:
    """The parallel mesh's steps, as torchtitan composes them: the pipeline's stages (this rank's), tensor
    parallelism on each, activation checkpointing, then the dp axis (FSDP2 over it, or averaged gradients)."""
    if cfg.compile != "off":
        raise ValueError("compile is not applied under tensor or pipeline parallelism; set compile: off")
    if cfg.amp == "fp16" and mesh.pp > 1:
        raise ValueError("amp fp16 needs a GradScaler, which the pipeline's schedule does not take; use amp bf16")
    # cut before moving: a GPU then holds its stage, not the whole model (the cut happens where it was built)
    stages = build_stages(model, workload.pipeline_split, cfg, mesh) if mesh.pp > 1 else [(0, model)]
    parts = []
    for index, module in stages:
        module.to(device)
        module, how = apply_tensor_parallel(module, workload, mesh, cfg)
        applied.tensor_parallel_by = how
        if cfg.activation_checkpointing:
            applied.checkpoint_wrappers = (applied.checkpoint_wrappers or 0) + apply_checkpointing(
                module, workload.checkpoint_modules)
        parts.append((index, module))
    if cfg.activation_checkpointing and not applied.checkpoint_wrappers:
        raise ValueError("activation_checkpointing: no module of checkpoint_modules found in the model")
    if cfg.sharding != "ddp":
        applied.fsdp_units = shard_units([m for _, m in parts], workload.shard_units, cfg, mesh.mesh["dp"])
        applied.fsdp_reshard_after_forward = cfg.sharding == "fsdp"
    pipeline = None
    if mesh.pp > 1:
        if workload.pipeline_loss is None:
            raise ValueError(f"pipeline_parallel {mesh.pp}: give Workload.pipeline_loss(output, target), the loss "
                             "the last stage computes")
        pipeline = Pipeline(parts, cfg, mesh, device, workload.pipeline_loss)
    root = parts[0][1] if len(parts) == 1 else torch.nn.ModuleList([m for _, m in parts])
    return WrappedModel(root, root, None, cfg.sharding != "ddp", mesh, pipeline, cfg.sharding == "ddp" and mesh.dp > 1)


def gather_rank_facts(
    model: torch.nn.Module, cfg: TrialConfig, ctx: RankContext, ddp: bool, mesh: Mesh | None = None
) -> list[RankFacts]:
    """What every rank applied (threads, environment, compiled forward, sharded parameters), gathered to
    every rank: a knob that reached only rank 0 shows in applied.json's ``ranks``."""
    from torch.distributed.tensor import DTensor

    start_env = start_environment()
    params = list(model.parameters())
    local = sum((p.to_local().numel() if isinstance(p, DTensor) else p.numel()) for p in params)
    facts = RankFacts(
        rank=ctx.rank,
        torch_threads=torch.get_num_threads(),
        blas_threads=blas_threads(),
        thread_env={name: os.environ.get(name) for name in THREAD_ENV},
        env={name: os.environ.get(name) for name in cfg.env},
        env_at_start={name: start_env.get(name) for name in cfg.env},
        thread_env_at_start={name: start_env.get(name) for name in THREAD_ENV},
        compiled=getattr(model, "_compiled_call_impl", None) is not None,
        dtensor_params=sum(isinstance(p, DTensor) for p in params),
        local_param_numel=local,
        param_numel=sum(p.numel() for p in params),
        ddp=ddp,
        mesh=dict(mesh.coords) if mesh is not None else None,
    )
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, facts)
    return gathered


def watch_autocast(model: torch.nn.Module, device_type: str, applied: AppliedRecord) -> None:
    """Record, once, whether autocast is on in the forward pass and with which dtype."""

    def hook(module: torch.nn.Module, args: Any) -> None:
        enabled = torch.is_autocast_enabled(device_type)
        applied.autocast_enabled = enabled
        applied.autocast_dtype = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.") if enabled else None
        handle.remove()

    handle = model.register_forward_pre_hook(hook)


def start_environment() -> dict[str, str]:
    """This process's environment as it was exec'ed (/proc/self/environ), before anything changed it."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}
