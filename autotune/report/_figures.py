"""Plotly figures, one per view, drawn from the views' data (``_headline.py``, ``_history.py``, ...).

Every figure draws SVG (no WebGL trace types), so a report renders in any browser, offline, and in
headless Chromium without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from autotune.report._batch import BatchData
from autotune.report._feasibility import FeasibilityData
from autotune.report._history import HistoryData
from autotune.report._importance import ImportanceData
from autotune.report._intermediate import IntermediateData
from autotune.report._memory_prediction import MemoryPredictionData
from autotune.report._parallel import ParallelData
from autotune.report._pareto import ParetoData
from autotune.report._timeline import TimelineBar

__all__ = [
    "OUTCOME_COLORS",
    "batch_figure",
    "feasibility_figure",
    "history_figure",
    "importance_figure",
    "intermediate_figure",
    "memory_prediction_figure",
    "parallel_figure",
    "pareto_figure",
    "timeline_figure",
]

OUTCOME_COLORS = {
    "complete": "#2ca02c",
    "pruned": "#ff7f0e",
    "oom": "#d62728",
    "diverged": "#9467bd",
    "crashed": "#8c564b",
    "timeout": "#e377c2",
    "hang": "#7f7f7f",
    "interrupted": "#bcbd22",
    "running": "#17becf",
}
_OTHER = "#444444"
HEIGHT = 420
_LABELS = {
    "throughput_samples_s": "throughput (samples/s)",
    "peak_memory_mb": "peak memory (MB)",
    "loss": "loss",
}


def _color(outcome: str) -> str:
    return OUTCOME_COLORS.get(outcome, _OTHER)


def _label(metric: str) -> str:
    return _LABELS.get(metric, metric)


def _layout(fig: go.Figure, **kwargs: Any) -> go.Figure:
    defaults: dict[str, Any] = {
        "template": "plotly_white", "height": HEIGHT, "margin": {"l": 70, "r": 30, "t": 30, "b": 60},
        "legend": {"orientation": "h", "y": -0.18}, "hoverlabel": {"align": "left"},
    }
    fig.update_layout(**{**defaults, **kwargs})
    return fig


def _symbol(outcome: str, feasible: bool | None) -> str:
    if outcome == "complete" and feasible is not False:
        return "circle"
    if outcome == "pruned":
        return "circle-open"
    if feasible is False or outcome in ("oom", "diverged"):
        return "x"
    return "diamond-open"


# --------------------------------------------------------------------------------------------- figures
def history_figure(data: HistoryData) -> go.Figure:
    fig = go.Figure()
    styles = {
        "feasible": ("feasible", "circle", "#1f77b4"),
        "infeasible": ("infeasible", "x", OUTCOME_COLORS["oom"]),
        "pruned": ("pruned (last reported value)", "circle-open", OUTCOME_COLORS["pruned"]),
    }
    for kind, (name, symbol, color) in styles.items():
        points = [p for p in data.points if p.kind == kind]
        if not points:
            continue
        fig.add_trace(go.Scatter(
            x=[p.number for p in points], y=[p.value for p in points], mode="markers", name=name,
            marker={"symbol": symbol, "color": color, "size": 9},
            text=[f"trial {p.number}: {p.outcome}<br>{p.reason}" for p in points],
            hovertemplate="%{text}<br>%{y:.4g}<extra></extra>",
        ))
    if data.best_so_far:
        fig.add_trace(go.Scatter(
            x=[n for n, _ in data.best_so_far], y=[v for _, v in data.best_so_far], mode="lines",
            name="best feasible so far", line={"shape": "hv", "color": "#1f77b4"},
        ))
    return _layout(fig, xaxis_title="trial", yaxis_title=f"{_label(data.metric)} ({data.direction})")


def pareto_figure(data: ParetoData) -> go.Figure:
    fig = go.Figure()
    three = len(data.metrics) >= 3
    groups = [
        ("Pareto front", lambda p: p.on_front, "circle", 11),
        ("feasible, dominated", lambda p: p.feasible and not p.on_front, "circle-open", 8),
        ("infeasible", lambda p: not p.feasible, "x", 8),
    ]
    for name, keep, symbol, size in groups:
        points = [p for p in data.points if keep(p)]
        if not points:
            continue
        marker: dict[str, Any] = {"symbol": symbol, "size": size}
        if three:
            marker.update(color=[p.values[2] for p in points], colorscale="Viridis",
                          colorbar={"title": _label(data.metrics[2])}, showscale=name == "Pareto front")
        elif name == "infeasible":
            marker["color"] = OUTCOME_COLORS["oom"]
        fig.add_trace(go.Scatter(
            x=[p.values[0] for p in points], y=[p.values[1] for p in points], mode="markers", name=name,
            marker=marker,
            text=[f"trial {p.number} ({p.role or 'search'})<br>" + "<br>".join(
                f"{_label(m)}: {v:.4g}" for m, v in zip(data.metrics, p.values, strict=True)) for p in points],
            hovertemplate="%{text}<extra></extra>",
        ))
    return _layout(fig, xaxis_title=f"{_label(data.metrics[0])} ({data.directions[0]})",
                   yaxis_title=f"{_label(data.metrics[1])} ({data.directions[1]})")


def batch_figure(data: BatchData) -> go.Figure:
    fig = go.Figure()
    for series in data.series:
        fig.add_trace(go.Scatter(
            x=[p.batch_size for p in series.points], y=[p.value for p in series.points], mode="markers",
            name=series.label,
            marker={"size": 10, "symbol": [_symbol(p.outcome, p.feasible) for p in series.points],
                    "line": {"width": 2}},
            text=[f"trial {p.number} ({p.role or 'search'}): {p.outcome}"
                  + ("" if p.feasible is not False else ", infeasible") for p in series.points],
            hovertemplate="%{text}<br>batch %{x}<br>%{y:.4g}<extra>" + series.label + "</extra>",
        ))
    if data.budget is not None:
        fig.add_hline(y=data.budget, line={"dash": "dash", "color": OUTCOME_COLORS["oom"]},
                      annotation_text=f"memory budget {data.budget:g} MB", annotation_position="top left")
    sizes = [p.batch_size for series in data.series for p in series.points]
    ticks = [2**k for k in range(0, 20) if sizes and min(sizes) / 2 <= 2**k <= max(sizes) * 2]
    return _layout(fig, xaxis={"type": "log", "title": "per-rank batch size", "tickvals": ticks},
                   yaxis_title=_label(data.metric))


def importance_figure(data: ImportanceData) -> go.Figure | None:
    if not data.importances:
        return None
    fig = go.Figure()
    params = sorted({p for _, values in data.importances for p in values},
                    key=lambda p: data.importances[0][1].get(p, 0.0))
    for metric, values in data.importances:
        fig.add_trace(go.Bar(
            y=params, x=[values.get(p, 0.0) for p in params], orientation="h", name=_label(metric),
            hovertemplate="%{y}: %{x:.3f}<extra>" + _label(metric) + "</extra>",
        ))
    return _layout(fig, barmode="group", xaxis_title="importance (fraction)", yaxis_title="knob")


def parallel_figure(data: ParallelData) -> go.Figure | None:
    """Parallel coordinates as SVG lines (one per trial) coloured by the first objective's metric."""
    if not data.axes or not data.lines:
        return None
    fig = go.Figure()
    colored = [line.color for line in data.lines if line.color is not None]
    low, high = (min(colored), max(colored)) if colored else (0.0, 1.0)
    span = high - low or 1.0
    xs = list(range(len(data.axes)))
    for line in data.lines:
        color = (sample_colorscale("Viridis", [(line.color - low) / span])[0] if line.color is not None
                 else _OTHER)
        hover = f"trial {line.number}: {line.outcome}<br>" + "<br>".join(
            f"{axis.name}: {_show(value)}" for axis, value in zip(data.axes, line.raw, strict=True))
        fig.add_trace(go.Scatter(
            x=xs, y=list(line.positions), mode="lines+markers", showlegend=False,
            line={"color": color, "width": 2, "dash": "solid" if line.outcome == "complete" else "dot"},
            marker={"size": 5, "color": color}, text=[hover] * len(xs), hovertemplate="%{text}<extra></extra>",
        ))
    # A colour bar for the metric, and the axis ticks as annotations.
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
        marker={"colorscale": "Viridis", "cmin": low, "cmax": high, "color": [low],
                "colorbar": {"title": _label(data.color_metric)}, "showscale": True},
    ))
    for x, axis in enumerate(data.axes):
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, line={"color": "#888", "width": 1})
        for position, text in _ticks(axis):
            fig.add_annotation(x=x, y=position, text=text, showarrow=False, xanchor="left", xshift=4,
                               font={"size": 10, "color": "#555"})
    fig.update_xaxes(tickvals=xs, ticktext=[_label(a.name) for a in data.axes], range=[-0.3, len(xs) - 0.4])
    fig.update_yaxes(visible=False, range=[-0.08, 1.08])
    return _layout(fig)


