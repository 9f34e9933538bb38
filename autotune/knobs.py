"""The knob table: the knobs autotune searches, their types, bounds and defaults, and what the rooms read from it.

``TrialConfig``'s fields, the study file's ``search_space`` keys, DDP's and the trainers' keyword arguments,
``TrialConfig.short()`` and the bottleneck diagnosis are built from these rows, so a knob is a row here and its
application in the rank (``trial_runner/_apply.py``); docs/architecture.md counts the files. This module is pure
data (no Optuna, no torch) so that the study-file parser can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KnobDef:
    """One knob: its name, value type, whether it takes ``low``/``high`` ranges, and its default.

    ``default`` is the value of the workload's default configuration (the baseline). ``None`` for
    ``batch_size`` means "the workload's ``base_batch_size``".
    """

    name: str
    type: type
    default: Any
    help: str
    minimum: int | None = None
    values: tuple[Any, ...] | None = None
    words: tuple[str, ...] = ()  # strings an integer knob also takes (threads_per_rank: auto, share, half)
    ddp_only: bool = False  # applies with sharding ddp only (sampled only there; None otherwise)
    pipeline_only: bool = False  # applies with pipeline_parallel > 1 only (sampled only there; None otherwise)
    bottlenecks: tuple[str, ...] = ()  # which parts of a step it acts on (INPUT, COMPUTE, SYNC)
    ddp_argument: bool = False  # a DistributedDataParallel keyword argument of the same name
    hf_argument: str | None = None  # the transformers.TrainingArguments keyword that takes its value
    short: str = ""  # how TrialConfig.short() shows it ("bucket={}MB"; a bool: its word); "" never shows it
    short_always: bool = False  # shown at its default too (else only when it differs; never when None)
    core: bool = False  # named across the product (the batch split, the memory model...), not only here

    @property
    def ranged(self) -> bool:
        return self.type is int

    def describe_type(self) -> str:
        if self.values is not None:
            return "one of " + ", ".join(_show(v) for v in self.values)
        if self.type is int:
            kinds = [f"an integer >= {self.minimum}", *self.words]
            return kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " or " + kinds[-1]
        return self.type.__name__

    def check_value(self, value: Any) -> Any:
        """Return ``value`` if it is a valid value of this knob, else raise ValueError with the fix."""
        if self.type is int:
            if isinstance(value, str) and value in self.words:
                return value
            if isinstance(value, str) and self.words:
                raise ValueError(f"{_show(value)} is not a word it takes; give {self.describe_type()}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{_show(value)} is not an integer; give {self.describe_type()}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{value} is below the minimum {self.minimum}; give {self.describe_type()}")
            return value
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{_show(value)} is not true or false; give true or false")
            return value
        if self.values is not None and value not in self.values:
            raise ValueError(f"{_show(value)} is not a valid value; give {self.describe_type()}")
        return value


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if value else "''"
    return str(value)


INPUT, COMPUTE, SYNC = "input pipeline", "computation", "gradient synchronisation"
"""The bottlenecks a knob acts on (``bottlenecks=``): the step's parts autotune's knobs move."""

LR_SCALING_RULES = ("none", "linear", "sqrt")
AMP_MODES = ("off", "bf16", "fp16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
SHARDING_MODES = ("ddp", "fsdp", "fsdp_no_reshard")
PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")

KNOBS: dict[str, KnobDef] = {
    k.name: k
    for k in (
        KnobDef("batch_size", int, None, "per-rank micro-batch size", minimum=1, core=True,
                bottlenecks=(INPUT, COMPUTE, SYNC),  # more work per step for every part
                hf_argument="per_device_train_batch_size", short="bs={}", short_always=True),
        KnobDef("grad_accum", int, 1, "micro-batches accumulated per optimizer step", minimum=1, core=True,
                bottlenecks=(COMPUTE, SYNC),  # one synchronisation per grad_accum micro-batches
                hf_argument="gradient_accumulation_steps", short="accum={}"),
        KnobDef(
            "lr_scaling",
            str,
            "sqrt",
            "how the learning rate follows the global batch: none, linear or sqrt",
            values=LR_SCALING_RULES,
            core=True,  # the learning rate: no part of a step's time
        ),
        KnobDef("num_workers", int, 0, "DataLoader worker processes per rank", minimum=0, core=True,
                bottlenecks=(INPUT,), hf_argument="dataloader_num_workers", short="workers={}", short_always=True),
        KnobDef(
            "prefetch_factor",
            int,
            2,
            "batches each DataLoader worker loads ahead (num_workers > 0)",
            minimum=1,
            core=True,
            bottlenecks=(INPUT,),
            hf_argument="dataloader_prefetch_factor",
            short="prefetch={}",
            short_always=True,
        ),
        KnobDef("pin_memory", bool, False, "page-locked host memory for batches (CUDA only)", core=True,
                bottlenecks=(INPUT,), hf_argument="dataloader_pin_memory", short="pin"),
        KnobDef(
            "amp",
            str,
            "off",
            "automatic mixed precision: off, bf16 or fp16 (fp16: CUDA only)",
            values=AMP_MODES,
            core=True,
            bottlenecks=(COMPUTE, SYNC),
            short="amp={}",
        ),
        KnobDef(
            "activation_checkpointing", bool, False, "recompute the workload's checkpoint_modules in backward",
            core=True, bottlenecks=(COMPUTE,), hf_argument="gradient_checkpointing", short="ckpt",
        ),
        KnobDef("bucket_cap_mb", int, 25, "DDP gradient bucket size in MB (sharding ddp)", minimum=1, ddp_only=True,
                bottlenecks=(SYNC,), ddp_argument=True, hf_argument="ddp_bucket_cap_mb", short="bucket={}MB",
                short_always=True),
        KnobDef("world_size", int, 1, "ranks of a trial; world_size / (tensor_parallel x pipeline_parallel) of them "
                "are the data-parallel degree", minimum=1, core=True,
                bottlenecks=(SYNC, INPUT, COMPUTE), short="ws={}", short_always=True),
        KnobDef(
            "threads_per_rank",
            int,
            "auto",
            "intra-op threads of each rank (torch, OpenMP, MKL): a number, or a word resolved in each rank "
            "against its share of the cores (cores // ranks on its machine): share, half (of the share) or auto "
            "(the share less the rank's DataLoader workers); each at least 1",
            minimum=1,
            words=("auto", "share", "half"),  # resolved in trial_runner/_apply.py (THREAD_WORDS)
            core=True,
            bottlenecks=(COMPUTE, INPUT),  # intra-op threads share the cores with the DataLoader workers
            short="threads={}",
        ),
        KnobDef(
            "compile",
            str,
            "off",
            "torch.compile mode of the model (compiled in the warm-up, timed as compile_s)",
            values=COMPILE_MODES,
            core=True,
            bottlenecks=(COMPUTE,),
            short="compile={}",
        ),
        KnobDef(
            "sharding",
            str,
            "ddp",
            "ddp replicates the model; fsdp shards parameters (FSDP2, resharded after forward); "
            "fsdp_no_reshard keeps them gathered",
            values=SHARDING_MODES,
            core=True,
            bottlenecks=(SYNC, COMPUTE),
            short="{}",
        ),
        KnobDef(
            "gradient_as_bucket_view", bool, False, "DDP gradients are views into its buckets (sharding ddp)",
            ddp_only=True, bottlenecks=(SYNC,), ddp_argument=True, short="grad_view",
        ),
        KnobDef("static_graph", bool, False, "DDP static_graph: the same graph every step (sharding ddp)",
                ddp_only=True, bottlenecks=(SYNC,), ddp_argument=True, short="static_graph"),
        KnobDef(
            "tensor_parallel", int, 1,
            "tensor-parallel degree: ranks that split each layer's weights (the mesh's innermost axis, tp)",
            minimum=1, core=True, bottlenecks=(COMPUTE, SYNC), short="tp={}",
        ),
        KnobDef(
            "pipeline_parallel", int, 1,
            "pipeline-parallel degree: stages the model is split into along its depth (the mesh's outer axis, pp)",
            minimum=1, core=True, bottlenecks=(COMPUTE, SYNC), short="pp={}",
        ),
        KnobDef(
            "pipeline_schedule", str, "1f1b",
            "the pipeline's schedule: gpipe, 1f1b or interleaved_1f1b (two stages a rank; pipeline_parallel > 1)",
            values=PIPELINE_SCHEDULES, pipeline_only=True, core=True, bottlenecks=(COMPUTE,), short="{}",
        ),
        KnobDef(
            "pipeline_microbatches", int, 4,
            "micro-batches each step's batch is split into along the pipeline (pipeline_parallel > 1)",
            minimum=1, pipeline_only=True, core=True, bottlenecks=(COMPUTE,), short="mb={}", short_always=True,
        ),
    )
}

BASE_KNOBS = tuple(list(KNOBS)[:10])
"""The ten knobs of the first study-file contract; configuration keys always name these."""

DDP_ONLY = tuple(name for name, knob in KNOBS.items() if knob.ddp_only)
"""Knobs that apply with ``sharding: ddp`` only: sampled only there, None in a config otherwise."""

PIPELINE_ONLY = tuple(name for name, knob in KNOBS.items() if knob.pipeline_only)
"""Knobs that apply with ``pipeline_parallel > 1`` only: sampled only there, None in a config otherwise."""

MESH_KNOBS = ("tensor_parallel", "pipeline_parallel")
"""The degrees that split the ranks besides data parallelism; ``world_size / (tp * pp)`` is the data-parallel one."""

DDP_ARGUMENTS = tuple(name for name, knob in KNOBS.items() if knob.ddp_argument)
"""Knobs that are keyword arguments of ``DistributedDataParallel`` (the rank's DDP, ``Calibration.ddp_kwargs``)."""

_SHORT_FIRST = ("batch_size", "grad_accum", "world_size", "num_workers", "prefetch_factor", "amp",
                "activation_checkpointing", "pin_memory")
SHORT_ORDER = _SHORT_FIRST + tuple(name for name in KNOBS if name not in _SHORT_FIRST)
"""The order of the knobs in ``TrialConfig.short()``: the batch split and the input pipeline first."""


def short_part(knob: KnobDef, value: Any) -> str | None:
    """How ``TrialConfig.short()`` shows ``value`` of ``knob``; None when it is not shown."""
    if not knob.short or value is None or (value == knob.default and not knob.short_always):
        return None
    if isinstance(value, bool):  # a bool shows its word when on, ``word=false`` when off against a true default
        return knob.short if value else f"{knob.short}=false"
    return knob.short.format(value)


def ddp_arguments(config: Any) -> dict[str, Any]:
    """A configuration's DDP knobs (``ddp_argument=``) as ``DistributedDataParallel`` keyword arguments: what the
    rank passes to DDP and ``Calibration.ddp_kwargs()`` gives the user (sharding ddp only)."""
    return {name: getattr(config, name) for name in DDP_ARGUMENTS}

