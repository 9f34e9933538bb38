"""The parallel mesh of a trial, searched as one Optuna param of its feasible layouts.

A mesh is ``pipeline_parallel x data_parallel x tensor_parallel`` ranks (``world_size`` in all), and a pipeline
adds its schedule and micro-batch count. Which combinations can run depends on each other and on the model: the
product of the degrees divides ``world_size``, a tensor degree divides the attention heads and the dimensions
the plan splits, a pipeline has no more stages than its split points allow, 1F1B needs at least as many
micro-batches as stages, and ``batch_size`` splits evenly into the micro-batches. Sampled one knob at a time,
most proposals would be infeasible: as for a held global batch (``_split.py``), the coupled knobs are then one
categorical param, ``mesh``, over the feasible layouts only, so every sampler proposes only meshes that run.
Under a held global batch the layout also carries the batch split (its data-parallel degree counts).

A study whose tensor and pipeline degrees can only be 1 never meets this: ``world_size`` and the batch stay
their own params, as before the mesh existed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from autotune.search_space._split import _divisors, admits, describe
from autotune.spec import Choices, Fixed, IntRange, KnobSpec, only_value, single_value

if TYPE_CHECKING:
    from autotune.workload_check import MeshFacts

MESH_PARAM = "mesh"  # the Optuna param of the feasible layouts
LAYOUT_KNOBS = ("world_size", "tensor_parallel", "pipeline_parallel", "pipeline_schedule", "pipeline_microbatches")
MAX_LAYOUTS = 20_000  # a space with more feasible layouts is refused: search fewer values
_INTERLEAVED = "interleaved_1f1b"
_STAGED = ("1f1b", _INTERLEAVED)  # schedules that need at least as many micro-batches as pipeline ranks


class NoFeasibleMesh(ValueError):
    """A search space none of whose meshes can run (the message names why the first one cannot, and the fix)."""


class Layout(NamedTuple):
    """One feasible mesh (and, where the search couples them, the batch split that goes with it)."""

    world_size: int
    tensor_parallel: int
    pipeline_parallel: int
    pipeline_schedule: str | None
    pipeline_microbatches: int | None
    batch_size: int | None = None  # part of the layout where batch_size must split into the micro-batches
    grad_accum: int | None = None  # part of the layout under a held global batch

    @property
    def data_parallel(self) -> int:
        return self.world_size // (self.tensor_parallel * self.pipeline_parallel)

    @property
    def mesh_label(self) -> str:
        """``pp2.dp1.tp2``, with the pipeline's schedule and micro-batches where it has one:
        ``pp2.dp1.tp2.1f1b.mb4``."""
        text = f"pp{self.pipeline_parallel}.dp{self.data_parallel}.tp{self.tensor_parallel}"
        if self.pipeline_parallel > 1:
            text += f".{self.pipeline_schedule}.mb{self.pipeline_microbatches}"
        return text

    @property
    def label(self) -> str:
        """The layout as its ``mesh`` param value: ``64x2 pp1.dp2.tp2`` (batch_size x grad_accum under a held
        global batch), ``bs64 pp2.dp1.tp1.1f1b.mb4`` (a batch_size coupled to the micro-batches), or the mesh."""
        if self.grad_accum is not None:
            return f"{self.batch_size}x{self.grad_accum} {self.mesh_label}"
        if self.batch_size is not None:
            return f"bs{self.batch_size} {self.mesh_label}"
        return self.mesh_label

    @classmethod
    def parse(cls, label: str) -> Layout:
        batch: int | None = None
        accum: int | None = None
        head, _, mesh = label.rpartition(" ")
        if head.startswith("bs"):
            batch = int(head[2:])
        elif head:
            batch, accum = (int(part) for part in head.split("x"))
        parts = mesh.split(".")
        pp, dp, tp = (int(part[2:]) for part in parts[:3])
        schedule = parts[3] if len(parts) > 3 else None
        micro = int(parts[4][2:]) if len(parts) > 4 else None
        return cls(pp * dp * tp, tp, pp, schedule, micro, batch, accum)

    def knobs(self) -> dict[str, Any]:
        """The knob values this layout fixes (batch_size and grad_accum only where it carries them)."""
        values = {name: getattr(self, name) for name in LAYOUT_KNOBS}
        for name in ("batch_size", "grad_accum"):
            if getattr(self, name) is not None:
                values[name] = getattr(self, name)
        return values


def mesh_problem(values: Mapping[str, Any], facts: MeshFacts | None) -> str | None:
    """Why the knob ``values`` (world_size, the degrees, the pipeline's knobs, batch_size) cannot run on the
    model ``facts`` describe: one line naming the knob and the fix; None when they can. The one rule of what
    is feasible: the search proposes only what passes it, and a study that fixes what fails is refused."""
    world, tp, pp = int(values["world_size"]), int(values["tensor_parallel"]), int(values["pipeline_parallel"])
    if world % (tp * pp):
        return (f"tensor_parallel x pipeline_parallel ({tp} x {pp}) does not divide world_size ({world}); give a "
                "world_size that is a multiple of their product")
    if (tp > 1 or pp > 1) and values.get("compile", "off") != "off":
        return (f"compile {values['compile']} does not combine with tensor_parallel {tp} x pipeline_parallel {pp}; "
                "keep compile off on a tensor- or pipeline-parallel mesh")
    if tp > 1 and facts is not None:
        if facts.tensor_plan is None:
            return (f"tensor_parallel {tp}: the workload does not say how its layers split; add Workload.tp_plan "
                    "(module-name patterns to colwise/rowwise) or Workload.parallelize(model, mesh, config)")
        if facts.sequence_without_hook:
            return (f"tensor_parallel {tp}: Workload.tp_plan's sequence entries need a parallelize hook that shards "
                    "the activations around them (plain colwise/rowwise layers do not); add Workload.parallelize or "
                    "drop the sequence entries")
        for where, size in (*facts.heads, *facts.split_dims):
            if size % tp:
                return (f"tensor_parallel {tp} does not divide the model's {where} ({size}); give a tensor degree "
                        f"that divides it (e.g. {_largest_divisor(size, tp)})")
    if pp == 1:
        return None
    if values.get("amp") == "fp16":
        return (f"amp fp16 does not combine with pipeline_parallel {pp} (a pipeline has no gradient scaler); use "
                "amp bf16 or off")
    schedule, micro = str(values.get("pipeline_schedule")), int(values.get("pipeline_microbatches") or 1)
    stages = pp * (2 if schedule == _INTERLEAVED else 1)
    if facts is not None and (facts.split_points is None or not facts.pipeline_loss):
        return (f"pipeline_parallel {pp}: the workload does not say how its model runs as a pipeline; add "
                "Workload.pipeline_split (module names, each the first of a stage) and Workload.pipeline_loss"
                "(output, target) (the last stage's loss)")
    if facts is not None and stages > facts.max_stages:
        two = " (interleaved_1f1b runs two stages a rank)" if schedule == _INTERLEAVED else ""
        return (f"pipeline_parallel {pp} needs {stages} stages{two}, but the workload's pipeline_split makes at most "
                f"{facts.max_stages}; give a pipeline degree of at most {facts.max_stages // (stages // pp)} or "
                "more split points")
    if schedule in _STAGED and micro < pp:
        return (f"pipeline_microbatches {micro} is below pipeline_parallel {pp}: {schedule} needs at least one "
                f"micro-batch a stage; give pipeline_microbatches >= {pp} or pipeline_schedule gpipe")
    if schedule == _INTERLEAVED and micro % pp:
        return (f"pipeline_microbatches {micro}: interleaved_1f1b runs the micro-batches in rounds of "
                f"pipeline_parallel ({pp}); give a multiple of {pp}")
    batch = values.get("batch_size")
    if batch is not None and int(batch) % micro:
        return (f"batch_size {batch} does not split into {micro} micro-batches (pipeline_microbatches); give a "
                f"batch_size that is a multiple of {micro}")
    return None


def _largest_divisor(size: int, below: int) -> int:
    return max(d for d in _divisors(size) if d < below)


def mesh_in_play(knobs: Mapping[str, KnobSpec]) -> bool:
    """Whether a tensor or pipeline degree above 1 can occur: only then is the mesh a layout of its own."""
    return any(v > 1 for name in ("tensor_parallel", "pipeline_parallel") for v in values_of(knobs[name]))


def values_of(spec: KnobSpec) -> tuple[Any, ...]:
    if isinstance(spec, Fixed):
        return (spec.value,)
    if isinstance(spec, Choices):
        return spec.choices
    assert isinstance(spec, IntRange)  # the union's third member
    if spec.log:
        return tuple(range(spec.low, spec.high + 1))
    return tuple(range(spec.low, spec.high + 1, spec.step))


def _pipelines(knobs: Mapping[str, KnobSpec], pp: int) -> list[tuple[str | None, int | None]]:
    if pp == 1:
        return [(None, None)]
    return [(s, m) for s in values_of(knobs["pipeline_schedule"]) for m in values_of(knobs["pipeline_microbatches"])]


def feasible_layouts(
    knobs: Mapping[str, KnobSpec], facts: MeshFacts | None, global_batch: Sequence[int] = (),
) -> tuple[tuple[Layout, ...], dict[str, str]]:
    """Every feasible layout of ``knobs`` on the model ``facts`` describe, in order of preference (the held global
    batches in their order, then fewer ranks, smaller degrees and less accumulation), and for each mesh that
    none reaches, why (``{mesh label: reason}``). Raises :class:`NoFeasibleMesh` when none is feasible, or
    when more than :data:`MAX_LAYOUTS` are."""
    out: list[Layout] = []
    dropped: dict[str, str] = {}
    batches = values_of(knobs["batch_size"])
    pipelined = any(v > 1 for v in values_of(knobs["pipeline_parallel"]))
    micro = [m for m in values_of(knobs["pipeline_microbatches"]) if pipelined]
    join_batch = not global_batch and len(batches) > 1 and any(b % m for b in batches for m in micro)
    for world in sorted(v for v in values_of(knobs["world_size"]) if v >= 1):
        for tp in values_of(knobs["tensor_parallel"]):
            for pp in values_of(knobs["pipeline_parallel"]):
                for schedule, mb in _pipelines(knobs, pp):
                    base = Layout(world, tp, pp, schedule, mb)
                    found = list(_completed(base, knobs, facts, global_batch, join_batch, batches, dropped))
                    if len(out) + len(found) > MAX_LAYOUTS:
                        raise NoFeasibleMesh(_too_many(knobs))
                    out += found
    if not out:
        reason = next((why for label, why in dropped.items() if label), dropped.get("", "no mesh"))
        raise NoFeasibleMesh(f"no mesh of the search space can run ({_space(knobs)}): {reason}")
    def held(lay: Layout) -> int:  # the held global batch's place in the list (its first value is preferred)
        return list(global_batch).index((lay.batch_size or 0) * (lay.grad_accum or 0) * lay.data_parallel) \
            if global_batch else 0

    out.sort(key=lambda lay: (held(lay), lay.world_size, lay.pipeline_parallel * lay.tensor_parallel,
                              lay.pipeline_parallel, lay.grad_accum or 1))
    reached = {lay.mesh_label for lay in out}
    return tuple(out), {label: why for label, why in dropped.items() if label and label not in reached}


def _completed(
    base: Layout, knobs: Mapping[str, KnobSpec], facts: MeshFacts | None, global_batch: Sequence[int],
    join_batch: bool, batches: Sequence[int], dropped: dict[str, str],
) -> Iterable[Layout]:
    """The feasible layouts of one mesh: itself, or one per batch (split) it can run."""
    values: dict[str, Any] = {**base._asdict(), "batch_size": None}
    for name in ("amp", "compile"):  # a single value that rules a mesh out (fp16 beside a pipeline, compile on a
        spec = knobs.get(name)  # mesh), fixed or the only choice
        if spec is not None and single_value(spec):
            values[name] = only_value(spec)
    problem = mesh_problem(values, facts)
    if problem is not None:
        # degrees that do not divide a world size form no mesh of it: kept apart (""), said only when nothing runs
        indivisible = base.world_size % (base.tensor_parallel * base.pipeline_parallel)
        dropped.setdefault("" if indivisible else base.mesh_label, problem)
        return
    if global_batch:
        candidates = [
            base._replace(batch_size=total // (base.data_parallel * accum), grad_accum=accum)
            for total in global_batch if total % base.data_parallel == 0
            for accum in _divisors(total // base.data_parallel) if admits(knobs["grad_accum"], accum)
            if admits(knobs["batch_size"], total // (base.data_parallel * accum))
        ]
        candidates.sort(key=lambda lay: lay.grad_accum or 1)
    elif join_batch:
        candidates = [base._replace(batch_size=b) for b in batches]
    else:
        candidates = [base]
    for layout in candidates:
        if layout.batch_size is None and base.pipeline_parallel > 1 and len(batches) == 1:
            check = {**layout._asdict(), "batch_size": batches[0]}
        else:
            check = layout._asdict()
        problem = mesh_problem(check, facts)
        if problem is None:
            yield layout
        else:
            dropped.setdefault(base.mesh_label, problem)


def _space(knobs: Mapping[str, KnobSpec]) -> str:
    return ", ".join(f"{name} {describe(knobs[name])}" for name in ("world_size", "tensor_parallel",
                                                                    "pipeline_parallel"))


def _too_many(knobs: Mapping[str, KnobSpec]) -> str:
    return (f"the mesh ({_space(knobs)}), the pipeline's knobs and batch_size make more than {MAX_LAYOUTS} "
            "feasible layouts, searched as one param (mesh); search fewer values of them (e.g. batch_size as "
            "{choices: [...]} of multiples of the micro-batch counts)")


def choose_layout(layouts: Sequence[Layout], given: Mapping[str, Any]) -> Layout:
    """The first (most preferred) layout agreeing with the knob values ``given``; ValueError naming them and the
    feasible meshes when none agrees."""
    for layout in layouts:
        if all(given[name] == value for name, value in layout.knobs().items() if name in given):
            return layout
    said = ", ".join(f"{name} {given[name]}" for name in (*LAYOUT_KNOBS, "batch_size", "grad_accum") if name in given)
    raise ValueError(f"{said} is no feasible mesh of the search space; give one of: {describe_layouts(layouts)}")


def describe_layouts(layouts: Sequence[Layout], listed: int = 12) -> str:
    """``pp1.dp2.tp1, pp1.dp1.tp2, ... and 3 more`` (each mesh once)."""
    labels = list(dict.fromkeys(lay.mesh_label for lay in layouts))
    text = ", ".join(labels[:listed])
    return text + (f" and {len(labels) - listed} more" if len(labels) > listed else "")


def layout_of(config: Any, layouts: Sequence[Layout]) -> Layout | None:
    """The layout a config runs, None when it runs none of ``layouts``."""
    for layout in layouts:
        if all(getattr(config, name) == value for name, value in layout.knobs().items()):
            return layout
    return None


def mesh_label(config: Mapping[str, Any]) -> str:
    """The mesh of a configuration's knobs (a stored config's JSON too): ``pp2.dp1.tp2``, with the pipeline's
    schedule and micro-batches where it has one (``Layout.mesh_label``)."""
    return Layout(int(config.get("world_size") or 1), int(config.get("tensor_parallel") or 1),
                  int(config.get("pipeline_parallel") or 1), config.get("pipeline_schedule"),
                  config.get("pipeline_microbatches")).mesh_label