def _ticks(axis: Any) -> list[tuple[float, str]]:
    if axis.categories is not None:
        n = len(axis.categories)
        return [(i / (n - 1) if n > 1 else 0.5, c) for i, c in enumerate(axis.categories)]
    if axis.high == axis.low:
        value = 10**axis.low if axis.log else axis.low
        return [(0.5, _show(value))]
    ends = [axis.low, axis.high]
    return [(i, _show(10**v if axis.log else v)) for i, v in enumerate(ends)]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def intermediate_figure(data: IntermediateData) -> go.Figure | None:
    if not data.curves:
        return None
    fig = go.Figure()
    shown: set[str] = set()
    for curve in data.curves:
        fig.add_trace(go.Scatter(
            x=[s for s, _ in curve.points], y=[v for _, v in curve.points], mode="lines+markers",
            name=curve.outcome, legendgroup=curve.outcome, showlegend=curve.outcome not in shown,
            line={"color": _color(curve.outcome), "dash": "solid" if curve.outcome == "complete" else "dot"},
            marker={"size": 5},
            text=[f"trial {curve.number}: {curve.outcome}<br>{curve.reason}"] * len(curve.points),
            hovertemplate="%{text}<br>step %{x}: %{y:.4g}<extra></extra>",
        ))
        shown.add(curve.outcome)
    return _layout(fig, xaxis_title="step", yaxis_title=f"{_label(data.metric)} ({data.source})")


