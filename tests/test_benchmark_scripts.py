"""Every script in benchmarks/ answers --help and offers the --quick smoke run that benchmarks/README.md promises
("Append --quick to any of them"). The scripts' own quick runs are tested where they are cheap enough
(test_fidelity_benchmark.py, test_search_benchmark.py, test_peer_benchmark.py, tests/scale/)."""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("[a-z]*.py"))


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
