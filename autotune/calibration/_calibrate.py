"""``autotune.calibrate()``: the first step of a training launcher.

It runs (or resumes) the study and returns a :class:`~autotune.calibration.Calibration` of its choice
(:func:`autotune.objectives.choose`'s, read through :func:`autotune.tuner.summarize`);
:func:`load_calibration` reads an existing study's choice without running anything.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.calibration._calibration import Calibration
from autotune.errors import UsageError
from autotune.spec import StudySpec, parse_spec
from autotune.tuner import Interrupted, Observer, Tuner, TuneSummary, read_study, release_storages, summarize
from autotune.workload_check import load_spec

__all__ = ["calibrate", "load_calibration"]


def _from_summary(summary: TuneSummary, spec: StudySpec) -> Calibration:
    if summary.best_config is None or summary.best is None:
        raise UsageError(
            f"{spec.source}: no trial of study {spec.name!r} completed, so there is nothing to apply; "
            "see `autotune status` for what went wrong"
        )
    return Calibration(
        config=summary.best_config,
        study=summary.study,
        throughput_samples_s=summary.best.median,
        spread=summary.best.spread,
        peak_memory_mb=summary.best.peak_memory_mb,
        loss=summary.best.loss,
        speedup=summary.speedup,
        baseline_throughput_samples_s=summary.baseline.median if summary.baseline else None,
        confirmed=summary.confirmed,
        default_is_best=summary.default_is_best,
        speedup_half_width=summary.speedup_half_width,
        statement=summary.statement,
        advice=summary.advice,
        spec=spec,
        global_batch_held=bool(summary.global_batch_held),
    )


def _resolve(study: str | os.PathLike[str] | StudySpec, overrides: Mapping[str, Any]) -> StudySpec:
    sets = [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(study, StudySpec):
        if not sets:
            return study
        document = _as_document(study.model_dump(mode="json", exclude_unset=True))
        spec = parse_spec(document, source=study.source, base_dir=study.base_dir, overrides=sets)
        return spec
    if isinstance(study, (str, os.PathLike)):
        return load_spec(Path(study), overrides=sets)
    raise UsageError(f"calibrate() takes a study file path or a StudySpec, not {type(study).__name__}")


def _as_document(dumped: Any) -> Any:
    """A dumped StudySpec as the study file it came from: a fixed knob (``{"value": v}``) is the plain ``v``
    again. Only keys the file set are dumped, so an explicit null (``budget.n_trials: null``) stays null."""
    if isinstance(dumped, dict):
        if set(dumped) == {"value"}:
            return _as_document(dumped["value"])
        return {k: _as_document(v) for k, v in dumped.items()}
    if isinstance(dumped, list):
        return [_as_document(v) for v in dumped]
    return dumped


def _refuse_inside_a_rank() -> None:
    with contextlib.suppress(ImportError):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            raise UsageError(
                "calibrate() runs trials with torchrun and belongs in the launcher, before the ranks start; "
                "in a rank, read the result with autotune.load_calibration(STUDY_FILE)"
            )


def calibrate(
    study: str | os.PathLike[str] | StudySpec,
    *,
    n_trials: int | None = None,
    timeout_s: float | None = None,
    observer: Observer | None = None,
    **overrides: Any,
) -> Calibration:
    """Run (or resume) the study and return the chosen configuration, ready to apply.

    Args:
        study: a study file path or a :class:`~autotune.StudySpec`.
        n_trials: trials the study should hold (default: its budget); an existing study resumes.
        timeout_s: stop searching after this many seconds.
        observer: progress hooks (see :class:`autotune.tuner.Observer`); silent by default.
        **overrides: study-file keys, nested with a double underscore: ``trial__max_steps=20``,
            ``storage="sqlite:///x.db"``, ``budget__n_trials=8``.

    Raises:
        UsageError: bad input (study file, overrides) or when called inside a distributed rank.
        KeyboardInterrupt: Ctrl-C, once the running trial is stopped and recorded.
        autotune.tuner.Interrupted: SIGTERM, once the running trial is stopped and recorded and the signal was
            handed to the caller's own SIGTERM handler, which returned. Without one, SIGTERM's default action
            ends the process, as it would without calibrate().
    """
    _refuse_inside_a_rank()
    spec = _resolve(study, overrides)
    try:
        summary = Tuner(spec, observer=observer).run(n_trials=n_trials, timeout_s=timeout_s)
        return _from_summary(summary, spec)
    except Interrupted as stop:
        # The running trial is stopped, recorded as interrupted and its processes gone. The signal then reaches
        # the launcher as it would have without calibrate(): its own handler, or the default action.
        stop.redeliver()
        raise
    finally:
        release_storages()  # the launcher goes on to train: it does not hold the study's database meanwhile


def load_calibration(study: str | os.PathLike[str] | StudySpec, **overrides: Any) -> Calibration:
    """The configuration an existing study chose, without running anything (e.g. inside a rank)."""
    spec = _resolve(study, overrides)
    try:
        return _from_summary(summarize(read_study(spec), spec), spec)
    finally:
        release_storages()  # a rank trains next: no database handle (or PostgreSQL session) held meanwhile