def timeline_figure(bars: Sequence[TimelineBar]) -> go.Figure | None:
    if not bars:
        return None
    fig = go.Figure()
    for outcome in dict.fromkeys(b.outcome for b in bars):
        chosen = [b for b in bars if b.outcome == outcome]
        fig.add_trace(go.Bar(
            base=[b.start.isoformat() for b in chosen],
            x=[max((b.end - b.start).total_seconds() * 1000, 1.0) for b in chosen],
            y=[b.number for b in chosen], orientation="h", name=outcome, marker={"color": _color(outcome)},
            text=[f"trial {b.number} ({b.role or 'search'}): {outcome}{' (running)' if b.running else ''}"
                  f"<br>{b.reason}<br>{(b.end - b.start).total_seconds():.1f} s" for b in chosen],
            textposition="none", hovertemplate="%{text}<extra></extra>",
        ))
    return _layout(fig, xaxis={"type": "date", "title": "time"}, yaxis={"title": "trial", "autorange": "reversed"},
                   barmode="overlay")


def feasibility_figure(data: FeasibilityData) -> go.Figure | None:
    if not data.rows or not data.names:
        return None
    fig = make_subplots(rows=len(data.names), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[_constraint_title(n, data.budget) for n in data.names])
    for i, name in enumerate(data.names, start=1):
        rows = [r for r in data.rows if name in r.constraints]
        values = [r.constraints[name] for r in rows]
        fig.add_trace(go.Bar(
            x=[r.number for r in rows], y=values, showlegend=False,
            marker={"color": [OUTCOME_COLORS["oom"] if v > 0 else OUTCOME_COLORS["complete"] for v in values]},
            text=[f"trial {r.number}: {r.outcome}, {'feasible' if r.feasible else 'infeasible'}<br>"
                  f"{name} = {v:.4g} ({'violated' if v > 0 else 'satisfied'})" for r, v in zip(rows, values,
                                                                                          strict=True)],
            textposition="none", hovertemplate="%{text}<extra></extra>",
        ), row=i, col=1)
        fig.add_hline(y=0, line={"color": "#333", "width": 1}, row=i, col=1)
    fig.update_xaxes(title_text="trial", row=len(data.names), col=1)
    return _layout(fig, height=max(HEIGHT, 220 * len(data.names)))


