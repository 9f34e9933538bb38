"""Assemble the report: one self-contained HTML file with plotly.js inlined once, written atomically."""

from __future__ import annotations

import html
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune.knobs import KNOBS
from autotune.report._data import ReportData, report_data
from autotune.report._headline import Headline, Measured
from autotune.report._table import TrialsTable
from autotune.spec import StudySpec

__all__ = ["default_report_path", "fmt", "render_html", "write_report"]

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1320px;
       padding: 16px 24px 48px; color: #222; }
h1 { margin: 8px 0 2px; } h2 { margin: 28px 0 4px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta, .caption { color: #555; margin: 2px 0 8px; } .note { color: #8a5a00; background: #fff6e0;
       padding: 6px 10px; border-radius: 4px; }
nav a { margin-right: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 10px 14px; min-width: 220px; }
.card h3 { margin: 0 0 6px; font-size: 14px; color: #555; font-weight: 600; }
.big { font-size: 26px; font-weight: 600; } .vs { color: #555; }
table { border-collapse: collapse; font-size: 13px; }
.table-wrap { overflow-x: auto; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 4px 8px; text-align: left; white-space: nowrap; }
td.reason { white-space: normal; min-width: 220px; max-width: 420px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { cursor: pointer; background: #f6f6f6; position: sticky; top: 0; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
tr.outcome-pruned td { color: #a35400; } tr.infeasible td { color: #b00; }
tr.outcome-crashed td, tr.outcome-timeout td, tr.outcome-hang td, tr.outcome-interrupted td { color: #777; }
"""

# Click a header to sort by it; click again to reverse. Empty cells stay last.
_SORT_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var numeric = th.getAttribute("data-type") === "num";
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute("data-sort"), y = b.cells[col].getAttribute("data-sort");
        if (x === "" || y === "") { return (x === "") - (y === ""); }
        var d = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """How a value is shown in the report: 4 significant digits, thousands separated, '-' for missing."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    return str(value)


def _value(key: str, value: float | None, unit: str = "") -> str:
    """A number with its exact value in data attributes, so tests (and scripts) read what is stored."""
    raw = "" if value is None else repr(value)
    shown = fmt(value) + (f" {unit}" if unit and value is not None else "")
    return f'<span class="value" data-key="{_e(key)}" data-value="{_e(raw)}">{_e(shown)}</span>'


def _config_line(config: Mapping[str, Any]) -> str:
    parts = [f"{k}={fmt(config[k])}" for k in KNOBS if k in config and config[k] is not None]
    return ", ".join(parts) or "-"


def _noise(m: Measured) -> str:
    """`` (spread 9.5%, ± 4%)``: how noisy one side of the headline is."""
    parts = [f"spread {m.spread * 100:.1f}%"] if m.spread is not None else []
    if m.half_width is not None:
        parts.append(f"± {m.half_width:.0%}")
    return f" ({', '.join(parts)})" if parts else ""


def _headline_html(h: Headline) -> str:
    best, base = h.best, h.baseline

    def side(m: Measured | None, attr: str) -> float | None:
        return getattr(m, attr) if m is not None else None

    if h.source == "confirmation":
        runs = f"{len(best.trials)} run{'s' if best and len(best.trials) != 1 else ''}" if best else ""
        source = f"median of the confirmation runs ({runs} of the best configuration)"
    else:
        source = "single trials (no confirmation runs stored)"
    speed = (f'<div class="big">{_value("speedup", h.speedup)}&times;</div>' if h.speedup is not None
             else '<div class="big"><span class="value" data-key="speedup" data-value="">-</span></div>')
    if h.speedup is not None and h.speedup_half_width:  # a ratio of two noisy medians: its interval
        width = h.speedup * h.speedup_half_width
        speed += f'<div class="vs">&plusmn; {_value("speedup-interval", width)}&times;</div>'
    cards = [
        f'<div class="card"><h3>Speed-up over baseline</h3>{speed}<div class="vs">throughput, {_e(source)}</div>'
        "</div>",
    ]
    for title, attr, key, unit in (
        ("Throughput", "throughput_samples_s", "throughput", "samples/s"),
        ("Peak memory", "peak_memory_mb", "memory", "MB"),
        ("Loss", "loss", "loss", ""),
    ):
        cards.append(
            f'<div class="card"><h3>{title}</h3><div class="big">{_value("best-" + key, side(best, attr), unit)}'
            f'</div><div class="vs">best; baseline {_value("baseline-" + key, side(base, attr), unit)}</div></div>'
        )
    outcomes = ", ".join(f"{n} {_e(o)}" for o, n in h.outcomes.items()) or "none"
    cards.append(
        f'<div class="card"><h3>Trials</h3><div class="big">{_value("n-trials", float(h.n_trials))}</div>'
        f'<div class="vs">{outcomes}; {h.n_feasible} feasible</div></div>'
    )
    lines = []
    if best is not None:
        spread = _noise(best)
        lines.append(f"<b>Best</b> (trial{'s' if len(best.trials) != 1 else ''} "
                     f"{_e(', '.join(map(str, best.trials)))}){_e(spread)}: {_e(_config_line(best.config))}")
    else:
        lines.append("<b>Best</b>: no feasible complete trial yet")
    if base is not None:
        lines.append(f"<b>Baseline</b> (trial{'s' if len(base.trials) != 1 else ''} "
                     f"{_e(', '.join(map(str, base.trials)))}){_e(_noise(base))}: {_e(_config_line(base.config))}")
    else:
        lines.append("<b>Baseline</b>: no baseline trial stored")
    if h.statement:  # the winner against the runner-up: never a bare winner
        lines.append(f'<b>Noise</b>: <span id="statement">{_e(h.statement)}</span>')
    if h.held:
        lines.append(f'<b>Global batch</b>: <span id="held">{_e(h.held)}</span>')
    if h.race:
        lines.append(f'<b>Confirmation</b>: <span id="race">{_e(h.race)}</span>')
    if h.advice:
        lines.append(f'<span id="advice">{_e(h.advice)}</span>')
    note = f'<p class="note">{_e(h.note)}</p>' if h.note else ""
    if h.busy:
        note += f'<p class="note" id="busy">{_e(h.busy)}</p>'
    return (f'<section id="headline"><div class="cards">{"".join(cards)}</div>'
            f'<p class="meta">{"<br>".join(lines)}</p>{note}</section>')


def _cell(value: Any, numeric: bool, css: str = "") -> str:
    if value is None:
        sort = ""
    elif isinstance(value, bool):
        sort = "1" if value else "0"
    elif numeric and isinstance(value, (int, float)):
        sort = repr(float(value))
    else:
        sort = str(value)
    classes = " ".join(c for c in (("num" if numeric else ""), css) if c)
    cls = f' class="{classes}"' if classes else ""
    return f'<td{cls} data-sort="{_e(sort)}">{_e(fmt(value))}</td>'


def _table_html(table: TrialsTable) -> str:
    head = "".join(
        f'<th data-key="{_e(c.key)}" data-type="{"num" if c.numeric else "text"}" title="sort by {_e(c.label)}">'
        f"{_e(c.label)}</th>"
        for c in table.columns
    )
    keys = [c.key for c in table.columns]
    body = []
    for row in table.rows:
        values = dict(zip(keys, row, strict=True))
        classes = [f"outcome-{values['outcome']}"] + (["infeasible"] if values.get("feasible") == "no" else [])
        cells = "".join(
            _cell(v, c.numeric, "reason" if c.key == "reason" else "") for c, v in zip(table.columns, row, strict=True)
        )
        body.append(f'<tr class="{_e(" ".join(classes))}" data-number="{_e(values["number"])}">{cells}</tr>')
    return (f'<div class="table-wrap"><table id="trials-table" class="sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def render_html(data: ReportData, storage: str = "", png_dir: Path | None = None) -> str:
    """The whole report as one HTML document (plotly.js inlined once; no external asset)."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from autotune.report._sections import build_sections, write_pngs

    sections = build_sections(data)
    if png_dir is not None:
        write_pngs(sections, png_dir)
    views = []
    for s in sections:
        note = f'<p class="note">{_e(s.note)}</p>' if s.note else ""
        figure = ""
        if s.figure is not None:
            figure = pio.to_html(s.figure, full_html=False, include_plotlyjs=False, div_id=f"fig-{s.key}",
                                 config=_PLOTLY_CONFIG)
            figure = f'<div class="figure" data-figure="{_e(s.key)}">{figure}</div>'
        views.append(f'<section class="view" id="view-{_e(s.key)}"><h2>{_e(s.title)}</h2>'
                     f'<p class="caption">{_e(s.caption)}</p>{note}{figure}</section>')
    nav = " ".join(f'<a href="#view-{_e(s.key)}">{_e(s.title)}</a>' for s in sections)
    objectives = ", ".join(f"{m} ({d})" for m, d in zip(data.metrics, data.directions, strict=True))
    from autotune.version import __version__

    meta = (f"{_e(objectives)} &middot; storage {_e(storage)} &middot; generated "
            f"{_e(data.generated.strftime('%Y-%m-%d %H:%M:%S'))} by autotune {_e(__version__)}")
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>autotune report: {_e(data.study_name)}</title><style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>',
        f'<header><h1>Study <span id="study-name">{_e(data.study_name)}</span></h1><p class="meta">{meta}</p>'
        "</header>",
        _headline_html(data.headline),
        f"<nav>{nav} <a href=\"#view-trials\">All trials</a></nav>",
        *views,
        '<section class="view" id="view-trials"><h2>All trials</h2><p class="caption">Every trial, pruned, '
        "failed and infeasible ones included. Click a column header to sort.</p>",
        _table_html(data.table),
        f"</section><script>{_SORT_JS}</script></body></html>\n",
    ])


def default_report_path(spec: StudySpec, cwd: Path | None = None) -> Path:
    """``<study file's folder>/../dashboards/NAME.html`` when that folder exists, else ``./dashboards/NAME.html``."""
    beside = spec.base_dir.parent / "dashboards"
    folder = beside if beside.is_dir() else (cwd or Path.cwd()) / "dashboards"
    return folder / f"{spec.name}.html"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(
    spec: StudySpec,
    study: optuna.Study | None = None,
    path: str | Path | None = None,
    png_dir: str | Path | None = None,
) -> Path:
    """Write the study's offline HTML report and return its path.

    ``study`` defaults to the spec's study in its storage (a one-line error when there is none);
    ``path`` to :func:`default_report_path`; ``png_dir``, when given, also receives one PNG per figure.
    """
    from autotune.report._study import open_study, redacted_storage

    study = open_study(spec) if study is None else study
    target = Path(path) if path is not None else default_report_path(spec)
    text = render_html(report_data(study, spec), storage=redacted_storage(spec.storage_url()),
                       png_dir=Path(png_dir) if png_dir is not None else None)
    _write_atomically(target, text)
    return target

