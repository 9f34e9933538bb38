"""The step anatomy's figure: a stacked bar per configuration (milliseconds per step, the slowest rank)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from autotune.report._anatomy import PARTS, AnatomyBar
from autotune.report._figures import _layout

COLORS = {
    "data_wait_s": "#d62728",
    "forward_backward_s": "#1f77b4",
    "sync_exposed_s": "#ff7f0e",
    "optimizer_s": "#2ca02c",
    "other_s": "#7f7f7f",
}


def anatomy_figure(bars: Sequence[AnatomyBar]) -> go.Figure | None:
    if not bars:
        return None
    fig = go.Figure()
    labels = [b.label for b in bars]
    for part, name in PARTS.items():
        ms = [1000 * (getattr(b.anatomy, part) or 0.0) for b in bars]
        fig.add_trace(go.Bar(
            y=labels, x=ms, orientation="h", name=name, marker={"color": COLORS[part]},
            text=[f"{name}: {v:.2f} ms ({v / (1000 * b.anatomy.step_s):.0%} of the step)" if b.anatomy.step_s else ""
                  for v, b in zip(ms, bars, strict=True)],
            textposition="none", hovertemplate="%{y}<br>%{text}<extra></extra>",
        ))
    height = max(300, 60 + 28 * len(bars))
    return _layout(fig, barmode="stack", height=height, xaxis={"title": "milliseconds per step (slowest rank)"},
                   yaxis={"autorange": "reversed", "type": "category"})
