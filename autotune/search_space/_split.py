"""A held global batch (``constraints.global_batch``) and its feasible splits batch_size x grad_accum x world_size.

Under a held global batch the three knobs are one Optuna param, ``batch_split``, a categorical over the
feasible splits (``"64x2x2"``: batch_size x grad_accum x world_size). Every sampler (GP, TPE, random, grid,
...) then proposes only feasible splits and never spends a trial on an infeasible one: the alternative, two
knobs sampled and the third derived, proposes combinations whose third value is not an integer or lies outside
its range, and each would be a trial told infeasible without a measurement, steering a model-based sampler by
an artefact of the encoding rather than by the machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from autotune.spec import Choices, Fixed, IntRange, KnobSpec

SPLIT_PARAM = "batch_split"  # the Optuna param of a held global batch's split
SPLIT_KNOBS = ("batch_size", "grad_accum", "world_size")
_LISTED = 12  # splits named in a message before "... and N more"


class BatchSplit(NamedTuple):
    """One way to run a global batch: per-rank micro-batch x micro-batches accumulated x ranks."""

    batch_size: int
    grad_accum: int
    world_size: int

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.grad_accum * self.world_size

    @property
    def label(self) -> str:
        """The split as its ``batch_split`` param value: ``"64x2x2"``."""
        return f"{self.batch_size}x{self.grad_accum}x{self.world_size}"

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> BatchSplit:
        """The split of a config's (or a mapping's) batch_size, grad_accum and world_size."""
        return cls(*(int(values[name]) for name in SPLIT_KNOBS))

    @classmethod
    def parse(cls, label: str) -> BatchSplit:
        batch_size, grad_accum, world_size = (int(part) for part in label.split("x"))
        return cls(batch_size, grad_accum, world_size)


class NoFeasibleSplit(ValueError):
    """A held global batch that no split of the search space reaches (the message names the fix)."""


def admits(spec: KnobSpec, value: Any) -> bool:
    """Whether a knob spec holds ``value`` (same type: ``1`` is not ``True``)."""
    if isinstance(spec, Fixed):
        return bool(value == spec.value and type(value) is type(spec.value))
    if isinstance(spec, Choices):
        return any(value == c and type(value) is type(c) for c in spec.choices)
    return isinstance(value, int) and spec.low <= value <= spec.high and (value - spec.low) % spec.step == 0


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def feasible_splits(global_batches: Sequence[int], knobs: Mapping[str, KnobSpec]) -> tuple[BatchSplit, ...]:
    """Every split of each held global batch that ``knobs`` (batch_size, grad_accum, world_size specs) admit, in
    order of preference: the first global batch listed first, then fewer ranks, then less accumulation (the first
    split is the baseline's unless the study's ``baseline:`` says otherwise). Raises :class:`NoFeasibleSplit`
    naming the first global batch without one and how to give it one."""
    out: list[BatchSplit] = []
    for total in global_batches:
        found = [
            BatchSplit(total // (ranks * accum), accum, ranks)
            for ranks in _divisors(total)
            if admits(knobs["world_size"], ranks)
            for accum in _divisors(total // ranks)
            if admits(knobs["grad_accum"], accum)
            if admits(knobs["batch_size"], total // (ranks * accum))
        ]
        if not found:
            raise NoFeasibleSplit(_no_split(total, knobs))
        out += sorted(found, key=lambda s: (s.world_size, s.grad_accum))
    return tuple(out)


def _no_split(total: int, knobs: Mapping[str, KnobSpec]) -> str:
    ranks = [r for r in _divisors(total) if admits(knobs["world_size"], r)]
    needed = sorted(
        {total // (r * a) for r in ranks for a in _divisors(total // r) if admits(knobs["grad_accum"], a)}, reverse=True
    )
    space = ", ".join(f"{name} {describe(knobs[name])}" for name in SPLIT_KNOBS)
    head = f"no split batch_size x grad_accum x world_size of the search space ({space}) makes {total}"
    if not needed:
        return (
            f"{head}: no grad_accum x world_size here divides {total}; hold a multiple of them, or search "
            f"world_size or grad_accum values that divide it"
        )
    shown = ", ".join(str(b) for b in needed[:4])
    accum = "" if len(_values(knobs["grad_accum"])) > 1 else ", or search grad_accum (e.g. {choices: [1, 2, 4]})"
    return f"{head}; let batch_size reach {total} / (grad_accum x world_size), e.g. {{choices: [{shown}]}}{accum}"


def _values(spec: KnobSpec) -> tuple[Any, ...]:
    if isinstance(spec, Fixed):
        return (spec.value,)
    if isinstance(spec, Choices):
        return spec.choices
    return tuple(range(spec.low, spec.high + 1, spec.step))


def describe(spec: KnobSpec) -> str:
    """A knob spec in a message: ``64``, ``{1, 2}``, ``16..256``."""
    if isinstance(spec, Fixed):
        return str(spec.value)
    if isinstance(spec, Choices):
        return "{" + ", ".join(str(c) for c in spec.choices) + "}"
    assert isinstance(spec, IntRange)  # the union's third member
    return f"{spec.low}..{spec.high}" + (f" step {spec.step}" if spec.step != 1 else "")


def describe_splits(splits: Sequence[BatchSplit], listed: int = _LISTED) -> str:
    """``256x1x1, 128x2x1, ... and 3 more`` (batch_size x grad_accum x world_size)."""
    text = ", ".join(s.label for s in splits[:listed])
    return text + (f" and {len(splits) - listed} more" if len(splits) > listed else "")


def choose_split(splits: Sequence[BatchSplit], given: Mapping[str, Any]) -> BatchSplit:
    """The first (most preferred) split agreeing with the values ``given`` for batch_size, grad_accum and world_size
    (any subset of them); ValueError naming the given values and the splits when none agrees."""
    wanted = {name: given[name] for name in SPLIT_KNOBS if name in given}
    for split in splits:
        if all(getattr(split, name) == value for name, value in wanted.items()):
            return split
    said = " x ".join(f"{name} {value}" for name, value in wanted.items())
    totals = sorted({s.global_batch for s in splits})
    held = totals[0] if len(totals) == 1 else "{" + ", ".join(map(str, totals)) + "}"
    raise ValueError(
        f"{said} is no split of the held global batch {held} (constraints.global_batch); "
        f"give one of the feasible splits (batch_size x grad_accum x world_size): "
        f"{describe_splits(splits)}"
    )
