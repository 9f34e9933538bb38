"""A study's search space: its knobs on the resolved device and its hyperparameters, with the baseline's values
taken from the workload it builds (build()'s and the optimizer's defaults, the workload's base_lr)."""

from __future__ import annotations

from typing import Any

from autotune.errors import StudyFileError, WorkloadError
from autotune.search_space._hyper import HyperparameterSpace
from autotune.search_space._mesh import NoFeasibleMesh, mesh_in_play
from autotune.search_space._space import SearchSpace
from autotune.search_space._split import NoFeasibleSplit
from autotune.spec import Choices, Fixed, KnobSpec, StudySpec, held_global_batches
from autotune.workload import Workload, keyword_defaults, study_workload, workload_function
from autotune.workload_check import MeshFacts, build_for_facts, mesh_facts


def study_space(spec: StudySpec) -> SearchSpace:
    """The :class:`SearchSpace` of a study on its resolved device (``launcher.device: auto`` decided here); a held
    global batch without a feasible split, or a ``baseline:`` split outside it, is a one-line StudyFileError."""
    workload = study_workload(spec)
    try:
        space = SearchSpace.build(
            spec.search_space, base_lr=workload.base_lr, base_batch_size=workload.base_batch_size,
            device=spec.resolved_device(), env=spec.env, hyper=hyperparameter_space(spec),
            global_batch=held_global_batches(spec.constraints.global_batch), facts=study_mesh_facts(spec, workload),
        )
    except NoFeasibleSplit as e:
        raise StudyFileError(f"{spec.source}: constraints.global_batch: {e}") from None
    except NoFeasibleMesh as e:
        raise StudyFileError(f"{spec.source}: search_space: {e}") from None
    if any(o.metric == "goodput" for o in spec.objectives) and not measures_noise_scale(space):
        raise StudyFileError(f"{spec.source}: objectives: {GOODPUT_UNMEASURABLE}")
    try:  # the baseline runs a feasible mesh (and split: the first feasible one agreeing with the baseline:)
        space.default_config(spec.baseline)
    except ValueError as e:
        raise StudyFileError(f"{spec.source}: baseline: {e}") from None
    return space


def study_mesh_facts(spec: StudySpec, workload: Workload) -> MeshFacts | None:
    """What the study's model allows of a mesh, where a tensor or pipeline degree above 1 can occur or the workload
    declares how its model splits (None otherwise), read from the model built once on the meta device (its heads,
    split dimensions, module names); a model that does not build leaves them unknown (validate's build check says
    why)."""
    knobs = {name: spec.search_space.knobs().get(name) or Fixed(value=1) for name in ("tensor_parallel",
                                                                                      "pipeline_parallel")}
    baseline = [spec.baseline.get(name, 1) for name in knobs]
    declared = workload.parallelize is not None or workload.tp_plan or workload.pipeline_split
    if not mesh_in_play(knobs) and max(baseline) == 1 and not declared:  # a mesh may still come by --set
        return None
    model = build_for_facts(workload)
    try:
        return mesh_facts(workload, model)
    except WorkloadError as e:
        raise WorkloadError(f"{spec.source}: workload.entrypoint: {e}") from None


GOODPUT_UNMEASURABLE = (
    "goodput needs the gradient noise scale, which no configuration of this search space measures (DDP at "
    "world_size >= 2, or grad_accum >= 2 at one rank; not FSDP): search world_size: {choices: [1, 2]} with "
    "sharding: ddp, or grad_accum: {choices: [1, 2]}"
)


def _values(knob: KnobSpec) -> list[Any]:
    if isinstance(knob, Fixed):
        return [knob.value]
    if isinstance(knob, Choices):
        return list(knob.choices)
    return [knob.low, knob.high]


def measures_noise_scale(space: SearchSpace) -> bool:
    """Whether some configuration of ``space`` measures the gradient noise scale: DDP with two batch sizes in
    a step (world_size >= 2, or grad_accum >= 2), on a mesh of data parallelism alone."""
    if "ddp" not in _values(space.knobs["sharding"]):
        return False
    if space.layouts:  # not measured on a tensor or pipeline mesh
        plain = [lay for lay in space.layouts if lay.tensor_parallel == lay.pipeline_parallel == 1]
        accum = max(_values(space.knobs["grad_accum"]))
        return any(lay.world_size >= 2 or (lay.grad_accum or accum) >= 2 for lay in plain)
    if space.splits:
        return any(s.world_size >= 2 or s.grad_accum >= 2 for s in space.splits)
    return max(_values(space.knobs["world_size"])) >= 2 or max(_values(space.knobs["grad_accum"])) >= 2


def hyperparameter_space(spec: StudySpec) -> HyperparameterSpace:
    """The :class:`HyperparameterSpace` of a study's ``hyperparameters:``, with the baseline's values:
    build()'s and the optimizer's defaults and the workload's base_lr."""
    if not spec.hyperparameters:
        return HyperparameterSpace()
    workload = study_workload(spec)
    return HyperparameterSpace.build(
        spec.hyperparameters,
        build_defaults=keyword_defaults(workload_function(spec.workload.entrypoint, spec.base_dir)),
        base_lr=workload.base_lr,
        optimizer_defaults=keyword_defaults(workload.optimizer),
    )
