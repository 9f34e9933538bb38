"""`autotune report` through the real CLI: where it writes, what the file holds, one-line errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs

from autotune.cli import main
from autotune.report import default_report_path, write_report
from autotune.workload_check import load_spec

from .conftest import Built, needs_chromium
from .studies import write_study_file

# history, throughput, memory, anatomy, scale (its trials ran at world sizes 1 and 2), importance, parallel,
# intermediate, timeline, feasibility
FIGURES_SINGLE = 10


def _copy_study(built: Built, root: Path) -> Path:
    """The study file, its workload and its SQLite storage copied under ``root/studies``."""
    studies = root / "studies"
    studies.mkdir(parents=True)
    for path in built.yaml.parent.iterdir():
        if path.is_file():
            shutil.copy(path, studies / path.name)
    return studies / built.yaml.name


def test_default_path_is_the_dashboards_folder_beside_the_study_folder(single: Built, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    yaml = _copy_study(single, tmp_path / "project")
    (tmp_path / "project" / "dashboards").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(main, ["report", str(yaml)])
    assert result.exit_code == 0, result.output
    expected = tmp_path / "project" / "dashboards" / "demo-single.html"
    assert expected.is_file()
    assert str(expected) in result.output
    assert not (elsewhere / "dashboards").exists()
    assert [p.name for p in expected.parent.iterdir()] == ["demo-single.html"]  # no temporary file left


def test_default_path_falls_back_to_the_current_folder(single: Built, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    yaml = _copy_study(single, tmp_path / "project")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(yaml, check_workload=False)
    assert default_report_path(spec) == tmp_path / "dashboards" / "demo-single.html"
    result = CliRunner().invoke(main, ["report", str(yaml)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dashboards" / "demo-single.html").is_file()


def test_output_option_and_self_contained_file(single: Built, tmp_path: Path) -> None:
    out = tmp_path / "out" / "r.html"
    result = CliRunner().invoke(main, ["report", str(single.yaml), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.count(get_plotlyjs()[:80]) == 1  # plotly.js inlined exactly once
    assert not re.search(r"<script[^>]*\bsrc=", text)  # no external script
    assert not re.search(r"<link[^>]*\bhref=", text)  # no stylesheet either
    assert text.count('class="plotly-graph-div"') == FIGURES_SINGLE
    assert 'id="trials-table"' in text and text.count("<tr class=") == len(single.plans)


def test_missing_study_is_one_line_exit_2_and_creates_nothing(tmp_path: Path) -> None:
    yaml = write_study_file(tmp_path / "studies", "never-run", [("throughput", "maximize")])
    result = CliRunner().invoke(main, ["report", str(yaml)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    db = tmp_path / "studies" / "never-run.db"
    assert lines[0] == f"error: no study named 'never-run' in sqlite:///{db}; run `autotune run {yaml}` first"
    assert not db.exists()
    assert not (tmp_path / "dashboards").exists()


def test_wrong_study_name_in_an_existing_storage(single: Built, tmp_path: Path) -> None:
    yaml = _copy_study(single, tmp_path)
    text = yaml.read_text().replace("name: demo-single", "name: other\nstorage: sqlite:///demo-single.db")
    yaml.write_text(text)
    result = CliRunner().invoke(main, ["report", str(yaml)])
    assert result.exit_code == 2
    assert result.output.startswith("error: no study named 'other' in sqlite:///")
    assert len(result.output.strip().splitlines()) == 1


def test_storage_password_is_never_printed(tmp_path: Path) -> None:
    yaml = write_study_file(tmp_path, "pg", [("throughput", "maximize")])
    yaml.write_text(yaml.read_text() + "storage: postgresql+psycopg://tuner:s3cret@127.0.0.1:1/db\n")
    result = CliRunner().invoke(main, ["report", str(yaml)])
    assert result.exit_code == 2
    assert "s3cret" not in result.output
    assert "postgresql+psycopg://tuner:***@127.0.0.1:1/db" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_write_report_takes_a_study_object(multi: Built, tmp_path: Path) -> None:
    path = write_report(multi.spec, multi.study, tmp_path / "m.html")
    text = path.read_text(encoding="utf-8")
    assert 'id="view-pareto"' in text and 'id="view-history"' not in text
    assert text.count('class="plotly-graph-div"') == FIGURES_SINGLE


@needs_chromium
def test_png_export_writes_one_png_per_figure(single: Built, tmp_path: Path) -> None:
    pytest.importorskip("kaleido", reason="kaleido is in the test extra; pip install 'autotune[test]'")
    result = CliRunner().invoke(main, ["report", str(single.yaml), "-o", str(tmp_path / "r.html"),
                                       "--png", str(tmp_path / "png")])
    assert result.exit_code == 0, result.output
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == sorted(f"{k}.png" for k in ("history", "throughput", "memory", "anatomy", "scale", "importance",
                                               "parallel", "intermediate", "timeline", "feasibility"))
    for name in pngs:
        data = (tmp_path / "png" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("fails", [1, 2])
def test_a_figure_kaleido_did_not_write_is_exported_again_then_named(
    single: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: int
) -> None:
    # plotly's write_images returns without raising when kaleido could not render a figure (a timeout on a
    # busy machine): here the history figure is lost `fails` times. Once: the second export writes it; twice:
    # one line names it, exit 1. (A stand-in for kaleido: its real failure needs a machine too busy to render.)
    import plotly.io as pio

    lost = [fails]

    def write_images(figures: list[object], paths: list[str], **_: object) -> None:
        for path in paths:
            if Path(path).name == "history.png" and lost[0] > 0:
                lost[0] -= 1
                continue
            Path(path).write_bytes(b"\x89PNG")

    monkeypatch.setattr(pio, "write_images", write_images)
    (tmp_path / "png").mkdir()
    (tmp_path / "png" / "history.png").write_bytes(b"an older export")  # not taken for this one's
    result = CliRunner().invoke(main, ["report", str(single.yaml), "-o", str(tmp_path / "r.html"),
                                       "--png", str(tmp_path / "png")])
    if fails == 1:
        assert result.exit_code == 0, result.output
        assert (tmp_path / "png" / "history.png").read_bytes() == b"\x89PNG"
    else:
        assert result.exit_code == 1, result.output
        assert "kaleido wrote no history.png, twice" in result.output
        assert not (tmp_path / "png" / "history.png").exists()
