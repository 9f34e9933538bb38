"""What a workload's model allows of a parallel mesh, read before any trial: how it splits its layers across a
tensor-parallel group (``Workload.parallelize``, ``Workload.tp_plan``, or a Hugging Face model's own plan), the
attention heads and the split dimensions a tensor degree must divide, and how many pipeline stages its
``pipeline_split`` makes. The search space (:mod:`autotune.search_space`) proposes only the meshes these allow,
and a study that fixes another is refused before launch."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.workload import Workload

HEAD_ATTRIBUTES = (
    "num_heads", "n_head", "n_heads", "heads", "num_attention_heads", "num_key_value_heads", "num_kv_heads",
)
"""Attributes of a module (or a model's ``config``) that count attention heads: a tensor degree divides each."""

HF_PLAN = "the model's own tp plan"


@dataclass(frozen=True)
class MeshFacts:
    """What the model allows of a mesh.

    ``tensor_plan``: how the workload splits its layers over a tensor-parallel group (``parallelize``,
    ``tp_plan``, :data:`HF_PLAN`), None when it does not. ``split_points``: ``len(Workload.pipeline_split)``,
    None without one (no pipeline). ``heads``: ``(where, count)`` of the attention heads found on the built
    model; ``split_dims``: ``(where, size)`` of the dimensions the ``tp_plan`` splits (a colwise Linear's
    out_features, a rowwise one's in_features). Both empty when the model was not built.
    """

    tensor_plan: str | None = None
    split_points: int | None = None
    heads: tuple[tuple[str, int], ...] = ()
    split_dims: tuple[tuple[str, int], ...] = ()
    pipeline_loss: bool = False  # the workload has a pipeline_loss(output, target) for the last stage
    sequence_without_hook: bool = False  # tp_plan has sequence entries, and no parallelize hook shards around them

    @property
    def max_stages(self) -> int:
        """The most pipeline stages the model can be cut into (split points + 1; 1 without a pipeline_split)."""
        return (self.split_points or 0) + 1


def mesh_facts(workload: Workload, model: Any | None = None) -> MeshFacts:
    """The facts of ``workload`` (and of its built ``model``, where given: heads, split dimensions, a model's own
    plan); a ``pipeline_split`` name the model does not contain is a WorkloadError."""
    plan = "parallelize" if workload.parallelize is not None else "tp_plan" if workload.tp_plan else None
    split = workload.pipeline_split
    points = len(split) if split else None
    staged = getattr(workload, "pipeline_loss", None) is not None
    sequence = workload.parallelize is None and "sequence" in (workload.tp_plan or {}).values()
    if model is None:
        return MeshFacts(plan, points, pipeline_loss=staged, sequence_without_hook=sequence)
    if plan is None and _hf_plan(model):
        plan = HF_PLAN
    modules = dict(model.named_modules())
    names = set(modules)
    units = sorted(n for n in names if _unit(n, modules))
    for name in split or ():
        if name not in names or not _unit(name, modules):
            what = "has no module" if name not in names else "cannot start a stage at"
            raise WorkloadError(
                f"Workload.pipeline_split: the model {what} {name!r}; a stage starts at a top-level module or a "
                f"child of a top-level ModuleList/ModuleDict/Sequential (e.g. {', '.join(map(repr, units[:4]))})"
            )
    for pattern in workload.tp_plan or {}:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise WorkloadError(
                f"Workload.tp_plan: the pattern {pattern!r} matches no module of the model; patterns match full "
                "module names (fnmatch), e.g. 'blocks.*.attn.q'"
            )
    return MeshFacts(plan, points, _heads(model), _split_dims(model, workload.tp_plan or {}), staged, sequence)


def build_for_facts(workload: Workload) -> Any | None:
    """The model built once on the meta device (no memory, no weights), or on the CPU where the meta device
    fails; None when neither builds it (the build check of ``autotune validate`` says why)."""
    import torch

    for device in ("meta", "cpu"):
        with contextlib.suppress(Exception), torch.device(device):
            model = workload.model()
            if isinstance(model, torch.nn.Module):
                return model
    return None


def _unit(name: str, modules: Mapping[str, Any]) -> bool:
    """Whether a pipeline stage can start at module ``name``: a top-level module, or a child of a top-level
    container (``blocks.2``)."""
    import torch

    parent, dot, _ = name.rpartition(".")
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Sequential)
    return bool(name) and (not dot or ("." not in parent and isinstance(modules.get(parent), containers)))


def _hf_plan(model: Any) -> bool:
    """Whether ``model`` is a transformers model that carries its own tensor-parallel plan."""
    config = getattr(model, "config", None)
    return bool(getattr(model, "_tp_plan", None) or getattr(config, "base_model_tp_plan", None))


def _heads(model: Any) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    config = getattr(model, "config", None)
    for attribute in HEAD_ATTRIBUTES:
        value = getattr(config, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found[f"config.{attribute}"] = value
    for name, module in model.named_modules():
        for attribute in HEAD_ATTRIBUTES:
            value = getattr(module, attribute, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                key = f"{name or type(module).__name__}.{attribute}"
                if value not in found.values() or len(found) < 8:
                    found[key] = value
    return tuple(found.items())


def _split_dims(model: Any, plan: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """The dimensions the ``tp_plan`` splits: a colwise layer's outputs, a rowwise layer's inputs."""
    import torch

    dims: list[tuple[str, int]] = []
    for name, module in model.named_modules():
        style = next((s for pattern, s in plan.items() if fnmatch.fnmatchcase(name, pattern)), None)
        if style not in ("colwise", "rowwise"):
            continue
        if isinstance(module, torch.nn.Linear):
            attribute = "out_features" if style == "colwise" else "in_features"
        elif isinstance(module, torch.nn.Embedding):
            attribute = "embedding_dim" if style == "colwise" else "num_embeddings"
        else:
            continue
        dims.append((f"{name}.{attribute}", int(getattr(module, attribute))))
    return tuple(dims)
