"""The data of the whole report, computed once: every view's data (one module per view, each a pure
function of an Optuna study, and the StudySpec where needed).

Each view's function returns a NamedTuple that a figure in ``_figures.py`` draws and a test checks; no
data module imports plotly. The input is what docs/storage.md says a study stores.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

import optuna

from autotune.report._anatomy import AnatomyBar, anatomy_data
from autotune.report._batch import BatchData, memory_vs_batch_data, throughput_vs_batch_data
from autotune.report._feasibility import FeasibilityData, feasibility_data
from autotune.report._headline import Headline, headline_data
from autotune.report._history import HistoryData, history_data
from autotune.report._importance import ImportanceData, importance_data
from autotune.report._intermediate import IntermediateData, intermediate_data
from autotune.report._memory_prediction import MemoryPredictionData, memory_prediction_data
from autotune.report._mesh import MeshData, mesh_data
from autotune.report._parallel import ParallelData, parallel_data
from autotune.report._pareto import ParetoData, pareto_data
from autotune.report._records import metric_names, objective_directions
from autotune.report._scale import ScaleData, scale_data
from autotune.report._table import TrialsTable, trials_table_data
from autotune.report._timeline import TimelineBar, timeline_data
from autotune.spec import StudySpec


class ReportData(NamedTuple):
    """Everything the report shows, computed once."""

    study_name: str
    metrics: list[str]
    directions: list[str]
    headline: Headline
    history: HistoryData | None  # single objective
    pareto: ParetoData | None  # several objectives
    throughput: BatchData
    memory: BatchData
    memory_prediction: MemoryPredictionData
    scale: ScaleData
    mesh: MeshData
    importance: ImportanceData
    parallel: ParallelData
    intermediate: IntermediateData
    timeline: list[TimelineBar]
    feasibility: FeasibilityData
    anatomy: list[AnatomyBar]
    table: TrialsTable
    generated: datetime.datetime


def report_data(study: optuna.Study, spec: StudySpec | None = None, now: datetime.datetime | None = None) -> ReportData:
    """Every view's data for ``study``; ``spec`` supplies the memory budget (else the stored study file)."""
    now = now or datetime.datetime.now()
    single = len(study.directions) == 1
    return ReportData(
        study_name=study.study_name,
        metrics=metric_names(study),
        directions=objective_directions(study),
        headline=headline_data(study),
        history=history_data(study) if single else None,
        pareto=None if single else pareto_data(study),
        throughput=throughput_vs_batch_data(study),
        memory=memory_vs_batch_data(study, spec),
        memory_prediction=memory_prediction_data(study, spec),
        scale=scale_data(study, spec),
        mesh=mesh_data(study),
        importance=importance_data(study),
        parallel=parallel_data(study),
        intermediate=intermediate_data(study),
        timeline=timeline_data(study, now),
        feasibility=feasibility_data(study, spec),
        anatomy=anatomy_data(study),
        table=trials_table_data(study),
        generated=now,
    )
