"""A study's fingerprint: the machine it is measured on, the software it runs and the model it trains.

Stored on the study (the ``autotune_fingerprint`` attribute, docs/storage.md) so that a later study can find
earlier ones of the same context and start from their best configurations (warm start), and say what
differs when the context is only close. Three parts:

- ``hardware``: the study's device, CPU model and cores, GPU model, count and memory, the interconnect as
  far as torch can tell (peer-to-peer access between the GPUs; the nodes of a trial);
- ``software``: torch, CUDA and NCCL versions, Python;
- ``workload``: the entrypoint and its arguments, the parameter count and dtype mix of the built model,
  one batch's shapes, and the global batch the study holds (``constraints.global_batch``; None: not held).

The model is built on the ``meta`` device from the study's one :class:`~autotune.Workload` (no memory, no
weights; on the CPU when the model cannot be built on meta), so a fingerprint costs one construction of the
module tree and two samples of the dataset.
"""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.spec import StudySpec, held_global_batches
from autotune.workload import study_workload
from autotune.workload_check import call_factory, collate_batch, dataset_len

__all__ = ["Comparison", "compare_fingerprints", "cpu_model", "describe_batch", "describe_fingerprint",
           "hardware_facts",
           "software_facts", "study_fingerprint", "workload_facts"]

# What must be equal for an earlier study's configurations to be used at all: the same model, on the same
# kind of device, holding the same global batch (or none: another global batch trains another way, and its
# splits are not this study's). Everything else may differ and is named.
BLOCKING = (
    ("workload", "entrypoint"), ("workload", "parameters"), ("hardware", "device"), ("workload", "global_batch"),
)
CLOSE = (
    ("hardware", "cpu_model"), ("hardware", "cpus"), ("hardware", "gpu_model"), ("hardware", "gpu_count"),
    ("hardware", "gpu_memory_gb"), ("hardware", "interconnect"), ("hardware", "nodes"),
    ("software", "torch"), ("software", "cuda"), ("software", "nccl"), ("software", "python"),
    ("workload", "args"), ("workload", "dtypes"), ("workload", "batch"),
)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; else what ``platform`` says)."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    return model or platform.processor()


def hardware_facts(device: str = "cpu", nodes: int = 1) -> dict[str, Any]:
    """The machine a study is measured on: ``device`` (cpu | cuda), CPU model and usable cores, GPU model,
    count and memory (GB), the interconnect as far as torch can tell, and ``nodes`` per trial."""
    facts: dict[str, Any] = {
        "device": device, "cpu_model": cpu_model(), "cpus": len(os.sched_getaffinity(0)),
        "gpu_model": None, "gpu_count": 0, "gpu_memory_gb": None, "nodes": nodes,
    }
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            props = [torch.cuda.get_device_properties(i) for i in range(count)]
            facts["gpu_model"] = ", ".join(sorted({p.name for p in props}))
            facts["gpu_count"] = count
            facts["gpu_memory_gb"] = round(min(p.total_memory for p in props) / 2**30, 1)
    facts["interconnect"] = _interconnect(facts["gpu_count"], nodes)
    return facts


def _interconnect(gpus: int, nodes: int) -> str:
    """What torch can tell of the links between ranks: peer-to-peer access between GPU pairs (NVLink or
    PCIe P2P; without it NCCL goes through host memory), shared memory on one host, the network between
    nodes (torch cannot tell which)."""
    if gpus > 1:
        import torch

        pairs = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
        peer = sum(bool(torch.cuda.can_device_access_peer(a, b)) for a, b in pairs)
        within = (f"peer-to-peer between all {gpus} GPUs" if peer == len(pairs)
                  else f"peer-to-peer on {peer} of {len(pairs)} GPU pairs" if peer
                  else f"no peer-to-peer between the {gpus} GPUs (through host memory)")
    elif gpus == 1:
        within = "one GPU"
    else:
        within = "shared memory on one host"
    return within if nodes == 1 else f"{within}; {nodes} nodes over the network"


