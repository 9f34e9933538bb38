"""The built-in transformer for the mesh tests, with a ``sabotage`` switch: its parallelize hook then nudges one
weight on every rank of a mesh, a parallel run that no longer trains the one-rank model; ``plain``: without any
of the mesh's fields."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from autotune import Workload
from autotune.workloads import gpt


def build(sabotage: bool = False, hook: bool = True, layers: int = 4, plain: bool = False) -> Workload:
    workload = gpt.build(layers=layers, hook=hook)
    if plain:  # says nothing of how its model splits
        return replace(workload, parallelize=None, tp_plan=None, pipeline_split=None, pipeline_loss=None)
    if not sabotage:
        return workload

    def parallelize(model: Any, mesh: Any, config: Any) -> Any:
        model = gpt.parallelize(model, mesh, config)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.mul_(1.05)
        return model

    return replace(workload, parallelize=parallelize)
