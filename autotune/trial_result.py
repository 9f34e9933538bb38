"""What a trial ends with: its outcome and the metrics measured so far."""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

R = TypeVar("R")

# Every record a rank writes and the monitor reads is a dataclass with this config: an unknown key is an error.
RECORD_CONFIG = ConfigDict(extra="forbid")


class RecordError(ValueError):
    """A record a rank wrote (a window, done.json, applied.json, an error record) that does not parse."""


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type[R]) -> TypeAdapter[R]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def parse_record(cls: type[R], data: Any, what: str) -> R:
    """``data`` (parsed JSON) as a ``cls`` record, or a RecordError naming ``what``, the field and the problem."""
    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise RecordError(f"{what}: {where}: {first['msg']} (a {cls.__name__} record)") from None


class Outcome(str, enum.Enum):
    """How a trial ended. Every outcome but COMPLETE keeps the metrics measured until then."""

    COMPLETE = "complete"
    PRUNED = "pruned"
    OOM = "oom"  # CUDA out of memory agreed across ranks, or over the memory budget
    DIVERGED = "diverged"  # NaN or inf loss
    CRASHED = "crashed"  # a rank failed; error_lines holds its last lines
    TIMEOUT = "timeout"  # over max_seconds
    HANG = "hang"  # silent for hang_seconds, or a collective timed out

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepAnatomy:
    """Where a step's time went, in seconds per step (docs/reference/trial.md, "Step anatomy"): waiting for the next
    batch, forward and backward, gradient synchronisation not hidden behind computation (None under FSDP, whose
    collectives stay inside ``forward_backward_s``), the optimizer step, and the rest of the step (the loop's
    own work, the window's reduction); ``data_wait_share`` is the wait's part of the step (0-1)."""

    __pydantic_config__ = RECORD_CONFIG

    data_wait_s: float
    forward_backward_s: float
    sync_exposed_s: float | None
    optimizer_s: float
    other_s: float
    data_wait_share: float
    pipeline_bubble_s: float | None = None  # a pipeline's stages idle within the step (None: no pipeline)
    tp_comm_exposed_s: float | None = None  # tensor-parallel collectives the step waited for (None: no tp)

    @property
    def step_s(self) -> float:
        """The step the parts add up to."""
        sync = (self.sync_exposed_s or 0.0) + (self.pipeline_bubble_s or 0.0) + (self.tp_comm_exposed_s or 0.0)
        return self.data_wait_s + self.forward_backward_s + sync + self.optimizer_s + self.other_s

    @classmethod
    def of(cls, step_s: float, data_wait_s: float, forward_backward_s: float, sync_exposed_s: float | None,
           optimizer_s: float, pipeline_bubble_s: float | None = None,
           tp_comm_exposed_s: float | None = None) -> StepAnatomy:
        """From a step's measured time and its timed parts: ``other_s`` is what the parts leave of the step."""
        mesh = (pipeline_bubble_s or 0.0) + (tp_comm_exposed_s or 0.0)
        timed = data_wait_s + forward_backward_s + (sync_exposed_s or 0.0) + optimizer_s + mesh
        return cls(
            data_wait_s=round(data_wait_s, 7),
            forward_backward_s=round(forward_backward_s, 7),
            sync_exposed_s=None if sync_exposed_s is None else round(sync_exposed_s, 7),
            optimizer_s=round(optimizer_s, 7),
            other_s=round(max(0.0, step_s - timed), 7),
            data_wait_share=round(data_wait_s / max(step_s, timed), 4) if max(step_s, timed) > 0 else 0.0,
            pipeline_bubble_s=None if pipeline_bubble_s is None else round(pipeline_bubble_s, 7),
            tp_comm_exposed_s=None if tp_comm_exposed_s is None else round(tp_comm_exposed_s, 7),
        )


@dataclass(frozen=True)
class GradientNoise:
    """A window's squared gradient norms at two batch sizes (docs/reference/objectives.md, "Gradient noise scale"): the
    mean over its ``steps`` of ``|g_small|^2`` (also over the ranks: each rank's gradient before the all-reduce,
    or each micro-batch's under grad_accum at one rank) and of ``|g_big|^2`` (the all-reduced or accumulated
    gradient), ``batch_small`` and ``batch_big`` samples each."""

    __pydantic_config__ = RECORD_CONFIG

    batch_small: int
    batch_big: int
    steps: int
    sqr_small: float
    sqr_big: float


@dataclass(frozen=True)
class NoiseScale:
    """A trial's gradient noise scale ``B_noise`` in samples (None: the norms did not resolve it), its ~95%
    interval (None: unbounded), how (``interval``), and what it came from: ``source`` (``ddp``: per-rank
    gradients against the all-reduced one; ``grad_accum``: micro-batches against the accumulated one),
    the two batch sizes, the measured steps and windows."""

    __pydantic_config__ = RECORD_CONFIG

    value: float | None
    low: float | None
    high: float | None
    batch_small: int
    batch_big: int
    steps: int
    windows: int
    source: str
    interval: str