def software_facts() -> dict[str, Any]:
    """torch, the CUDA it was built with and the NCCL it ships (None when absent), Python."""
    facts: dict[str, Any] = {"torch": None, "cuda": None, "nccl": None, "python": platform.python_version()}
    with contextlib.suppress(ImportError):
        import torch

        facts["torch"] = torch.__version__
        facts["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):  # a CPU-only build has no NCCL
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    return facts


def workload_facts(spec: StudySpec) -> dict[str, Any]:
    """The study's model: entrypoint, arguments, parameter count and dtype mix (share of the parameters in
    each dtype), one batch's shapes per sample (``x: float32[32]; y: float32[4]``). A part the workload
    cannot give is None (the trials will say why)."""
    import torch

    facts: dict[str, Any] = {
        "entrypoint": spec.workload.entrypoint, "args": dict(spec.workload.args),
        "parameters": None, "dtypes": None, "batch": None,
        "global_batch": list(held_global_batches(spec.constraints.global_batch)) or None,
    }
    workload = study_workload(spec)  # the study's one build of its entrypoint
    where = f"{spec.source}: workload"
    model = None
    for device in ("meta", "cpu"):  # meta: no memory, no weights; some models need real tensors to build
        with contextlib.suppress(Exception), torch.device(device):
            model = call_factory(workload.model, "model", where)
        if isinstance(model, torch.nn.Module):
            break
    if isinstance(model, torch.nn.Module):
        counts: dict[str, int] = {}
        for p in model.parameters():
            if p.requires_grad:
                name = str(p.dtype).removeprefix("torch.")
                counts[name] = counts.get(name, 0) + p.numel()
        total = sum(counts.values())
        facts["parameters"] = total
        facts["dtypes"] = {k: round(v / total, 4) for k, v in sorted(counts.items())} if total else {}
    with contextlib.suppress(WorkloadError):
        dataset = call_factory(workload.dataset, "dataset", where)
        batch = collate_batch(dataset, dataset_len(dataset, where), workload, where)
        facts["batch"] = describe_batch(batch)
    return facts


def describe_batch(batch: Any, name: str = "") -> str:
    """One batch's shapes per sample (the batch dimension dropped): ``x: float32[3, 32, 32]; y: int64[]``."""
    import torch

    if isinstance(batch, torch.Tensor):
        shape = ", ".join(str(d) for d in batch.shape[1:]) if batch.dim() else ""
        text = f"{str(batch.dtype).removeprefix('torch.')}[{shape}]"
        return f"{name}: {text}" if name else text
    if isinstance(batch, dict):
        return "; ".join(describe_batch(v, f"{name}.{k}" if name else str(k)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)):
        return "; ".join(describe_batch(v, f"{name}[{i}]" if name else f"[{i}]") for i, v in enumerate(batch))
    return f"{name}: {type(batch).__name__}" if name else type(batch).__name__


def study_fingerprint(spec: StudySpec) -> dict[str, Any]:
    """``{"hardware": ..., "software": ..., "workload": ...}`` of a study on this machine."""
    return {
        "hardware": hardware_facts(spec.resolved_device(), spec.launcher.nodes),
        "software": software_facts(),
        "workload": workload_facts(spec),
    }


def describe_fingerprint(fingerprint: dict[str, Any]) -> list[str]:
    """Three lines for ``autotune status``: the machine, the software, the model."""
    hw, sw, wl = (fingerprint.get(k) or {} for k in ("hardware", "software", "workload"))
    gpus = (f", {hw['gpu_count']}x {hw.get('gpu_model')} ({hw.get('gpu_memory_gb')} GB)"
            if hw.get("gpu_count") else "")
    machine = (f"machine: {hw.get('device')}, {hw.get('cpu_model')} ({hw.get('cpus')} cores){gpus}, "
               f"{hw.get('interconnect')}")
    software = ", ".join(
        f"{label} {sw[key]}" for key, label in (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"),
                                                ("python", "Python")) if sw.get(key)
    )
    args = f" {_show(wl.get('args'))}" if wl.get("args") else ""
    dtypes = f" ({_show(wl.get('dtypes'))})" if wl.get("dtypes") else ""
    held = f", global batch held at {_show_global_batch(wl['global_batch'])}" if wl.get("global_batch") else ""
    model = (f"model: {wl.get('entrypoint')}{args}, {_show(wl.get('parameters'))} parameters{dtypes}, "
             f"batch {wl.get('batch') or 'unknown'}{held}")
    return [machine, f"software: {software}", model]


@dataclass(frozen=True)
class Comparison:
    """How an earlier study's fingerprint differs from this one's: ``blocking`` differences (another model,
    another kind of device: its configurations are not used) and ``close`` ones (named, still used); each is
    ``"cpus 16 (here 2)"``."""

    blocking: tuple[str, ...]
    close: tuple[str, ...]

    @property
    def usable(self) -> bool:
        return not self.blocking

    @property
    def same(self) -> bool:
        return not self.blocking and not self.close


def compare_fingerprints(mine: dict[str, Any], theirs: dict[str, Any]) -> Comparison:
    """What differs between this study's fingerprint (``mine``) and an earlier one's (``theirs``)."""

    def differences(keys: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        out = []
        for part, key in keys:
            here = (mine.get(part) or {}).get(key)
            there = (theirs.get(part) or {}).get(key)
            if here != there:
                show = _show_global_batch if key == "global_batch" else _show
                out.append(f"{key} {show(there)} (here {show(here)})")
        return tuple(out)

    return Comparison(differences(BLOCKING), differences(CLOSE))


def _show_global_batch(value: Any) -> str:
    """A fingerprint's held global batch: ``256``, ``{256, 512}``, or ``not held``."""
    if not value:
        return "not held"
    return str(value[0]) if len(value) == 1 else "{" + ", ".join(map(str, value)) + "}"


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1_000:
        return f"{value:,}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)
