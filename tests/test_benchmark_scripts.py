"""Every script in benchmarks/ answers --help and offers the --quick smoke run that benchmarks/README.md promises
("Every script takes --help, --quick"), and the README says how to run each one and names only files that
exist. The scripts' own quick runs are tested where they are cheap enough (test_fidelity_benchmark.py,
test_search_benchmark.py, test_peer_benchmark.py, tests/scale/)."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("[a-z]*.py"))
README = (BENCHMARKS / "README.md").read_text()


def test_the_scripts_are_found() -> None:
    assert {"overhead", "search_efficiency", "fidelity", "warm_start", "machine_noise"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_answers_help_and_offers_quick(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    module = importlib.import_module(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        module.main()
    assert stop.value.code == 0
    assert "--quick" in out.getvalue(), f"benchmarks/{name}.py has no --quick smoke run"


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_says_how_to_run_every_script() -> None:
    how = _section("How to run")
    assert not [n for n in SCRIPTS if f"benchmarks/{n}.py" not in how], "a script missing from the README's table"
    assert "benchmarks/gpu_check.sh" in how


def test_the_readme_opens_with_the_targets_and_names_only_recorded_files() -> None:
    assert README.split("\n## ", 1)[1].startswith("Targets and latest figures\n")
    targets = _section("Targets and latest figures")
    rows = [line for line in targets.splitlines() if re.match(r"\| (\d+|§) \|", line)]
    assert len(rows) >= 20 and all(line.count(" | ") == 6 for line in rows)  # 7 columns each
    named = set(re.findall(r"\b([a-z][a-z0-9_]*\.json)\b", targets))
    never_run = {"gpu_check.json"}  # its row says so: no GPU machine has run it yet
    assert named and not [n for n in named - never_run if not (BENCHMARKS / n).exists()]
