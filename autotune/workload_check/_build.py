"""``autotune validate``'s check of the workload for real: build it once, run the loss on one small batch.

In this process, on the CPU, without ranks: the model and the dataset are built once, two samples are
collated as the DataLoader would, and ``loss(model, batch)`` is called and back-propagated. Each mistake a
new user makes in a workload file (a factory that is an instance, a loss that returns a ModelOutput or a
tuple, a checkpoint type the model does not contain, samples that cannot be stacked) is refused with one
line naming the fix, instead of crashing every trial of a study. Also the warnings that validate prints:
knobs the objectives cannot see, and bf16 on a CPU without native bf16.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.spec import Choices, Fixed, IntRange, KnobSpec, StudySpec
from autotune.tracebacks import user_frame
from autotune.workload import Workload

__all__ = [
    "CheckReport",
    "captured_output",
    "check_workload",
    "describe_bad_loss",
    "knobs_not_decided",
    "study_warnings",
]

SAMPLES = 2  # the batch the loss is called on: enough to show that samples stack
# Objectives that cannot see the learning rate: a knob whose only effect is on it is not decided by them.
LR_BLIND_METRICS = frozenset({"throughput_samples_s", "peak_memory_mb"})
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class CheckReport:
    """What the check built: for the one line validate prints."""

    model: str
    parameters: int
    dataset_len: int
    loss: float
    seconds: float

    def line(self) -> str:
        return (
            f"workload built: {self.model} ({self.parameters:,} parameters), {self.dataset_len:,} samples, "
            f"loss {self.loss:.4g} on a batch of {min(SAMPLES, self.dataset_len)} ({self.seconds:.1f} s, CPU)"
        )


def check_workload(spec: StudySpec) -> CheckReport:
    """Build the study's workload and run its loss once; raise WorkloadError (one line) on a mistake."""
    import torch

    workload: Workload = spec.load_workload()
    where = f"{spec.source}: workload"
    started = time.monotonic()
    model = _call_factory(workload.model, "model", where)
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"{where}: Workload.model() returned {type(model).__name__}, not a torch.nn.Module; "
            "return the model from the factory"
        )
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if n_params == 0:
        raise WorkloadError(f"{where}: the model has no trainable parameters; check Workload.model")
    _check_checkpoint_modules(model, workload, where)
    dataset = _call_factory(workload.dataset, "dataset", where)
    size = _dataset_len(dataset, where)
    batch = _collate(dataset, size, workload, where)
    model.train()
    try:
        loss = workload.loss(model, batch)
    except Exception as e:
        raise WorkloadError(f"{where}: Workload.loss(model, batch) raised {_brief(e)}{_at(e)}{_DEBUG}") from e
    problem = describe_bad_loss(loss)
    if problem:
        raise WorkloadError(f"{where}: {problem}")
    try:
        loss.float().backward()
    except RuntimeError as e:
        raise WorkloadError(
            f"{where}: backward() on the loss failed: {_brief(e)}{_at(e)}; return a loss computed from the "
            "model's outputs with gradients on (no torch.no_grad(), no .detach(), no .item())"
        ) from e
    value = float(loss.detach())
    return CheckReport(type(model).__name__, n_params, size, value, time.monotonic() - started)


def describe_bad_loss(loss: Any) -> str | None:
    """Why ``loss`` is not what a workload's loss must return (a scalar tensor), with the likely fix."""
    import torch

    if isinstance(loss, torch.Tensor):
        if loss.numel() == 1:
            if not loss.is_floating_point():
                return f"Workload.loss returned an integer tensor ({loss.dtype}); return a floating-point loss"
            return None
        return (
            f"Workload.loss returned a tensor of shape {tuple(loss.shape)}, not a scalar; reduce it "
            "(e.g. .mean(), or reduction='mean' in the loss function)"
        )
    kind = type(loss).__name__
    if isinstance(getattr(loss, "loss", None), torch.Tensor):  # a Hugging Face ModelOutput
        return f"Workload.loss returned a {kind}, not a scalar tensor; return its .loss (e.g. model(**batch).loss)"
    if isinstance(loss, Mapping) and isinstance(loss.get("loss"), torch.Tensor):
        return f"Workload.loss returned a {kind}, not a scalar tensor; return its ['loss']"
    if isinstance(getattr(loss, "logits", None), torch.Tensor):  # a ModelOutput without a loss
        return (
            f"Workload.loss returned a {kind} that holds no loss; pass the labels to the model (model(**batch) "
            "with a 'labels' key) and return .loss, or compute the loss from its .logits"
        )
    if isinstance(loss, (tuple, list)) and loss and isinstance(loss[0], torch.Tensor) and loss[0].numel() == 1:
        return f"Workload.loss returned a {kind}, not a scalar tensor; return its first element ([0])"
    if isinstance(loss, (int, float)):
        return (
            f"Workload.loss returned a Python {kind}, not a tensor; return the loss tensor itself "
            "(autotune calls backward() on it), not .item()"
        )
    return f"Workload.loss returned {kind}, not a scalar tensor; return the loss tensor of the batch"


def _call_factory(factory: Any, name: str, where: str) -> Any:
    try:
        return factory()
    except TypeError as e:
        raise WorkloadError(
            f"{where}: Workload.{name}() raised {_brief(e)}{_at(e)}; Workload.{name} must be a factory that "
            f"takes no arguments (e.g. {name}=lambda: ...)"
        ) from e
    except Exception as e:
        raise WorkloadError(f"{where}: Workload.{name}() raised {_brief(e)}{_at(e)}{_DEBUG}") from e


