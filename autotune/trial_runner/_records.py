"""What a rank writes and the monitor reads, each a dataclass defined once and read through the same definition.

The window record is :class:`autotune.trial_result.Window` (a line of metrics.jsonl); here are done.json
(:class:`DoneRecord`), applied.json (:class:`AppliedRecord`) and errors/rank<N>.json (:class:`RankErrorRecord`).
A record that does not parse (a missing or unknown key, a wrong type) raises
:class:`~autotune.trial_result.RecordError` naming the file and the field: never a silent drop.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from autotune.trial_result import RECORD_CONFIG, RecordError, Window, parse_record

R = TypeVar("R")


@dataclass
class DoneRecord:
    """done.json: rank 0's summary of a run that left its training loop by itself."""

    __pydantic_config__ = RECORD_CONFIG

    outcome: str  # an Outcome's value: complete, diverged
    reason: str
    steps: int
    samples: int
    training_s: float  # the slowest rank's time in measured steps
    loss: float | None
    peak_memory_mb: float
    time_to_first_step_s: float | None
    compile_s: float | None
    threads_per_rank: int
    training_span_s: float  # wall-clock span of the training loop, so launch overhead = wall - span
    eval_loss: float | None = None


@dataclass
class RankErrorRecord:
    """errors/rank<N>.json: what a rank died of."""

    __pydantic_config__ = RECORD_CONFIG

    rank: int
    kind: str  # oom | timeout | peer | error (see _rank.classify)
    type: str
    message: str
    lines: list[str]
    time: float
    where: str | None = None  # the innermost frame in the workload's code


@dataclass
class ThreadsSetting:
    __pydantic_config__ = RECORD_CONFIG

    setting: int | str
    resolved: int


@dataclass
class LoaderFacts:
    """The DataLoader as built."""

    __pydantic_config__ = RECORD_CONFIG

    batch_size: int | None
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    sampler: str | None  # None for a stream
    split: str | None = None  # how a stream was split among ranks and workers


@dataclass
class WarmupFacts:
    """What the warm-up did (see _warmup.Warmup)."""

    __pydantic_config__ = RECORD_CONFIG

    mode: str  # steady | fixed
    steps_used: int | None
    settled: bool
    probe_steps: int
    cap_steps: int
    tolerance: float
    probe_throughputs: list[float]


@dataclass
class RankFacts:
    """What one rank applied, gathered to rank 0: a knob that reached only rank 0 shows here."""

    __pydantic_config__ = RECORD_CONFIG

    rank: int
    torch_threads: int
    blas_threads: int | None
    thread_env: dict[str, str | None]
    env: dict[str, str | None]
    env_at_start: dict[str, str | None]  # as the process started (a forked rank: as its zygote started)
    thread_env_at_start: dict[str, str | None]
    compiled: bool
    dtensor_params: int
    local_param_numel: int
    param_numel: int
    ddp: bool
    mesh: dict[str, int] | None = None  # the rank's coordinates in the parallel mesh (pp, dp, tp); None without


# applied.json keeps a key only once it is known (a DDP key only under DDP, compile_s only when compiled).
_NULL_KEPT = {"autocast_dtype"}  # null once autocast was looked at: autocast off


@dataclass
class AppliedRecord:
    """applied.json: what rank 0 applied (DataLoader, DDP, autocast, checkpointing, lr), written as it learns it."""

    __pydantic_config__ = RECORD_CONFIG

    torch_threads: int | None = None
    threads_per_rank: ThreadsSetting | None = None
    checkpoint_wrappers: int | None = None
    fsdp_units: int | None = None
    fsdp_reshard_after_forward: bool | None = None
    tensor_parallel_by: str | None = None  # the mesh: parallelize (the hook), tp_plan, hf_plan or none
    ddp_bucket_bytes_cap: int | None = None
    ddp_gradient_as_bucket_view: bool | None = None
    ddp_static_graph: bool | None = None
    knobs: dict[str, Any] | None = None  # a knob without a field of its own, as the rank applied it (read back)
    ranks: list[RankFacts] | None = None
    optimizer_lr: list[float] | None = None
    optimizer_kwargs: dict[str, Any] | None = None
    grad_scaler: bool | None = None
    dataloader: LoaderFacts | None = None
    autocast_enabled: bool | None = None
    autocast_dtype: str | None = None
    compile_s: float | None = None
    warmup: WarmupFacts | None = None
    allreduce_calls_first_step: int | None = None  # plan.trace: DDP all-reduce calls (tests)
    allreduce_calls_total: int | None = None
    steps: int | None = None
    gc_frozen: int | None = None  # start-up's objects kept out of the garbage collector's scans (gc.freeze)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        keep = _NULL_KEPT if self.autocast_enabled is not None else set()
        return {k: v for k, v in data.items() if v is not None or k in keep}


def write_record(path: Path, record: Any) -> None:
    """Write ``record`` (one of this module's records) atomically: a reader sees the old file or the new one."""
    data = record.to_json() if hasattr(record, "to_json") else asdict(record)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def read_record(path: Path, cls: type[R]) -> R | None:
    """The ``cls`` record in ``path``; None when there is no such file; RecordError when it does not parse."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RecordError(f"{path.name}: cannot be read: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RecordError(f"{path.name}: not JSON: {e}") from None
    return parse_record(cls, data, path.name)


def window_line(window: Window) -> str:
    """The metrics.jsonl line of ``window``."""
    return json.dumps(window.to_json()) + "\n"


def parse_window_line(line: bytes, where: str) -> Window:
    """A metrics.jsonl line as a Window; RecordError naming ``where`` when it is not one."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise RecordError(f"{where}: not JSON: {e}") from None
    return Window.from_json(data, where)
