"""The trials table: every trial, one row each, the knobs that vary and the metrics."""

from __future__ import annotations

from typing import Any, NamedTuple

import optuna

from autotune.knobs import KNOBS
from autotune.report._records import searched_knobs, trial_records, value_label


class TableColumn(NamedTuple):
    key: str
    label: str
    numeric: bool


class TrialsTable(NamedTuple):
    """Every trial, one row each: pruned, failed, infeasible and running ones included."""

    columns: list[TableColumn]
    rows: list[tuple[Any, ...]]  # raw values in column order; None for missing


_METRIC_COLUMNS = [
    TableColumn("throughput_samples_s", "throughput (samples/s)", True),
    TableColumn("peak_memory_mb", "peak memory (MB)", True),
    TableColumn("loss", "loss", True),
    TableColumn("time_to_first_step_s", "first step (s)", True),
    TableColumn("threads_resolved", "threads (ran with)", True),
    TableColumn("compile_s", "compile (s)", True),
    TableColumn("wall_s", "wall (s)", True),
    TableColumn("steps", "steps", True),
]


def trials_table_data(study: optuna.Study) -> TrialsTable:
    """Number, role, outcome, feasibility, reason, the knobs that are searched or differ, metrics."""
    records = trial_records(study)
    searched = set(searched_knobs(records))
    knobs = [
        k for k in KNOBS
        if k in searched or len({value_label(r.knob(k)) for r in records if r.knob(k) is not None}) > 1
    ]
    knobs += sorted(k for k in searched if k.startswith("env."))  # searched env: variables
    # threads and compile time only where trials recorded them (studies from before those knobs did not)
    metric_columns = [
        c for c in _METRIC_COLUMNS
        if c.key not in ("threads_resolved", "compile_s") or any(getattr(r, c.key) is not None for r in records)
    ]
    columns = [
        TableColumn("number", "#", True),
        TableColumn("role", "role", False),
        TableColumn("outcome", "outcome", False),
        TableColumn("feasible", "feasible", False),
        TableColumn("reason", "reason", False),
        *[TableColumn(k, k, k in KNOBS and KNOBS[k].type is int and not KNOBS[k].words) for k in knobs],
        TableColumn("global_batch", "global batch", True),
        *metric_columns,
    ]
    rows = []
    for r in records:
        feasible = None if r.feasible is None else ("yes" if r.feasible else "no")
        cells: list[Any] = [r.number, r.role, r.outcome, feasible, r.reason]
        cells += [r.knob(k) for k in knobs]
        cells.append(r.config.get("global_batch"))
        cells += [getattr(r, c.key) for c in metric_columns]
        rows.append(tuple(cells))
    return TrialsTable(columns, rows)