def _check_checkpoint_modules(model: Any, workload: Workload, where: str) -> None:
    present = {type(m) for m in model.modules()}
    for kind in workload.checkpoint_modules:
        if kind not in present:
            counts: dict[str, int] = {}
            for m in model.modules():
                if any(True for _ in m.children()):
                    counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
            repeated = [f"{n} ({c})" for n, c in sorted(counts.items(), key=lambda x: -x[1]) if c > 1][:4]
            hint = f"repeated blocks in this model: {', '.join(repeated)}" if repeated else "check the type"
            raise WorkloadError(
                f"{where}: Workload.checkpoint_modules: the model contains no {kind.__name__} module; "
                f"name the block type it does contain ({hint})"
            )


def _dataset_len(dataset: Any, where: str) -> int:
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise WorkloadError(
            f"{where}: Workload.dataset() returned {type(dataset).__name__}, not a map-style dataset; "
            "return an object with __len__ and __getitem__ (a torch.utils.data.Dataset)"
        )
    try:
        size = len(dataset)
    except Exception as e:
        raise WorkloadError(f"{where}: len() of the dataset raised {_brief(e)}{_at(e)}{_DEBUG}") from e
    if size < 1:
        raise WorkloadError(f"{where}: the dataset is empty; Workload.dataset() must return samples")
    return size


def _collate(dataset: Any, size: int, workload: Workload, where: str) -> Any:
    from torch.utils.data import default_collate

    samples = []
    for i in range(min(SAMPLES, size)):
        try:
            samples.append(dataset[i])
        except Exception as e:
            raise WorkloadError(f"{where}: dataset[{i}] raised {_brief(e)}{_at(e)}{_DEBUG}") from e
    collate = workload.collate_fn or default_collate
    try:
        return collate(samples)
    except Exception as e:
        if workload.collate_fn is not None:
            raise WorkloadError(f"{where}: Workload.collate_fn raised {_brief(e)}{_at(e)}{_DEBUG}") from e
        raise WorkloadError(
            f"{where}: the DataLoader's default collate cannot stack {len(samples)} samples of the dataset "
            f"({_brief(e)}); return tensors of one shape from __getitem__ (pad or crop), or pass collate_fn="
        ) from e


@contextlib.contextmanager
def captured_output() -> Iterator[list[str]]:
    """Hold what the workload prints while it is imported and built (file descriptors 1 and 2: libraries
    log through handlers made at import), so that a refusal is one line; the caller decides whether to show
    the lines (they are in the yielded list once the block ends)."""
    lines: list[str] = []
    saved = []
    with tempfile.TemporaryFile(mode="w+b") as buffer:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd in (1, 2):
            saved.append(os.dup(fd))
            os.dup2(buffer.fileno(), fd)
        try:
            yield lines
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
            buffer.seek(0)
            lines.extend(buffer.read().decode(errors="replace").splitlines())


# ------------------------------------------------------------------------------------------------ warnings
def _values(spec: KnobSpec) -> tuple[Any, ...]:
    if isinstance(spec, Fixed):
        return (spec.value,)
    if isinstance(spec, Choices):
        return tuple(spec.choices)
    assert isinstance(spec, IntRange)  # the union has three members
    return (spec.low, spec.high)


def knobs_not_decided(spec: StudySpec) -> list[str]:
    """Searched knobs whose only effect the study's objectives cannot see (so no trial can decide them):
    ``lr_scaling`` when every objective is throughput or peak memory."""
    if not all(o.key in LR_BLIND_METRICS for o in spec.objectives):
        return []
    knob = spec.search_space.knobs().get("lr_scaling")
    return ["lr_scaling"] if knob is not None and len(set(_values(knob))) > 1 else []


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU has native bf16 (AVX512_BF16 or AMX); None when /proc/cpuinfo cannot be read."""
    try:
        with open(cpuinfo) as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    return any(flag in flags for flag in _NATIVE_BF16_FLAGS)


def study_warnings(spec: StudySpec, device: str) -> list[str]:
    """One line each: what the study file asks for that cannot matter or will hurt on this machine."""
    out = []
    metrics = ", ".join(o.metric for o in spec.objectives)
    if "lr_scaling" in knobs_not_decided(spec):
        out.append(
            f"search_space.lr_scaling: the objectives ({metrics}) cannot see the learning rate, so this study "
            "does not decide lr_scaling (the summary says so); fix it, or add a loss objective"
        )
    knobs = spec.search_space.knobs()
    accum = knobs.get("grad_accum")
    if accum is not None and len(set(_values(accum))) > 1 and all(o.key in LR_BLIND_METRICS for o in spec.objectives):
        out.append(
            f"search_space.grad_accum: the objectives ({metrics}) see its speed only, not what the larger global "
            "batch does to convergence; add a loss objective if that matters"
        )
    amp = knobs.get("amp")
    wants_bf16 = (amp is not None and "bf16" in _values(amp)) or spec.baseline.get("amp") == "bf16"
    if device == "cpu" and wants_bf16 and native_bf16() is False:
        out.append(
            "amp: bf16 on this CPU has no native bf16 (no AVX512_BF16/AMX flags): it is emulated and usually "
            "several times slower than fp32; drop bf16 from the choices here, or expect it to lose"
        )
    return out


_DEBUG = "; fix the workload (autotune --debug shows the traceback; validate --no-build skips this check)"


def _brief(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _at(e: BaseException) -> str:
    frame = user_frame(e.__traceback__)
    return f" at {frame.file}:{frame.line}" if frame else ""

