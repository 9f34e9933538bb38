"""``autotune validate``'s check of the workload for real: build it once, run the loss on one small batch.

In this process, on the CPU, without ranks: the model and the dataset are built once, two samples (a
stream's first two) are collated as the DataLoader would, and ``loss(model, batch)`` is called and
back-propagated. Each mistake a new user makes in a workload file (a factory that is an instance, a loss
that returns a ModelOutput or a tuple, a checkpoint type the model does not contain, samples that cannot be
stacked) is refused with one line naming the fix, instead of crashing every trial of a study. Also the
warnings that validate prints: knobs the objectives cannot see, and bf16 on a CPU without native bf16 (in
``_warnings``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.spec import StudySpec
from autotune.tracebacks import user_frame
from autotune.workload import Workload, is_stream, study_workload
from autotune.workload_check._mesh import mesh_facts

SAMPLES = 2  # the batch the loss is called on: enough to show that samples stack


@dataclass(frozen=True)
class CheckReport:
    """What the check built: for the one line validate prints."""

    model: str
    parameters: int
    dataset_len: int | None  # None: a stream (no len())
    loss: float
    seconds: float

    def line(self) -> str:
        size = "a stream" if self.dataset_len is None else f"{self.dataset_len:,} samples"
        batch = SAMPLES if self.dataset_len is None else min(SAMPLES, self.dataset_len)
        return (
            f"workload built: {self.model} ({self.parameters:,} parameters), {size}, "
            f"loss {self.loss:.4g} on a batch of {batch} ({self.seconds:.1f} s, CPU)"
        )


def check_workload(spec: StudySpec) -> CheckReport:
    """Build the study's workload and run its loss once; raise WorkloadError (one line) on a mistake."""
    import torch

    workload: Workload = study_workload(spec)
    where = f"{spec.source}: workload"
    started = time.monotonic()
    model = call_factory(workload.model, "model", where)
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"{where}: Workload.model() returned {type(model).__name__}, not a torch.nn.Module; "
            "return the model from the factory"
        )
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if n_params == 0:
        raise WorkloadError(f"{where}: the model has no trainable parameters; check Workload.model")
    _check_checkpoint_modules(model, workload, where)
    if workload.tp_plan or workload.pipeline_split:  # the plan's patterns and the split's names are the model's
        try:
            mesh_facts(workload, model)
        except WorkloadError as e:
            raise WorkloadError(f"{where}: {e}") from None
    dataset = call_factory(workload.dataset, "dataset", where)
    size = dataset_len(dataset, where)
    batch = collate_batch(dataset, size, workload, where)
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


def call_factory(factory: Any, name: str, where: str) -> Any:
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


def dataset_len(dataset: Any, where: str) -> int | None:
    """The size of a map-style dataset; None for a stream (an IterableDataset: read, never indexed)."""
    if is_stream(dataset):
        return None
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise WorkloadError(
            f"{where}: Workload.dataset() returned {type(dataset).__name__}, neither a map-style dataset nor a "
            "stream; return a torch.utils.data.Dataset (__len__ and __getitem__) or an IterableDataset"
        )
    try:
        size = len(dataset)
    except Exception as e:
        raise WorkloadError(f"{where}: len() of the dataset raised {_brief(e)}{_at(e)}{_DEBUG}") from e
    if size < 1:
        raise WorkloadError(f"{where}: the dataset is empty; Workload.dataset() must return samples")
    return size


def _first_samples(dataset: Any, size: int | None, where: str) -> list[Any]:
    """The first SAMPLES samples (fewer when the dataset holds fewer): indexed, or read from a stream."""
    if size is not None:
        samples = []
        for i in range(min(SAMPLES, size)):
            try:
                samples.append(dataset[i])
            except Exception as e:
                raise WorkloadError(f"{where}: dataset[{i}] raised {_brief(e)}{_at(e)}{_DEBUG}") from e
        return samples
    try:
        samples = list(itertools.islice(iter(dataset), SAMPLES))
    except Exception as e:
        raise WorkloadError(f"{where}: reading the stream raised {_brief(e)}{_at(e)}{_DEBUG}") from e
    if not samples:
        raise WorkloadError(f"{where}: the stream is empty; Workload.dataset() must yield samples")
    return samples


def collate_batch(dataset: Any, size: int | None, workload: Workload, where: str) -> Any:
    from torch.utils.data import default_collate

    samples = _first_samples(dataset, size, where)
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


_DEBUG = "; fix the workload (autotune --debug shows the traceback; validate --no-build skips this check)"


def _brief(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _at(e: BaseException) -> str:
    frame = user_frame(e.__traceback__)
    return f" at {frame.file}:{frame.line}" if frame else ""

