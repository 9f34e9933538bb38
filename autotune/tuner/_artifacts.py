"""Attaching a trial's files as Optuna artifacts, so optuna-dashboard shows them on the trial's page.

The tuner writes them (:func:`attach_trial_artifacts`, from ``Tuner.tell``); the report only reads them
(``autotune.report.artifact_store_for``, for the dashboard). Both find the store at
``StudySpec.artifacts_dir()``: ``runs/<name>/artifacts`` beside the study file.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact
from optuna.trial import FrozenTrial

from autotune.compat import optuna_private
from autotune.spec import StudySpec
from autotune.tuner._writes import BatchedSystemAttrs

# Shown as text in the dashboard (mimetypes knows none of these suffixes).
_TEXT_SUFFIXES = {".log", ".err", ".out", ".jsonl", ".txt"}
_MAX_BYTES = 50 * 1024 * 1024  # a runaway log is not copied into the artifact store


def writable_artifact_store(spec: StudySpec) -> FileSystemArtifactStore:
    """The study's artifact store (``StudySpec.artifacts_dir()``), its folder created."""
    folder = spec.artifacts_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(folder)


def _mimetype(path: Path) -> str | None:
    if path.suffix in _TEXT_SUFFIXES:
        return "text/plain"
    if path.suffix == ".json":
        return "application/json"
    return None


def attach_trial_artifacts(
    study: optuna.Study,
    trial: int | FrozenTrial,
    trial_dir: str | Path,
    artifact_store: FileSystemArtifactStore,
    batch: BatchedSystemAttrs | None = None,
) -> list[str]:
    """Upload every file at the top of ``trial_dir`` (config.json, metrics.jsonl, rank*.log,
    launcher.err, result.json, ...) as an artifact of the trial; return the new artifact ids.

    The tuner calls it once the trial's run has ended (whatever its outcome) and BEFORE
    ``study.tell(...)``: Optuna refuses to change a finished trial, so a finished trial raises
    ValueError. Files already attached to the trial (same name) are skipped, so a second call attaches
    nothing twice; a missing folder attaches nothing. Given ``batch``, the files' metadata is left in it for the
    caller to write (with the trial's other attributes, in one transaction); else it is written here, in one.
    """
    # Study has no public accessor for its storage; upload_artifact needs it for a FrozenTrial.
    storage = optuna_private.storage_of(study)
    number = trial if isinstance(trial, int) else trial.number
    try:
        trial_id = storage.get_trial_id_from_study_id_trial_number(optuna_private.study_id(study), number)
    except KeyError:
        raise ValueError(f"study {study.study_name!r} has no trial number {number}") from None
    frozen = storage.get_trial(trial_id)
    if frozen.state.is_finished():
        raise ValueError(
            f"trial {number} of {study.study_name!r} is already {frozen.state.name}; Optuna cannot attach "
            "artifacts to a finished trial, so call attach_trial_artifacts before study.tell()"
        )
    folder = Path(trial_dir)
    if not folder.is_dir():
        return []
    attached = {meta.filename for meta in get_all_artifact_meta(frozen, storage=storage)}
    ids = []
    own = batch is None
    batch = BatchedSystemAttrs(storage) if batch is None else batch  # every file's metadata in one transaction
    try:
        for path in sorted(folder.iterdir()):
            if not path.is_file() or path.name in attached or path.stat().st_size > _MAX_BYTES:
                continue
            ids.append(upload_artifact(study_or_trial=frozen, file_path=str(path), artifact_store=artifact_store,
                                       storage=batch, mimetype=_mimetype(path)))  # type: ignore[arg-type]
    finally:
        if own:
            batch.flush()
    return ids


class TrialArtifacts:
    """What ``Tuner.tell`` calls for each trial: its files as artifacts, the store opened on first use.

    Before tell: Optuna attaches nothing to a finished trial. A failure here costs the dashboard its
    logs, never the study its trial (the files stay in the trial folder).
    """

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        self._store: FileSystemArtifactStore | None = None

    def __call__(self, study: optuna.Study, number: int, trial_dir: str) -> dict[str, Any]:
        """Upload the files; return the system attributes that name them (for the caller's one transaction)."""
        batch = BatchedSystemAttrs(optuna_private.storage_of(study))
        try:
            if self._store is None:
                self._store = writable_artifact_store(self.spec)
            attach_trial_artifacts(study, number, trial_dir, self._store, batch)
        except Exception as e:
            warnings.warn(f"trial {number}: its files were not attached as artifacts: {e}", stacklevel=2)
        return batch.pending()
