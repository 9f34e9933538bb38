"""docs/reliability.md stays true: every test it names exists, and every reliability test is named there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "reliability.md").read_text()
NAMED = set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", DOC))


def test_every_test_the_doc_names_exists() -> None:
    missing = []
    for path, name in sorted(NAMED):
        source = ROOT / path
        if not source.is_file() or (name and f"def {name}(" not in source.read_text()):
            missing.append(f"{path}::{name}")
    assert not missing, missing


def test_every_reliability_test_is_in_the_doc() -> None:
    here = Path(__file__).parent
    tests = {
        (str(p.relative_to(ROOT)), name)
        for p in here.glob("test_*.py") if p.name != Path(__file__).name
        for name in re.findall(r"^def (test_\w+)\(", p.read_text(), re.M)
    }
    assert tests - NAMED == set()
