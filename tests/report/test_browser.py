"""The report and the dashboard in a real headless Chromium (Debian's /usr/bin/chromium), offline."""

from __future__ import annotations

import html
import json
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from autotune.report import write_report
from autotune.report._html import fmt

from .conftest import Built, data_values, needs_chromium, run_chromium

pytestmark = needs_chromium

FIGURE = re.compile(r'<div class="figure" data-figure="([^"]+)">(.*?)</section>', re.S)


def _rendered(dom: str) -> dict[str, bool]:
    """Figure key -> whether plotly drew it (an SVG plot container inside the figure's div)."""
    return {key: 'class="plot-container plotly"' in body and 'class="main-svg"' in body
            for key, body in FIGURE.findall(dom)}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["single", "multi"])
def test_report_renders_every_figure_offline(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    built: Built = request.getfixturevalue(which)
    path = write_report(built.spec, built.study, tmp_path / "report.html")
    raw = path.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc=", raw) and not re.search(r"<script[^>]*src=\"http", raw)
    expected = raw.count('class="plotly-graph-div"')
    drawn = set(re.findall(r'<div class="figure" data-figure="([^"]+)">', raw))
    # Every view these studies have data for is drawn (memory_prediction needs predicted trials, which they lack).
    first = "history" if which == "single" else "pareto"
    assert drawn == {first, "throughput", "memory", "scale", "anatomy", "importance", "parallel",
                     "intermediate", "timeline", "feasibility"}, drawn
    assert expected == len(drawn)
    assert 'class="plot-container plotly"' not in raw  # drawn by plotly.js in the browser, not by us

    shot = tmp_path / "report.png"  # kept under the test's tmp folder for a person to look at
    dom = run_chromium(["--dump-dom", "--virtual-time-budget=10000", f"--screenshot={shot}",
                        "--window-size=1400,3000", "--hide-scrollbars"], path.as_uri(), tmp_path / "profile")
    rendered = _rendered(dom)
    assert len(rendered) == expected and all(rendered.values()), rendered
    assert dom.count('<div class="plot-container plotly"') == expected
    assert "WebGL" not in dom.split("</head>", 1)[1]  # no figure fell back to a WebGL error message
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_headline_numbers_in_the_dom_are_the_stored_ones(single: Built, tmp_path: Path) -> None:
    path = write_report(single.spec, single.study, tmp_path / "report.html")
    dom = run_chromium(["--dump-dom", "--virtual-time-budget=5000"], path.as_uri(), tmp_path / "profile")
    values = data_values(dom)
    stored = single.study.user_attrs["autotune_confirmation"]
    best = next(g for g in stored["groups"] if g["config_key"] == stored["best_config_key"])
    expected = {
        "speedup": stored["speedup"],
        "best-throughput": best["median"],
        "best-memory": best["peak_memory_mb"],
        "best-loss": best["loss"],
        "baseline-throughput": stored["baseline"]["median"],
        "baseline-memory": stored["baseline"]["peak_memory_mb"],
        "baseline-loss": stored["baseline"]["loss"],
        "n-trials": len(single.plans),
    }
    for key, value in expected.items():
        assert float(values[key]) == value, key
    # What a person reads is the same number, rounded for display.
    shown = dict(re.findall(r'data-key="([^"]+)" data-value="[^"]*">([^<]*)</span>', dom))
    assert html.unescape(shown["speedup"]) == fmt(stored["speedup"])
    assert html.unescape(shown["best-throughput"]) == f"{fmt(best['median'])} samples/s"
    assert 'id="study-name">demo-single<' in dom


def test_trials_table_sorts_by_clicking_headers(single: Built, tmp_path: Path) -> None:
    path = write_report(single.spec, single.study, tmp_path / "report.html")
    probe = """<script>
    var th = document.querySelector('th[data-key="throughput_samples_s"]');
    function order() { return Array.prototype.map.call(document.querySelectorAll("#trials-table tbody tr"),
                                                        function (r) { return r.getAttribute("data-number"); }); }
    th.click(); var asc = order(); th.click(); var desc = order();
    document.querySelector('th[data-key="outcome"]').click(); var byOutcome = order();
    var out = document.createElement("pre"); out.id = "probe-out";
    out.textContent = JSON.stringify([asc, desc, byOutcome]); document.body.appendChild(out);
    </script></body>"""
    probed = tmp_path / "probe.html"
    probed.write_text(path.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    dom = run_chromium(["--dump-dom", "--virtual-time-budget=5000"], probed.as_uri(), tmp_path / "profile")
    match = re.search(r'<pre id="probe-out">(.*?)</pre>', dom)
    assert match, "the probe script did not run"
    asc, desc, by_outcome = ([int(n) for n in order] for order in json.loads(html.unescape(match.group(1))))
    measured = sorted((p.throughput, n) for n, p in enumerate(single.plans) if p.throughput is not None)
    unmeasured = [n for n, p in enumerate(single.plans) if p.throughput is None]
    assert asc == [n for _, n in measured] + unmeasured  # empty cells stay last
    assert desc == [n for _, n in reversed(measured)] + unmeasured
    assert [single.plans[n].outcome for n in by_outcome] == sorted(p.outcome for p in single.plans)


# --------------------------------------------------------------------------------------------- dashboard
def _read_line(proc: subprocess.Popen[str], within_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], within_s)
    if not ready:
        return ""
    return proc.stdout.readline()


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_dashboard_serves_the_study_with_its_artifacts_on_loopback(single: Built, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "dashboard", str(single.yaml), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    port = 0
    try:
        line = _read_line(proc, 30)
        match = re.search(r"(http://127\.0\.0\.1:(\d+))/dashboard/studies/(\d+)", line)
        assert match, f"no URL printed: {line!r}"
        base, port, study_id = match.group(1), int(match.group(2)), int(match.group(3))
        page = match.group(0)
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _ = _get(page)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert status == 200

        _, body = _get(f"{base}/api/studies")
        studies = {s["study_name"]: s["study_id"] for s in json.loads(body)["study_summaries"]}
        assert studies == {"demo-single": study_id}

        # The trial logs are artifacts of their trials, served by the dashboard.
        _, body = _get(f"{base}/api/studies/{study_id}?after=0")
        trials = {t["number"]: t for t in json.loads(body)["trials"]}
        assert len(trials) == len(single.plans)
        crashed = trials[4]
        names = {a["filename"]: a["artifact_id"] for a in crashed["artifacts"]}
        assert {"config.json", "metrics.jsonl", "rank0.log", "launcher.err", "result.json"} <= set(names)
        _, log = _get(f"{base}/artifacts/{study_id}/{crashed['trial_id']}/{names['launcher.err']}")
        assert b"Segmentation fault" in log

        shot = tmp_path / "dashboard.png"
        dom = run_chromium(["--dump-dom", "--virtual-time-budget=15000", f"--screenshot={shot}",
                            "--window-size=1400,1000"], page, tmp_path / "profile")
        assert f"demo-single (id={study_id})" in dom  # drawn by the dashboard's scripts from the API
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            pytest.fail("the dashboard did not stop within 10 s of SIGTERM")
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert port and not _listening(port)
