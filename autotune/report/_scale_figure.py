"""The "throughput over scale" figure (``_scale.py``'s data), apart from ``_figures.py`` to keep each module
short: the predicted best throughput by world size with its 90% band, and the best measured."""

from __future__ import annotations

import plotly.graph_objects as go

from autotune.report._figures import _layout
from autotune.report._scale import ScaleData

__all__ = ["scale_figure"]


def scale_figure(data: ScaleData) -> go.Figure | None:
    if not data.predicted:
        return None
    fig = go.Figure()
    sizes = [p.world_size for p in data.predicted]
    fig.add_trace(
        go.Scatter(
            x=sizes + sizes[::-1],
            y=[p.high for p in data.predicted] + [p.low for p in data.predicted][::-1],
            fill="toself",
            fillcolor="rgba(31,119,180,0.15)",
            line={"width": 0},
            name="90% interval",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=sizes,
            y=[p.value for p in data.predicted],
            mode="lines+markers",
            name="predicted best",
            line={"color": "#1f77b4"},
            text=[
                f"{p.world_size} ranks: {p.value:,.0f} samples/s ({p.low:,.0f}-{p.high:,.0f}), batch_size "
                f"{p.batch_size} x grad_accum {p.grad_accum}: {p.config}"
                for p in data.predicted
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[s for s, _ in data.measured],
            y=[v for _, v in data.measured],
            mode="markers",
            name="best measured",
            marker={"size": 10, "color": "#2ca02c"},
            hovertemplate="%{x} ranks: %{y:,.0f} samples/s measured<extra></extra>",
        )
    )
    title = "world size (ranks)" + (f", over {data.nodes} nodes" if data.nodes > 1 else ", one node")
    return _layout(fig, xaxis={"title": title, "type": "log", "dtick": 0.30103}, yaxis={"title": "samples/s"})
