"""Pipeline parallelism inside a rank: the model cut into stages at the workload's ``pipeline_split`` points,
this rank's stage(s) as ``torch.distributed.pipelining`` stages, and the schedule that runs a batch through them.

Stages are built by hand, as torchtitan builds them: every rank builds the whole model from the trial's seed (so
every stage starts from the very weights a one-rank run starts from), then removes the modules of the other
stages. The model's "units" are its top-level modules, and the children of a top-level ``ModuleDict``,
``ModuleList`` or ``Sequential`` (``blocks.0``, ``blocks.1`` ...); each split point names the unit a stage starts
with. A removed top-level module becomes ``None`` (a container's child is taken out of it), so the model's
forward must skip a ``None`` module and, on a later stage, take the previous stage's output in place of the
batch's inputs (docs/parallel.md: what a workload provides).

A pipeline of S stages (``pipeline_parallel``, or twice it for ``interleaved_1f1b``: stage ``i`` on pipeline rank
``i % pipeline_parallel``) uses S - 1 of the K split points, spread evenly: stage i starts at
``pipeline_split[i * (K + 1) // S - 1]``. Under a pipeline a batch is ``(inputs, target)``; the schedule splits
both into ``pipeline_microbatches`` micro-batches, runs ``Workload.pipeline_loss(output, target)`` on the last
stage's output of each, and accumulates the gradients of ``loss / (microbatches x grad_accum)``, so a step's
gradient is the mean over the step's samples as in a one-rank run.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune.trial_runner._mesh import Mesh

CONTAINERS = (nn.ModuleDict, nn.ModuleList, nn.Sequential)


def unit_names(model: nn.Module) -> list[str]:
    """The model's units in order: its top-level modules, a top-level container's children in its stead."""
    names: list[str] = []
    for name, child in model.named_children():
        if isinstance(child, CONTAINERS) and not isinstance(model, nn.Sequential):
            names.extend(f"{name}.{inner}" for inner, _ in child.named_children())
        else:
            names.append(name)
    return names


def stage_count(cfg: Any) -> int:
    """The pipeline's stages: pipeline_parallel, two per rank under ``interleaved_1f1b``."""
    return cfg.pipeline_parallel * (2 if cfg.pipeline_schedule == "interleaved_1f1b" else 1)