@dataclass(frozen=True)
class Window:
    """One reporting window, as rank 0 writes it to metrics.jsonl (all ranks already reduced): the window record."""

    __pydantic_config__ = RECORD_CONFIG

    step: int  # optimizer steps done (warm-up included)
    samples: int  # samples seen by the whole job (warm-up included)
    elapsed_s: float  # seconds since the trial was launched
    window_throughput_samples_s: float  # this window: global samples / the slowest rank's time
    throughput_samples_s: float  # all measured steps so far
    loss: float  # mean over ranks and over the window's steps
    peak_memory_mb: float  # largest rank so far
    time_to_first_step_s: float  # launch -> first step finished
    warmup_steps: int | None = None  # steps before the measured part (None: a record from before steady warm-up)
    settled: bool | None = None  # the warm-up's probe windows agreed before measuring (fixed warm-up: True)
    step_anatomy: StepAnatomy | None = None  # the slowest rank's (None: not measured)
    step_anatomy_mean: StepAnatomy | None = None  # each part's mean over the ranks
    gradient_noise: GradientNoise | None = None  # None: not measured (FSDP; one rank without grad_accum)

    @classmethod
    def from_json(cls, data: Any, what: str = "window") -> Window:
        """A window record; RecordError when ``data`` is not one (a missing or unknown key, a wrong type)."""
        return parse_record(cls, data, what)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _step_s(window: Window) -> float:
    return window.step_anatomy.step_s if window.step_anatomy is not None else 0.0


# Student's t, two-sided 95%, by degrees of freedom (1..30); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """Student's t for a two-sided 95% interval with ``df`` degrees of freedom (1.96 past 30)."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def throughput_spread(windows: Sequence[Window]) -> float | None:
    """The relative half-width of the ~95% interval of the mean of the windows' throughputs (Student's t):
    0.04 is ±4%. None with fewer than 2 windows."""
    values = [w.window_throughput_samples_s for w in windows]
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean <= 0:
        return None
    return t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)) / mean


@dataclass
class TrialResult:
    """The record of one trial. ``to_attrs()`` is what is stored on the Optuna trial (user attributes)."""

    outcome: Outcome
    reason: str = ""
    throughput_samples_s: float | None = None
    peak_memory_mb: float | None = None  # CUDA: device memory (max_memory_allocated); CPU: host memory (PSS)
    host_memory_mb: float | None = None  # the largest rank tree's host memory (PSS) as the monitor sampled it
    loss: float | None = None
    eval_loss: float | None = None  # held-out loss at the end (workloads with an eval_dataset, complete trials)
    steps: int = 0
    samples: int = 0
    time_to_first_step_s: float | None = None
    wall_s: float = 0.0  # launch -> every process of the trial gone
    training_s: float = 0.0  # time inside measured (post-warm-up) steps, the slowest rank's
    training_span_s: float = 0.0  # the training loop's wall-clock span, warm-up included (rank 0)
    compile_s: float | None = None  # torch.compile's time in the first step (never inside throughput)
    threads_per_rank: int | None = None  # the intra-op threads each rank ran with (auto resolved)
    hosts: list[str] = field(default_factory=list)  # the hostname each rank ran on, by rank
    machine_load: float | None = None  # others' CPU time on the held cores / their capacity (None: not measured)
    busy: bool | None = None  # machine_load over trial_runner's BUSY_LOAD, or another process on a held GPU
    gpu_other_processes: int | None = None  # compute processes not the trial's on its GPUs (None: not asked)
    warmup_steps_used: int | None = None  # steps before the measured part (steady warm-up: until settled)
    settled: bool | None = None  # the windows settled before measuring (False: the cap was reached; low confidence)
    throughput_spread: float | None = None  # relative half-width of the measured windows' ~95% interval
    step_anatomy: StepAnatomy | None = None  # the slowest rank's in the median window (by step time)
    step_anatomy_mean: StepAnatomy | None = None  # the ranks' mean in that window
    gradient_noise_scale: NoiseScale | None = None  # None: not measurable in this configuration, or no window
    global_batch: int | None = None  # the trial's, and the workload's base_batch_size (goodput's efficiency)
    base_batch_size: int | None = None
    windows: list[Window] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)
    trial_dir: str = ""

    @property
    def overhead_s(self) -> float | None:
        """Wall time not spent in the training loop: launch, imports, rendezvous, build, teardown."""
        return self.wall_s - self.training_span_s if self.training_span_s else None

    def take_windows(self, windows: list[Window]) -> None:
        """Keep ``windows`` and read the measured numbers off them: the last window's throughput, loss, steps,
        samples and time to first step, and the largest peak memory of any window."""
        self.windows = windows
        if windows:
            last = windows[-1]
            self.throughput_samples_s, self.loss = last.throughput_samples_s, last.loss
            self.peak_memory_mb = max(w.peak_memory_mb for w in windows)
            self.steps, self.samples = last.step, last.samples
            self.time_to_first_step_s = last.time_to_first_step_s
            self.warmup_steps_used, self.settled = last.warmup_steps, last.settled
        self.throughput_spread = throughput_spread(windows)
        # The step anatomy of the median window (by its step time; the lower one of an even count): a window's
        # parts add up to its step, and so the trial's add up to its median step.
        timed = sorted((w for w in windows if w.step_anatomy is not None), key=_step_s)
        if timed:
            middle = timed[(len(timed) - 1) // 2]
            self.step_anatomy, self.step_anatomy_mean = middle.step_anatomy, middle.step_anatomy_mean

    def metrics(self) -> dict[str, float | None]:
        return {
            "throughput_samples_s": self.throughput_samples_s,
            "peak_memory_mb": self.peak_memory_mb,
            "loss": self.loss,
            "eval_loss": self.eval_loss,
        }

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialResult:
        data = dict(data)
        data["outcome"] = Outcome(data["outcome"])
        data["windows"] = [Window.from_json(w) for w in data.get("windows", [])]
        for key in ("step_anatomy", "step_anatomy_mean"):
            if isinstance(data.get(key), dict):
                data[key] = parse_record(StepAnatomy, data[key], key)
        noise = data.get("gradient_noise_scale")
        if isinstance(noise, dict):
            data["gradient_noise_scale"] = parse_record(NoiseScale, noise, "gradient_noise_scale")
        return cls(**data)
