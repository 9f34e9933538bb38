"""The report's throughput-by-mesh view and the run's summary of meshes skipped over the memory budget, over
a study the real tuner wrote (replayed trials of a mesh search, a real SQLite file), without a browser."""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from rich.console import Console

from autotune.cli._run_summary import print_summary
from autotune.report import render_html, report_data
from autotune.report._mesh import mesh_data
from autotune.report._mesh_figure import mesh_figure
from autotune.search_space import TrialConfig, mesh_label
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.workload_check import load_spec
from tests.test_spec import MESH_PY

BUDGET = 900.0


def _peak(config: TrialConfig) -> float:
    """1.2 GB of training state split by tp and pp: only meshes of 2+ model ranks fit the 900 MB budget."""
    return 300.0 + 1200.0 / (config.tensor_parallel * config.pipeline_parallel) + 2.0 * config.batch_size


def _speed(config: TrialConfig) -> float:
    return 100.0 * config.data_parallel + 60.0 * config.tensor_parallel + 10.0 * config.pipeline_parallel


def _study(folder: Path) -> tuple[optuna.Study, tuple[Any, Any]]:
    (folder / "mesh.py").write_text(MESH_PY)
    doc = {
        "name": "mesh-view", "workload": {"entrypoint": "mesh.py:build"},
        "trial": {"warmup_steps": 2, "max_steps": 20, "report_every": 3},
        "search_space": {"world_size": {"choices": [1, 2, 4]}, "tensor_parallel": {"choices": [1, 2]},
                         "pipeline_parallel": {"choices": [1, 2]}, "pipeline_microbatches": 2, "batch_size": 8},
        "sampler": {"name": "grid"}, "constraints": {"max_memory_mb": BUDGET}, "confirm": {"top_k": 0},
        "baseline": {"world_size": 2, "tensor_parallel": 2, "batch_size": 8},
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(str(folder / "study.yaml"))

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        return Measured(_speed(config), peak_memory_mb=_peak(config))

    summary = Tuner(spec, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=9)
    study = optuna.load_study(study_name="mesh-view", storage=f"sqlite:///{folder / 'mesh-view.db'}")
    return study, (summary, spec)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, optuna.Study, Any, Any]:
    folder = tmp_path_factory.mktemp("mesh-view")
    study, (summary, spec) = _study(folder)
    return folder, study, summary, spec


def test_throughput_by_mesh_and_the_meshes_skipped_over_the_budget(built: tuple[Path, optuna.Study, Any, Any]) -> None:
    _, study, summary, spec = built
    trials = study.get_trials(deepcopy=False)
    data = mesh_data(study)
    assert data.shown
    by_label = {row.label: row for row in data.rows}
    for t in trials:  # every trial counted once, under its own mesh and sharding
        config = t.user_attrs["config"]
        row = by_label[f"{mesh_label(config)} {config['sharding']}"]
        assert t.number in row.numbers
    assert sum(len(row.numbers) for row in data.rows) == len(trials)
    for row in data.rows:  # the throughput of its complete trials, the skipped counted apart
        mine = [t for t in trials if t.number in row.numbers]
        complete = [t.user_attrs["throughput_samples_s"] for t in mine if t.user_attrs.get("outcome") == "complete"
                    and t.user_attrs.get("launched") is not False]
        assert sorted(row.throughputs) == sorted(complete)
        assert row.not_launched == sum(1 for t in mine if t.user_attrs.get("launched") is False)
        if complete:
            assert row.median == statistics.median(complete)
    bests = [row.best for row in data.rows if row.best is not None]
    assert bests == sorted(bests, reverse=True)  # fastest first
    skipped = [t for t in trials if t.user_attrs.get("launched") is False]
    # the baseline (tp 2) ran out of memory: every mesh whose rank would hold no less is skipped, unlaunched
    assert trials[0].user_attrs["outcome"] == "oom" and len(skipped) >= 3
    launched = [t for t in trials[1:] if t.user_attrs.get("launched") is not False]
    assert all(_peak(TrialConfig.model_validate(t.user_attrs["config"])) <= BUDGET for t in launched)
    assert summary.best_config is not None
    assert (summary.best_config.tensor_parallel, summary.best_config.pipeline_parallel) == (2, 2)
    for t in skipped:  # only a mesh the budget cannot hold is skipped, and its reason names the mesh
        config = TrialConfig.model_validate(t.user_attrs["config"])
        assert _peak(config) > BUDGET
        assert t.user_attrs["reason"].endswith(f", mesh {mesh_label(t.user_attrs['config'])}") or \
            config.world_size == 1
    figure = mesh_figure(data)
    assert figure is not None and figure.data[0].x == tuple(row.label for row in data.rows)
    assert "Throughput by mesh" in render_html(report_data(study))
    console = Console(file=io.StringIO(), width=200, record=True)
    print_summary(console, summary, spec)
    text = console.export_text()
    meshes = {mesh_label(t.user_attrs["config"]) for t in skipped}
    assert "not launched: predicted over the memory budget" in text and "; meshes " in text
    assert all(m in text for m in meshes)


def test_best_shows_the_mesh_knobs_and_the_mesh(built: tuple[Path, optuna.Study, Any, Any]) -> None:
    from autotune.cli._results import best_payload

    payload = best_payload(str(built[0] / "study.yaml"), None)
    assert (payload["config"]["tensor_parallel"], payload["config"]["pipeline_parallel"]) == (2, 2)
    assert payload["config"]["pipeline_schedule"] == "1f1b" and payload["config"]["pipeline_microbatches"] == 2
    assert payload["derived"]["mesh"] == "pp2.dp1.tp2.1f1b.mb2" and payload["derived"]["data_parallel"] == 1
    assert payload["derived"]["global_batch"] == 8  # batch_size x grad_accum x data_parallel


def test_a_study_of_data_parallelism_alone_has_no_mesh_view(tmp_path: Path) -> None:
    (tmp_path / "mesh.py").write_text(MESH_PY)
    doc = {"name": "dp-only", "workload": {"entrypoint": "mesh.py:build_plain"},
           "trial": {"warmup_steps": 2, "max_steps": 20, "report_every": 3},
           "search_space": {"world_size": {"choices": [1, 2, 4]}, "batch_size": 8}, "sampler": {"name": "grid"},
           "confirm": {"top_k": 0}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    Tuner(load_spec(str(tmp_path / "study.yaml")), launcher=NoLaunch(),
          run_trial=replay_runner(lambda c, r: Measured(_speed(c), peak_memory_mb=_peak(c)))).run(n_trials=3)
    study = optuna.load_study(study_name="dp-only", storage=f"sqlite:///{tmp_path / 'dp-only.db'}")
    data = mesh_data(study)
    assert len(data.rows) >= 2 and not data.shown and mesh_figure(data) is None
    assert "Throughput by mesh" not in render_html(report_data(study))
