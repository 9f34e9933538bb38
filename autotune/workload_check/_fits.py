"""Loading a study with its workload checked: the study file read, then the workload built once and the
study's arguments, hyperparameters and knobs checked against what it takes and can honour."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.errors import StudyFileError, WorkloadError
from autotune.spec import BASE_LR, OPTIMIZER_PREFIX, StudySpec, read_spec
from autotune.workload import (
    Workload,
    study_workload,
    unknown_argument_message,
    unknown_arguments,
    workload_function,
)


def load_spec(path: str | Path, overrides: Sequence[str] = (), check_workload: bool = True) -> StudySpec:
    """Read, validate and return a study file (``autotune.load_spec``).

    ``overrides`` are ``key.path=value`` strings applied before validation (``trial.max_steps=10``).
    With ``check_workload`` the entrypoint is imported and called once, so a typo fails now, not in
    every trial; the knobs are checked against what the workload can honour.
    """
    spec = read_spec(path, overrides)
    if check_workload:
        check_workload_fits(spec)
    return spec


def check_workload_fits(spec: StudySpec) -> Workload:
    """Import the workload and check the search space against it; returns the Workload."""
    try:
        _check_build_arguments(spec)
        workload = study_workload(spec)
    except WorkloadError as e:
        raise WorkloadError(f"{spec.source}: workload.entrypoint: {e}") from None
    _check_optimizer_hyperparameters(spec, workload)
    ckpt = spec.search_space.values_of("activation_checkpointing")
    wants_ckpt = (ckpt is not None and True in ckpt) or spec.baseline.get("activation_checkpointing") is True
    if wants_ckpt and not workload.checkpoint_modules:
        raise StudyFileError(
            f"{spec.source}: search_space.activation_checkpointing: the workload declares no "
            "checkpoint_modules; declare them in the Workload or fix this knob to false"
        )
    return workload


def _check_build_arguments(spec: StudySpec) -> None:
    """Each ``workload.args`` key and each ``hyperparameters:`` name that is a build() argument must be one
    of build()'s parameters: one line naming the field, the function and its parameters."""
    build = workload_function(spec.workload.entrypoint, spec.base_dir)
    for name in unknown_arguments(build, list(spec.workload.args)):
        raise StudyFileError(
            f"{spec.source}: workload.args.{name}: {spec.workload.entrypoint}: {unknown_argument_message(build, name)}"
        )
    names = [n for n in spec.hyperparameters if n != BASE_LR and not n.startswith(OPTIMIZER_PREFIX)]
    for name in unknown_arguments(build, names):
        raise StudyFileError(
            f"{spec.source}: hyperparameters.{name}: {spec.workload.entrypoint}: "
            f"{unknown_argument_message(build, name)}"
        )


def _check_optimizer_hyperparameters(spec: StudySpec, workload: Workload) -> None:
    """Each ``optimizer.<kwarg>`` must be a keyword argument of the workload's optimizer factory."""
    names = [n.removeprefix(OPTIMIZER_PREFIX) for n in spec.hyperparameters if n.startswith(OPTIMIZER_PREFIX)]
    for name in unknown_arguments(workload.optimizer, names, skip=2):
        raise StudyFileError(
            f"{spec.source}: hyperparameters.{OPTIMIZER_PREFIX}{name}: the workload's optimizer "
            f"{unknown_argument_message(workload.optimizer, name, skip=2)}; the factory is called as "
            "optimizer(params, lr, **kwargs)"
        )
