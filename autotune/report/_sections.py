"""The report's sections: each view's figure with its title and caption, in order, and their PNG export.

plotly is imported where a figure is drawn (``_figures.py``) or written (``write_pngs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from autotune.report._anatomy_figure import anatomy_figure
from autotune.report._data import ReportData
from autotune.report._figures import (
    HEIGHT,
    batch_figure,
    feasibility_figure,
    history_figure,
    importance_figure,
    intermediate_figure,
    memory_prediction_figure,
    parallel_figure,
    pareto_figure,
    timeline_figure,
)
from autotune.report._mesh_figure import mesh_figure
from autotune.report._scale_figure import scale_figure

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["Section", "build_sections", "write_pngs"]


class Section(NamedTuple):
    """One view of the report: a figure (None when there is nothing to draw) and a note to show with it."""

    key: str
    title: str
    caption: str
    figure: go.Figure | None
    note: str | None = None


def build_sections(data: ReportData) -> list[Section]:
    """Every view of the report, in order."""
    sections = []
    if data.history is not None:
        sections.append(Section("history", "Optimization history",
                                "Objective value of every complete and pruned trial; the line is the best "
                                "feasible value so far.", history_figure(data.history)))
    if data.pareto is not None:
        sections.append(Section("pareto", "Pareto front",
                                "Complete trials in objective space; filled markers are the feasible "
                                "non-dominated trials.", pareto_figure(data.pareto)))
    sections += [
        Section("throughput", "Throughput against batch size",
                "Measured throughput of every trial (pruned and infeasible ones with their partial numbers), "
                "coloured by AMP mode and world size; open circles were pruned, crosses are infeasible.",
                batch_figure(data.throughput)),
        Section("memory", "Peak memory against batch size",
                "Peak memory per rank; the dashed line is the memory budget (constraints.max_memory_mb).",
                batch_figure(data.memory),
                None if data.memory.budget is not None else "no memory budget is set in the study file"),
        Section("memory_prediction", "Predicted against measured memory",
                "Each trial's peak memory per rank as predicted before launch (with the prediction's own error) "
                "against the peak it measured; on the diagonal they agree. Crosses on the budget line were "
                "predicted over it and never launched.", memory_prediction_figure(data.memory_prediction),
                _prediction_note(data)),
        Section("scale", "Throughput over scale",
                "The best throughput predicted at more ranks than the study ran (`autotune plan` at each world "
                "size: a model of compute, sync and their overlap fitted to the trials), with its 90% interval, "
                "beside the best measured at each world size.", scale_figure(data.scale), data.scale.note),
        *([Section("mesh", "Throughput by mesh",
                   "Each parallel mesh the study ran (pipeline x data x tensor parallel, with the pipeline's "
                   "schedule and micro-batches, and the sharding on the data-parallel axis): its best measured "
                   "throughput, each complete trial, and crosses where a configuration was predicted over the "
                   "memory budget and never launched.", mesh_figure(data.mesh), _mesh_note(data))]
          if data.mesh.shown else []),
        Section("anatomy", "Step anatomy",
                "Where each configuration's step went (the slowest rank, each part's median over its trials): "
                "waiting for the next batch, forward/backward, gradient synchronisation not hidden behind "
                "computation, the optimizer step and the rest.", anatomy_figure(data.anatomy),
                None if data.anatomy else "no trial measured a step anatomy"),
        Section("importance", "Parameter importances",
                "How much each searched knob explains of each objective (optuna.importance).",
                importance_figure(data.importance), data.importance.note),
        Section("parallel", "Parallel coordinates",
                "One line per trial across the searched knobs and the measured objectives; dotted lines did "
                "not complete.", parallel_figure(data.parallel),
                None if data.parallel.lines else "no trial measured anything yet"),
        Section("intermediate", "Intermediate values",
                f"What the pruner saw ({data.intermediate.source}) per trial: a curve that stops early was "
                "pruned or failed there.", intermediate_figure(data.intermediate),
                None if data.intermediate.curves else "no trial reported an intermediate value"),
        Section("timeline", "Timeline",
                "When each trial ran, coloured by outcome; hover for the reason it ended.",
                timeline_figure(data.timeline), None if data.timeline else "no trial has started"),
        Section("feasibility", "Feasibility",
                "The constraints of every complete trial (optuna-dashboard does not show them); a bar above 0 "
                "violates its constraint and makes the trial infeasible.", feasibility_figure(data.feasibility),
                None if data.feasibility.rows else "no complete trial yet"),
    ]
    return sections


def _mesh_note(data: ReportData) -> str | None:
    """The fastest mesh measured, and the meshes never launched (predicted over the memory budget)."""
    rows = data.mesh.rows
    parts = [f"fastest: {rows[0].label} at {rows[0].best:,.0f} samples/s"] if rows and rows[0].best else []
    skipped = [row.label for row in rows if row.not_launched]
    if skipped:
        parts.append(f"not launched (predicted over the memory budget): {', '.join(skipped)}")
    return "; ".join(parts) or None


def _prediction_note(data: ReportData) -> str | None:
    """The prediction's median miss and the configurations not launched, in one line."""
    m = data.memory_prediction
    if not m.points and not m.not_launched:
        return "no trial has a predicted and a measured peak yet"
    parts = []
    if m.median_error is not None:
        parts.append(f"median miss {m.median_error:.1%} over {len(m.points)} trials")
    if m.not_launched:
        numbers = ", ".join(f"#{s.number}" for s in m.not_launched)
        parts.append(f"{len(m.not_launched)} configuration{'s' if len(m.not_launched) != 1 else ''} not launched: "
                     f"predicted over the memory budget ({numbers})")
    return "; ".join(parts) or None


