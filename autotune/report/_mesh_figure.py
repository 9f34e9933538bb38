"""The "throughput by mesh" figure (``_mesh.py``'s data), apart from ``_figures.py`` to keep each module short:
each mesh and sharding's trials as points, its best as a bar, the meshes not launched marked at zero."""

from __future__ import annotations

import plotly.graph_objects as go

from autotune.report._figures import _layout
from autotune.report._mesh import MeshData

__all__ = ["mesh_figure"]


def mesh_figure(data: MeshData) -> go.Figure | None:
    if not data.shown or not data.rows:
        return None
    labels = [row.label for row in data.rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=labels, y=[row.best or 0.0 for row in data.rows], name="best measured", marker={"color": "#1f77b4"},
        text=[f"{row.world_size} ranks, peak {row.peak_mb:,.0f} MB" if row.peak_mb is not None else
              f"{row.world_size} ranks" for row in data.rows],
        hovertemplate="%{x}: %{y:,.0f} samples/s (%{text})<extra></extra>",
    ))
    xs = [row.label for row in data.rows for _ in row.throughputs]
    fig.add_trace(go.Scatter(
        x=xs, y=[v for row in data.rows for v in row.throughputs], mode="markers", name="each complete trial",
        marker={"color": "#ff7f0e", "size": 8}, hovertemplate="%{x}: %{y:,.0f} samples/s<extra></extra>",
    ))
    skipped = [row for row in data.rows if row.not_launched]
    if skipped:
        fig.add_trace(go.Scatter(
            x=[row.label for row in skipped], y=[0.0] * len(skipped), mode="markers",
            name="predicted over the memory budget (not launched)", marker={"symbol": "x", "size": 12,
                                                                            "color": "#d62728"},
            hovertemplate="%{x}: not launched<extra></extra>",
        ))
    return _layout(fig, xaxis={"title": "mesh (pp x dp x tp) and sharding on dp"}, yaxis={"title": "samples/s"})
