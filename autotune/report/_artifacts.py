"""The study's artifact store, to READ the trials' log files (optuna-dashboard shows them on a trial's page).

The tuner writes them (``autotune.tuner.attach_trial_artifacts``, before it tells Optuna a trial's result);
the report only opens the store they are in.
"""

from __future__ import annotations

from pathlib import Path

from optuna.artifacts import FileSystemArtifactStore

from autotune.spec import StudySpec

__all__ = ["artifact_store_for", "artifacts_dir"]


def artifacts_dir(spec: StudySpec) -> Path:
    """``<study file's folder>/runs/<name>/artifacts``: where the study's artifacts are kept."""
    return spec.artifacts_dir()


def artifact_store_for(spec: StudySpec, create: bool = True) -> FileSystemArtifactStore:
    """The study's artifact store (the folder is created unless ``create`` is false)."""
    folder = artifacts_dir(spec)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(folder)
