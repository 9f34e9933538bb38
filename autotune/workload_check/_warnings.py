"""The warnings ``autotune validate`` prints: knobs the objectives cannot see, bf16 on a CPU without native bf16."""

from __future__ import annotations

from typing import Any

from autotune.spec import Choices, Fixed, IntRange, KnobSpec, StudySpec

# Objectives that cannot see the learning rate: a knob whose only effect is on it is not decided by them.
LR_BLIND_METRICS = frozenset({"throughput_samples_s", "peak_memory_mb"})
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def _values(spec: KnobSpec) -> tuple[Any, ...]:
    if isinstance(spec, Fixed):
        return (spec.value,)
    if isinstance(spec, Choices):
        return tuple(spec.choices)
    assert isinstance(spec, IntRange)  # the union has three members
    return (spec.low, spec.high)


def knobs_not_decided(spec: StudySpec) -> list[str]:
    """Searched knobs whose only effect the study's objectives cannot see (so no trial can decide them):
    ``lr_scaling`` when every objective is throughput or peak memory (and the global batch is not held, which fixes
    it to none)."""
    if not all(o.key in LR_BLIND_METRICS for o in spec.objectives) or spec.constraints.global_batch is not None:
        return []  # a held global batch fixes lr_scaling to none
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
    held = spec.constraints.global_batch is not None  # grad_accum then changes the split, not the global batch
    if accum is not None and len(set(_values(accum))) > 1 and not held and all(
        o.key in LR_BLIND_METRICS for o in spec.objectives
    ):
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
