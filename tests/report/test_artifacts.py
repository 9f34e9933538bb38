"""Trial folders as Optuna artifacts: what the tuner calls before telling each trial."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore, download_artifact, get_all_artifact_meta

from autotune.report import artifact_store_for, artifacts_dir
from autotune.tuner import attach_trial_artifacts

from .conftest import Built


def test_every_trial_of_a_study_has_its_logs_attached(single: Built, tmp_path: Path) -> None:
    assert artifacts_dir(single.spec) == single.yaml.parent / "runs" / "demo-single" / "artifacts"
    store = artifact_store_for(single.spec, create=False)
    storage = single.study._storage
    for trial in single.study.get_trials():
        metas = {m.filename: m for m in get_all_artifact_meta(trial, storage=storage)}
        assert set(metas) == {"config.json", "metrics.jsonl", "rank0.log", "launcher.err", "result.json"}
        assert metas["rank0.log"].mimetype == "text/plain" and metas["config.json"].mimetype == "application/json"
        out = tmp_path / f"{trial.number}.log"
        download_artifact(artifact_store=store, file_path=str(out), artifact_id=metas["rank0.log"].artifact_id)
        assert out.read_text() == (Path(trial.user_attrs["trial_dir"]) / "rank0.log").read_text()


def test_attaching_twice_attaches_nothing_twice_and_a_finished_trial_is_refused(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    store = FileSystemArtifactStore(tmp_path / "artifacts")
    (tmp_path / "artifacts").mkdir()
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    (trial_dir / "rank0.log").write_text("hello\n")
    (trial_dir / "sub").mkdir()  # folders are not files; not attached
    trial = study.ask()
    first = attach_trial_artifacts(study, trial.number, trial_dir, store)
    assert len(first) == 1
    (trial_dir / "launcher.err").write_text("late\n")
    second = attach_trial_artifacts(study, study.trials[0], trial_dir, store)
    assert len(second) == 1  # only the new file
    assert attach_trial_artifacts(study, trial.number, tmp_path / "missing", store) == []
    study.tell(trial, 1.0)
    with pytest.raises(ValueError, match=r"before study\.tell"):
        attach_trial_artifacts(study, trial.number, trial_dir, store)
    with pytest.raises(ValueError, match="no trial number 7"):
        attach_trial_artifacts(study, 7, trial_dir, store)
    assert sorted(m.filename for m in get_all_artifact_meta(study.trials[0], storage=study._storage)) == [
        "launcher.err", "rank0.log"]