def write_pngs(sections: Sequence[Section], folder: Path) -> list[Path]:
    """Export every figure as ``<folder>/<key>.png`` through kaleido (which drives a Chromium)."""
    import os
    import shutil

    try:
        import kaleido  # noqa: F401
    except ImportError:
        from autotune.errors import UsageError

        raise UsageError("--png needs kaleido; install it with: pip install 'autotune[report]'") from None
    if "BROWSER_PATH" not in os.environ:
        for name in ("chromium", "chromium-browser", "google-chrome"):
            found = shutil.which(name)
            if found:
                os.environ["BROWSER_PATH"] = found
                break
    import plotly.io as pio

    folder.mkdir(parents=True, exist_ok=True)
    drawn = [(s.key, s.figure) for s in sections if s.figure is not None]
    paths = [folder / f"{key}.png" for key, _ in drawn]
    for path in paths:
        path.unlink(missing_ok=True)  # an older export's file is not this one's
    # plotly's write_images hands kaleido's failures back unraised (a figure whose render timed out on a busy
    # machine is simply not written): what is missing is exported once more, then named.
    pending = list(range(len(drawn)))
    for _ in range(2):
        figures = [drawn[i][1] for i in pending]
        heights = [int(f.layout.height or HEIGHT) for f in figures]
        if hasattr(pio, "write_images"):  # plotly >= 6.1: one browser for every figure
            pio.write_images(figures, [str(paths[i]) for i in pending], width=[1200] * len(figures), height=heights)
        else:
            for figure, i, height in zip(figures, pending, heights, strict=True):
                pio.write_image(figure, str(paths[i]), width=1200, height=height)
        pending = [i for i in pending if not paths[i].exists()]
        if not pending:
            return paths
    from autotune.errors import AutotuneError

    missing = ", ".join(paths[i].name for i in pending)
    raise AutotuneError(f"--png {folder}: kaleido wrote no {missing}, twice (Chromium: "
                        f"{os.environ.get('BROWSER_PATH', 'found by kaleido')}; on a busy machine a render can time "
                        "out): run the report again")

