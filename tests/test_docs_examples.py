"""Every example of the guide (docs/guide/) runs.

A fenced block whose title names a file (```yaml title="my-model.yaml"```) is an example file: each test
writes every such block of the guide into a fresh folder. A page's ``<!-- test: COMMAND -->`` comments say
what the suite does there: ``autotune ...`` runs the command in this process (tests/_cli.py), ``python X.py``
runs the script in this process too (``runpy``). ``=> exit N, "text"`` expects that exit status and that text in the
output (else exit 0). ``test (slow)`` commands run in one test, in the pages' order (the guide's navigation),
in one folder: a later page may read the study an earlier one ran.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests._cli import autotune

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```\n', re.S | re.M)
TEST = re.compile(r'^<!-- test(?P<slow> \(slow\))?: (?P<command>.+?)'
                  r'(?: => exit (?P<exit>\d+)(?:, "(?P<expect>[^"]+)")?)? -->$', re.M)


@dataclass(frozen=True)
class Check:
    page: str
    command: str
    slow: bool
    exit: int
    expect: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.command}"


def guide_pages() -> list[str]:
    """The guide's pages in the site's navigation order (mkdocs.yml), index first."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    guide = next(entry["Guide"] for entry in nav if isinstance(entry, dict) and "Guide" in entry)
    paths = [entry if isinstance(entry, str) else next(iter(entry.values())) for entry in guide]
    return [Path(p).name for p in paths if p.startswith("guide/")]


def example_files() -> dict[str, str]:
    """Every example file of the guide, by name (unique across the pages)."""
    files: dict[str, str] = {}
    for page in guide_pages():
        for _, name, text in BLOCK.findall((GUIDE / page).read_text()):
            assert name not in files, f"docs/guide/{page}: the example file {name} is also on another page"
            files[name] = text
    return files


def checks() -> list[Check]:
    return [Check(page, m["command"], bool(m["slow"]), int(m["exit"] or 0), m["expect"])
            for page in guide_pages() for m in TEST.finditer((GUIDE / page).read_text())]


def write_examples(folder: Path) -> None:
    for name, text in example_files().items():
        (folder / name).write_text(text)


def python(script: str, folder: Path) -> tuple[int, str]:
    """``python SCRIPT`` in ``folder``, run in this process (as tests/_cli.py runs the commands: no fresh
    interpreter and imports): its exit status and what it printed."""
    out = io.StringIO()
    before = Path.cwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(str(folder / script), run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except Exception:
        out.write(traceback.format_exc())
        code = 1
    finally:
        os.chdir(before)
    return code, out.getvalue()


def run(check: Check, folder: Path) -> None:
    words = check.command.split()
    if words[0] == "autotune":
        result = autotune(*words[1:], cwd=folder)
        code, output = result.exit_code, result.output
    else:
        assert words[0] == "python", f"docs/guide/{check.page}: a test runs autotune or python, not {words[0]}"
        code, output = python(words[1], folder)
    assert code == check.exit, f"docs/guide/{check.page}: `{check.command}` exited {code}:\n{output[-3000:]}"
    if check.expect is not None:
        assert check.expect in output, f"docs/guide/{check.page}: `{check.command}` did not say {check.expect!r}"


def test_every_guide_page_ends_with_a_checked_example() -> None:
    pages = [p for p in guide_pages() if p != "index.md"]
    assert len(pages) >= 9
    checked = {c.page for c in checks()}
    assert not [p for p in pages if p not in checked], "a guide page without a <!-- test: ... --> example"
    # every example file is named by a check, or used by another example file (a workload by its study file)
    files = example_files()
    used = " ".join(c.command for c in checks()) + " ".join(files.values())
    assert not [name for name in files if name not in used], "an example file no test runs"


@pytest.mark.parametrize("check", [c for c in checks() if not c.slow], ids=lambda c: c.id)
def test_guide_example(check: Check, tmp_path: Path) -> None:
    write_examples(tmp_path)
    run(check, tmp_path)


@pytest.mark.slow
def test_guide_examples_that_train(tmp_path: Path) -> None:
    """The examples that run trials, in the guide's order in one folder: a trial, a study, then its choice."""
    write_examples(tmp_path)
    slow = [c for c in checks() if c.slow]
    assert slow
    for check in slow:
        run(check, tmp_path)
