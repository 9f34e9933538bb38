"""The Optuna side of a study: created once or loaded with the study file's sampler and pruner, or read
without either (``best``, ``status``, ``load_calibration``)."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler

from autotune.errors import UsageError
from autotune.pruners import make_pruner
from autotune.samplers import make_sampler
from autotune.search_space import SearchSpace
from autotune.spec import StudySpec, held_global_batches, redact_url, stored_global_batches
from autotune.tuner._fingerprint import cpu_model, study_fingerprint
from autotune.tuner._storage import SCHEMA_LOCK, make_storage, missing_sqlite_file, quiet, study_lock
from autotune.version import __version__

FINGERPRINT_ATTR = "autotune_fingerprint"  # the study's context (_fingerprint.study_fingerprint), set at creation


def open_study(
    spec: StudySpec,
    space: SearchSpace,
    storage_url: str | None = None,
    *,
    create: bool = True,
    sampler: BaseSampler | None = None,
    pruner: BasePruner | None = None,
) -> optuna.Study:
    """Create the study (once) or load it, with the sampler and pruner of the study file (or those given:
    a benchmark's peers, a user's own Optuna sampler)."""
    optuna.logging.set_verbosity(logging.WARNING)
    url = storage_url or spec.storage_url()
    missing = UsageError(f"no study named {spec.name!r} in {redact_url(url)}; run `autotune run {spec.source}` first")
    if not create and missing_sqlite_file(url):
        raise missing  # opening it would create an empty database file
    if not create:
        return _open_study(spec, space, url, create=False, missing=missing, sampler=sampler, pruner=pruner)
    # Workers started together on an empty database would race to create the tables and the study
    # (UniqueViolation on PostgreSQL): one creates while the others wait, then load.
    with study_lock(url, SCHEMA_LOCK):
        return _open_study(spec, space, url, create=True, missing=missing, sampler=sampler, pruner=pruner)


def _open_study(
    spec: StudySpec,
    space: SearchSpace,
    url: str,
    *,
    create: bool,
    missing: Exception,
    sampler: BaseSampler | None,
    pruner: BasePruner | None,
) -> optuna.Study:
    storage = make_storage(url)
    sampler = sampler if sampler is not None else make_sampler(spec, space)
    pruner = pruner if pruner is not None else make_pruner(spec)
    directions = [o.direction or "maximize" for o in spec.objectives]
    names = [s.study_name for s in storage.get_all_studies()]
    if spec.name not in names and not create:
        raise missing
    with contextlib.suppress(optuna.exceptions.DuplicatedStudyError):
        if spec.name not in names:
            study = optuna.create_study(
                storage=storage, study_name=spec.name, directions=directions,
                sampler=sampler, pruner=pruner,
            )
            with quiet():
                study.set_metric_names([o.key for o in spec.objectives])
            study.set_user_attr(
                "autotune",
                {
                    "version": __version__,
                    # the study file as run, less the storage password (dashboards show study attributes)
                    "spec": {**spec.model_dump(mode="json"), "storage": spec.storage and redact_url(spec.storage)},
                    "device": space.device,
                    "machine": machine_facts(),
                },
            )
            study.set_user_attr(FINGERPRINT_ATTR, study_fingerprint(spec))
            return study
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=sampler, pruner=pruner)
    stored = [d.name.lower() for d in study.directions]
    if stored != directions:
        raise UsageError(
            f"{spec.source}: objectives: the stored study {spec.name!r} was created with directions {stored}, "
            f"the file now asks for {directions}; rename the study or restore its objectives"
        )
    if create:  # a study resumed to run more trials; reading one needs no check
        _check_global_batch(spec, study)
    return study


def _check_global_batch(spec: StudySpec, study: optuna.Study) -> None:
    """A stored study resumed with another held global batch would mix trials of two trainings: refused."""
    stored = study.user_attrs.get("autotune")
    before = stored_global_batches(stored.get("spec") if isinstance(stored, dict) else None)
    now = held_global_batches(spec.constraints.global_batch)
    if before is not None and before != now:
        def show(held: tuple[int, ...]) -> str:
            return ", ".join(map(str, held)) if held else "none"

        raise UsageError(
            f"{spec.source}: constraints.global_batch: the stored study {spec.name!r} held global batch "
            f"{show(before)}, the file now holds {show(now)}; rename the study or restore its global_batch"
        )


def read_study(spec: StudySpec, storage_url: str | None = None) -> optuna.Study:
    """The stored study, to read it (``autotune best``/``status``, ``load_calibration``): neither the
    workload nor the search space is loaded, so a finished study reads even where its workload cannot be
    imported. UsageError when the study (or its SQLite file) does not exist."""
    optuna.logging.set_verbosity(logging.WARNING)
    url = storage_url or spec.storage_url()
    missing = UsageError(f"no study named {spec.name!r} in {redact_url(url)}; run `autotune run {spec.source}` first")
    if missing_sqlite_file(url):
        raise missing
    storage = make_storage(url)
    if spec.name not in [s.study_name for s in storage.get_all_studies()]:
        raise missing
    return optuna.load_study(study_name=spec.name, storage=storage, sampler=optuna.samplers.RandomSampler())


def machine_facts() -> dict[str, Any]:
    """Where the study is measured, for reports that travel: host, cores, CPU model, memory, versions. (A warm
    start compares the ``autotune_fingerprint`` attribute instead: ``tuner.study_fingerprint``.)"""
    import platform

    import psutil

    facts: dict[str, Any] = {
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "optuna": optuna.__version__,
    }
    with contextlib.suppress(ImportError):
        import torch

        facts["torch"] = torch.__version__
        if torch.cuda.is_available():
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return facts


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    return all(v <= 0 for v in trial.constraints.values())