def stage_starts(split: tuple[str, ...], stages: int) -> list[str]:
    """The split points a pipeline of ``stages`` stages starts its stages 1..S-1 at (spread evenly)."""
    points = len(split)
    if stages - 1 > points:
        raise ValueError(
            f"pipeline: {stages} stages need {stages - 1} split points, Workload.pipeline_split has {points}; "
            "use fewer stages (pipeline_parallel, or a schedule with one stage a rank) or give more split points"
        )
    return [split[i * (points + 1) // stages - 1] for i in range(1, stages)]


def stage_units(model: nn.Module, split: tuple[str, ...], stages: int) -> list[list[str]]:
    """Each stage's units, in order."""
    units = unit_names(model)
    starts = stage_starts(split, stages)
    unknown = [s for s in starts if s not in units]
    if unknown:
        raise ValueError(
            f"Workload.pipeline_split: {unknown[0]!r} is not a unit of the model (a top-level module or a child of "
            f"a top-level container: {', '.join(units[:8])}{' ...' if len(units) > 8 else ''})"
        )
    cuts = [0, *[units.index(s) for s in starts], len(units)]
    if cuts != sorted(cuts) or len(set(cuts[1:-1])) != len(cuts) - 2 or 0 in cuts[1:-1]:
        raise ValueError(f"Workload.pipeline_split: {starts} are not in the model's order, each after the first unit")
    return [units[a:b] for a, b in itertools.pairwise(cuts)]


def keep_only(model: nn.Module, keep: list[str]) -> nn.Module:
    """``model`` with every unit not in ``keep`` removed (a top-level module set to None, a container's child
    taken out of the container)."""
    wanted = set(keep)
    for unit in unit_names(model):
        if unit in wanted:
            continue
        parent_name, _, child = unit.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if isinstance(parent, nn.ModuleDict):
            del parent[child]
        elif isinstance(parent, (nn.ModuleList, nn.Sequential)):
            kept = [(n, m) for n, m in parent.named_children() if n != child]
            parent._modules.clear()
            for n, m in kept:
                parent.add_module(n, m)
        else:
            setattr(parent, child, None)
    return model


def build_stages(model: nn.Module, split: tuple[str, ...] | None, cfg: Any, mesh: Mesh) -> list[tuple[int, nn.Module]]:
    """This rank's stages, ``(stage index, module)``: the model with the other stages' units removed."""
    if not split:
        raise ValueError(
            f"pipeline_parallel {cfg.pipeline_parallel}: the workload names no split points; give "
            "Workload.pipeline_split (module names, each the first of a stage) and Workload.pipeline_loss"
        )
    stages = stage_count(cfg)
    units = stage_units(model, split, stages)
    mine = [i for i in range(stages) if i % mesh.pp == mesh.coords["pp"]]
    built = []
    for n, index in enumerate(mine):
        source = model if n == len(mine) - 1 else copy.deepcopy(model)
        built.append((index, keep_only(source, units[index])))
    return built


class ChunkTimer:
    """The seconds this rank's stages spent computing (forward and backward of a micro-batch), the rest of a
    pipeline step is its bubble (waiting on the neighbouring stages, and the transfers)."""

    def __init__(self, stages: list[Any]) -> None:
        self.computing = 0.0
        for stage in stages:
            for method in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                if hasattr(stage, method):
                    setattr(stage, method, self._timed(getattr(stage, method)))

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.computing += time.perf_counter() - start

        return timed

    def take(self) -> float:
        computing, self.computing = self.computing, 0.0
        return computing


class Pipeline:
    """This rank's part of the pipeline: its stages, the schedule, and one micro-step through it."""

    def __init__(self, stages: list[tuple[int, nn.Module]], cfg: Any, mesh: Mesh, device: torch.device,
                 loss: Callable[[Any, Any], Any]) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

        total = stage_count(cfg)
        self.modules = [module for _, module in stages]
        self.stages: list[Any] = [PipelineStage(module, index, total, device, group=mesh.pp_group)
                                  for index, module in stages]
        self.is_first = any(s.is_first for s in self.stages)
        self.is_last = any(s.is_last for s in self.stages)
        self.scale = 1.0 / (cfg.pipeline_microbatches * cfg.grad_accum)
        self.grad_accum = cfg.grad_accum

        def scaled(output: Any, target: Any) -> torch.Tensor:
            return loss(output, target) * self.scale

        kinds = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
        if cfg.pipeline_schedule == "interleaved_1f1b":
            self.schedule: Any = ScheduleInterleaved1F1B(self.stages, cfg.pipeline_microbatches, loss_fn=scaled,
                                                         scale_grads=False)
        else:
            self.schedule = kinds[cfg.pipeline_schedule](self.stages[0], cfg.pipeline_microbatches, loss_fn=scaled,
                                                        scale_grads=False)
        self.timer = ChunkTimer(self.stages)

    def micro_step(self, batch: Any, train: bool = True) -> torch.Tensor | None:
        """One grad_accum micro-step of ``batch`` = ``(inputs, target)`` through the pipeline (``train`` False:
        forward only, the schedule's ``eval``); on the last stage the micro-step's mean loss (as the workload's
        loss reads it), elsewhere None."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError("under pipeline_parallel > 1 a batch must be (inputs, target): two tensors")
        inputs, target = batch
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.is_first else ()
        kwargs = {"target": target if self.is_last else None, "losses": losses if self.is_last else None}
        if train:
            self.schedule.step(*args, return_outputs=False, **kwargs)
        else:
            self.schedule.eval(*args, **kwargs)
        if not self.is_last:
            return None
        return torch.stack([x.detach().float() for x in losses]).sum() * self.grad_accum