def _constraint_title(name: str, budget: float | None) -> str:
    if name == "memory":
        return (f"memory: peak - budget ({budget:g} MB); above 0 is over budget" if budget is not None
                else "memory: +1 out of memory, -1 otherwise (no budget set)")
    if name == "diverged":
        return "diverged: 1 when the loss became NaN/inf"
    return f"{name} (feasible when <= 0)"


def memory_prediction_figure(data: MemoryPredictionData) -> go.Figure | None:
    """Measured against predicted peak memory per trial, the diagonal where they agree, the budget, and the
    configurations never launched (crosses on the budget line, at their prediction)."""
    if not data.points and not data.not_launched:
        return None
    fig = go.Figure()
    for outcome in dict.fromkeys(p.outcome for p in data.points):
        pts = [p for p in data.points if p.outcome == outcome]
        fig.add_trace(go.Scatter(
            x=[p.predicted_mb for p in pts], y=[p.measured_mb for p in pts], mode="markers", name=outcome,
            error_x={"type": "data", "array": [p.error_mb for p in pts], "visible": True, "thickness": 1},
            marker={"size": 9, "color": _color(outcome)},
            text=[f"trial {p.number} (batch {p.batch_size}): predicted {p.predicted_mb:,.0f} ± {p.error_mb:,.0f} MB, "
                  f"measured {p.measured_mb:,.0f} MB" for p in pts],
            hovertemplate="%{text}<extra></extra>",
        ))
    if data.not_launched and data.budget is not None:
        skipped = [s for s in data.not_launched if s.predicted_mb is not None]
        fig.add_trace(go.Scatter(
            x=[s.predicted_mb for s in skipped], y=[data.budget] * len(skipped), mode="markers",
            name="not launched", marker={"size": 10, "symbol": "x", "color": _color("oom")},
            text=[f"trial {s.number}: {s.reason}" for s in skipped], hovertemplate="%{text}<extra></extra>",
        ))
    values = [v for p in data.points for v in (p.predicted_mb, p.measured_mb)]
    values += [s.predicted_mb for s in data.not_launched if s.predicted_mb is not None]
    if data.budget is not None:
        values.append(data.budget)
        fig.add_hline(y=data.budget, line={"dash": "dash", "color": "#555"}, annotation_text="budget")
        fig.add_vline(x=data.budget, line={"dash": "dot", "color": "#999"})
    top = max(values) * 1.05 if values else 1.0
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="predicted = measured",
                             line={"color": "#bbb", "width": 1}, hoverinfo="skip"))
    return _layout(fig, xaxis={"title": "predicted peak memory per rank (MB)"},
                   yaxis={"title": "measured peak memory per rank (MB)"})
