"""A study's knobs on the device it runs on: CUDA-only values dropped on a CPU study, and the notes that say what
was adjusted or what will hurt (numbered thread counts beside a searched rank or worker count)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.knobs import KNOBS
from autotune.spec import Choices, Fixed, IntRange, KnobSpec, single_value

CUDA_ONLY = {"amp": "fp16", "pin_memory": True}  # values that need CUDA (dropped from a CPU study's space)


def thread_count_notes(knobs: Mapping[str, KnobSpec]) -> list[str]:
    """A CPU study that searches threads_per_rank with a number above 1 beside a searched world_size or
    num_workers: a number is the same at every rank and worker count, so the search meets configurations
    with more busy threads than cores (2 threads x 2 ranks on 2 cores), and learns from them that more ranks
    or workers are slow (in benchmarks/calibration_gain.py every grid's best ran ``auto``, and studies that
    searched 1-2 lost). The words are resolved against the rank's share of the cores and never do."""
    threads = knobs["threads_per_rank"]
    if single_value(threads) or not any(isinstance(v, int) and v > 1 for v in _values(threads)):
        return []
    beside = [n for n in ("world_size", "num_workers") if not single_value(knobs[n])]
    if not beside:
        return []
    return [f"threads_per_rank: searched with numbers beside a searched {' and '.join(beside)}; a number is the "
            "same at every rank and worker count, so some configurations run more busy threads than cores; "
            "search the words resolved against each rank's share of the cores instead "
            "({choices: [auto, share, half]})"]


def _values(spec: KnobSpec) -> tuple[Any, ...]:
    if isinstance(spec, IntRange):
        return (spec.low, spec.high)
    if isinstance(spec, Choices):
        return tuple(spec.choices)
    return ()


def drop_value(name: str, spec: KnobSpec, bad: Any, notes: list[str]) -> KnobSpec:
    """Remove a CUDA-only value from a knob on a non-CUDA device, noting it."""
    default = KNOBS[name].default
    if isinstance(spec, Fixed) and spec.value == bad:
        notes.append(f"{name}: {bad} needs CUDA; using {default} on this device")
        return Fixed(value=default)
    if isinstance(spec, Choices) and bad in spec.choices:
        kept = tuple(c for c in spec.choices if c != bad)
        notes.append(f"{name}: {bad} needs CUDA; dropped from the choices on this device")
        return Choices(choices=kept) if kept else Fixed(value=default)
    return spec
