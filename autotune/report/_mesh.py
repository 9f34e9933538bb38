"""Throughput by parallel mesh: for each mesh a study ran (``pp x dp x tp``, with the pipeline's schedule and
micro-batches, and the sharding on the data-parallel axis), its trials' throughput and peak memory per rank,
and the configurations of it not launched because they were predicted over the memory budget."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import NamedTuple

import optuna

from autotune.report._records import trial_records
from autotune.search_space import mesh_label

__all__ = ["MeshData", "MeshRow", "mesh_data"]


class MeshRow(NamedTuple):
    """One mesh and sharding: its measured trials' throughput (samples/s) and peak memory per rank (MB)."""

    mesh: str  # pp2.dp1.tp2, with .1f1b.mb4 under a pipeline
    sharding: str
    world_size: int
    throughputs: tuple[float, ...]  # complete trials (the baseline and confirmation runs among them)
    peak_mb: float | None  # the largest peak per rank measured
    numbers: tuple[int, ...]  # its trials, launched or not
    not_launched: int  # its trials predicted over the memory budget, never run

    @property
    def label(self) -> str:
        return f"{self.mesh} {self.sharding}"

    @property
    def best(self) -> float | None:
        return max(self.throughputs) if self.throughputs else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


class MeshData(NamedTuple):
    rows: list[MeshRow]  # best measured first, then the meshes without a measurement
    shown: bool  # the study ran (or was told not to run) a tensor- or pipeline-parallel mesh


@dataclass
class _Group:
    world_size: int
    speed: list[float] = field(default_factory=list)
    peak: list[float] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    skipped: int = 0


def mesh_data(study: optuna.Study) -> MeshData:
    """Every mesh and sharding the study's trials ran or were told not to run (predicted over the memory
    budget), each with the throughput of its complete trials."""
    groups: dict[tuple[str, str], _Group] = {}
    for r in trial_records(study):
        if not r.config:
            continue
        key = (mesh_label(r.config), str(r.config.get("sharding") or "ddp"))
        group = groups.setdefault(key, _Group(int(r.config.get("world_size") or 1)))
        group.numbers.append(r.number)
        if not r.launched:
            group.skipped += 1
            continue
        if r.outcome == "complete" and r.throughput_samples_s is not None:
            group.speed.append(r.throughput_samples_s)
        if r.peak_memory_mb is not None:
            group.peak.append(r.peak_memory_mb)
    rows = [
        MeshRow(mesh, sharding, g.world_size, tuple(g.speed), max(g.peak) if g.peak else None, tuple(g.numbers),
                g.skipped)
        for (mesh, sharding), g in groups.items()
    ]
    rows.sort(key=lambda row: (row.best is None, -(row.best or 0.0), row.label))
    # a study of data parallelism alone has its world sizes in the throughput-against-batch view already
    shown = any(not row.mesh.startswith("pp1.") or not row.mesh.endswith(".tp1") for row in rows)
    return MeshData(rows, shown)
