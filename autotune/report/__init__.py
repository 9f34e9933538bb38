"""Reports of a study: data first (pure functions over an Optuna study), then plotly figures, then one
self-contained HTML file; plus optuna-dashboard on the study's storage and the trials' logs as artifacts.

``write_report(spec)`` writes ``dashboards/<name>.html``; ``serve_dashboard(spec)`` serves the live
dashboard, reading the trials' artifacts (the tuner attaches them: ``autotune.tuner.attach_trial_artifacts``).
"""

from autotune.report._artifacts import artifact_store_for, artifacts_dir
from autotune.report._batch import BatchData, memory_vs_batch_data, throughput_vs_batch_data
from autotune.report._dashboard import DashboardError, dashboard_url, is_loopback, serve_dashboard
from autotune.report._data import ReportData, report_data
from autotune.report._feasibility import FeasibilityData, feasibility_data
from autotune.report._headline import Headline, Measured, headline_data
from autotune.report._history import HistoryData, history_data
from autotune.report._html import default_report_path, render_html, write_report
from autotune.report._importance import ImportanceData, importance_data
from autotune.report._intermediate import IntermediateData, intermediate_data
from autotune.report._memory_prediction import MemoryPredictionData, memory_prediction_data
from autotune.report._parallel import ParallelData, parallel_data
from autotune.report._pareto import ParetoData, pareto_data
from autotune.report._records import TrialRecord, trial_records
from autotune.report._study import StudyNotFoundError, open_study
from autotune.report._table import TrialsTable, trials_table_data
from autotune.report._timeline import TimelineBar, timeline_data

__all__ = [
    "BatchData",
    "DashboardError",
    "FeasibilityData",
    "Headline",
    "HistoryData",
    "ImportanceData",
    "IntermediateData",
    "Measured",
    "MemoryPredictionData",
    "ParallelData",
    "ParetoData",
    "ReportData",
    "StudyNotFoundError",
    "TimelineBar",
    "TrialRecord",
    "TrialsTable",
    "artifact_store_for",
    "artifacts_dir",
    "dashboard_url",
    "default_report_path",
    "feasibility_data",
    "headline_data",
    "history_data",
    "importance_data",
    "intermediate_data",
    "is_loopback",
    "memory_prediction_data",
    "memory_vs_batch_data",
    "open_study",
    "parallel_data",
    "pareto_data",
    "render_html",
    "report_data",
    "serve_dashboard",
    "throughput_vs_batch_data",
    "timeline_data",
    "trial_records",
    "trials_table_data",
    "write_report",
]
