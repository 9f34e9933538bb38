"""The parallel mesh inside a rank: one ``DeviceMesh`` with axes ``pp``, ``dp``, ``tp`` (tensor parallel
innermost, so a node's consecutive ranks share a tensor-parallel group), tensor parallelism applied to the model,
and the data-parallel axis replicated or sharded over (docs/parallel.md).

A trial without tensor or pipeline parallelism builds no mesh and runs as before (DDP or FSDP2 over every rank).
With one, the steps compose as torchtitan's do: tensor parallelism first (the workload's ``parallelize`` hook,
else its declarative ``tp_plan``, else a Hugging Face model's own plan), then the pipeline's stages
(_pipeline.py), then the data-parallel axis: FSDP2 ``fully_shard`` over ``mesh["dp"]`` under ``sharding: fsdp``
or ``fsdp_no_reshard`` (FSDP2 x TP, torchtitan's 2D), or under ``ddp`` the gradients' local shards all-reduced
(averaged) over the dp group after the step's last backward (:func:`average_gradients`): DDP's wrapper takes no
DTensor parameters, and torch's composable ``replicate`` is FSDP2 underneath, so a plain all-reduce is the
replicated data parallelism here, one collective per parameter.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autotune.workload import Workload

AXES = ("pp", "dp", "tp")
HEAD_COUNTS = ("num_heads", "n_head", "heads", "num_attention_heads", "num_key_value_heads", "n_kv_heads")
"""Attributes an attention module keeps its head count in: divided by the tensor-parallel degree where the
module's projections are split colwise by a declarative plan (the hook path does its own)."""


@dataclass(frozen=True)
class Mesh:
    """The trial's mesh and this rank's place in it."""

    mesh: Any  # torch.distributed.device_mesh.DeviceMesh with dims AXES
    pp: int
    dp: int
    tp: int
    coords: dict[str, int]

    @property
    def dp_group(self) -> Any:
        return self.mesh["dp"].get_group()

    @property
    def pp_group(self) -> Any:
        return self.mesh["pp"].get_group()


def coordinates(rank: int, pp: int, dp: int, tp: int) -> dict[str, int]:
    """Rank ``rank``'s coordinates in a (pp, dp, tp) mesh laid out row-major, tp innermost."""
    del pp
    return {"pp": rank // (dp * tp), "dp": rank // tp % dp, "tp": rank % tp}


def build_mesh(cfg: Any, device: torch.device, rank: int) -> Mesh | None:
    """The trial's mesh, or None on a trial with neither tensor nor pipeline parallelism."""
    tp, pp = cfg.tensor_parallel, cfg.pipeline_parallel
    if tp == 1 and pp == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    dp = dist.get_world_size() // (tp * pp)
    mesh = init_device_mesh(device.type, (pp, dp, tp), mesh_dim_names=AXES)
    coords = {axis: int(mesh.get_local_rank(axis)) for axis in AXES}
    if coords != coordinates(rank, pp, dp, tp):  # the layout docs/parallel.md promises
        raise RuntimeError(f"rank {rank}: mesh coordinates {coords} differ from the documented layout")
    return Mesh(mesh, pp, dp, tp, coords)


def apply_tensor_parallel(
    model: torch.nn.Module, workload: Workload, mesh: Mesh, cfg: Any
) -> tuple[torch.nn.Module, str]:
    """Tensor parallelism over ``mesh["tp"]``: the workload's hook, else its ``tp_plan``, else the Hugging Face
    model's own plan. Returns the model and which of the three applied it."""
    if workload.parallelize is not None:
        result = workload.parallelize(model, mesh.mesh, cfg)
        return (result if result is not None else model), "parallelize"
    if mesh.tp == 1:
        return model, "none"
    plan = workload.tp_plan if workload.tp_plan is not None else hf_plan(model)
    if plan is None:
        raise ValueError(
            f"tensor_parallel {mesh.tp}: the workload says nothing of how its model splits; give Workload.parallelize "
            "or Workload.tp_plan (module-name patterns to colwise, rowwise, sequence)"
        )
    expand_plan(model, plan, mesh.mesh["tp"])
    return model, "tp_plan" if workload.tp_plan is not None else "hf_plan"


def hf_plan(model: torch.nn.Module) -> Mapping[str, str] | None:
    """A Hugging Face model's own tensor-parallel plan (``model._tp_plan``, else its config's
    ``base_model_tp_plan`` under the base model's prefix), its styles reduced to colwise and rowwise."""
    plan = getattr(model, "_tp_plan", None) or {}
    if not plan:
        config = getattr(model, "config", None)
        base = getattr(config, "base_model_tp_plan", None) or {}
        prefix = getattr(model, "base_model_prefix", "")
        inner = prefix and getattr(model, prefix, None) is not None and getattr(model, prefix) is not model
        plan = {(f"{prefix}.{k}" if inner else k): v for k, v in base.items()}
    styles = {"colwise": "colwise", "rowwise": "rowwise", "colwise_rep": "colwise", "rowwise_rep": "rowwise",
              "sequence_parallel": "sequence"}
    kept = {k: styles[v] for k, v in plan.items() if v in styles}
    return kept or None


def expand_plan(model: torch.nn.Module, plan: Mapping[str, str], tp_mesh: Any) -> dict[str, str]:
    """Apply ``plan`` (fnmatch patterns on module names -> colwise | rowwise | sequence) to every module it
    matches, and give attention modules above colwise projections their local head count. Returns the
    modules matched, by name."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel, "sequence": SequenceParallel}
    matched: dict[str, str] = {}
    for name, _ in model.named_modules():
        for pattern, style in plan.items():
            if name and fnmatch.fnmatchcase(name, pattern):
                matched[name] = style
                break
    if not matched:
        raise ValueError(f"tp_plan: no module of the model matches any of {sorted(plan)}")
    parallelize_module(model, tp_mesh, {name: styles[style]() for name, style in matched.items()})
    size = tp_mesh.size()
    for name, module in model.named_modules():
        children = [f"{name}.{child}" if name else child for child, _ in module.named_children()]
        if not any(matched.get(child) == "colwise" for child in children):  # not above its own colwise projections
            continue
        for attribute in HEAD_COUNTS:
            count = getattr(module, attribute, None)
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                if count % size:
                    raise ValueError(
                        f"{name or 'model'}.{attribute} ({count}) does not split over tensor_parallel {size}")
                setattr(module, attribute, count // size)
    return matched


def average_gradients(parameters: list[torch.nn.Parameter], mesh: Mesh) -> None:
    """Replicated data parallelism over the dp axis: each gradient's local part averaged over the dp group."""
    if mesh.dp == 1:
        return
    from torch.distributed.tensor import DTensor

    group = mesh.dp_group
    for p in parameters:
        if p.grad is None:
            continue
        grad = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
        grad.div_(mesh.dp)
        dist.all_reduce(grad, group=group)


def local_numel(parameters: list[torch.nn.Parameter]) -> int:
    """The parameter elements this rank holds (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    return sum((p.to_local().numel() if isinstance(p, DTensor) else p.numel()) for p in parameters)
