"""Choosing the launcher a study file asks for."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError
from autotune.trial_runner._base import Launcher


def make_launcher(spec: Any) -> Launcher:
    """The launcher of ``spec.launcher.kind``."""
    kind = spec.launcher.kind
    if kind == "local":
        if spec.launcher.start == "torchrun":
            from autotune.trial_runner._local import LocalLauncher

            return LocalLauncher()
        from autotune.trial_runner._warm import WarmLauncher

        return WarmLauncher()
    if kind == "slurm":
        from autotune.trial_runner._slurm import SlurmLauncher

        cfg = spec.launcher
        return SlurmLauncher(nodes=cfg.nodes, partition=cfg.partition, time_limit=cfg.time, srun_args=cfg.srun_args)
    raise UsageError(f"{spec.source}: launcher.kind: {kind!r} is not available in this version; use local or slurm")
