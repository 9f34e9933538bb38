"""docs/pruning.md stays true: its example runs and every call gives the answer its comment states."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.pruners import DominancePruner

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "pruning.md").read_text()


def test_the_example_gives_the_stated_answers() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", PAGE, re.S)
    namespace: dict[str, object] = {}
    exec(block, namespace)
    claims = re.findall(r"^(pruner\.should_prune\(.*\))  # (True|False)", block, re.M)
    assert len(claims) == 5
    for call, answer in claims:
        assert eval(call, namespace) is (answer == "True"), call
    pruner = namespace["pruner"]
    assert isinstance(pruner, DominancePruner)
    decision = pruner.decide(20, [880.0, 510.0], namespace["finished"])  # type: ignore[arg-type]
    assert f"`{decision.reason}`" in PAGE


def test_the_parameter_table_matches_the_defaults() -> None:
    pruner = DominancePruner(["maximize"])
    for name in ("n_startup_trials", "min_dominating_fraction", "margin"):
        row = re.search(rf"^\| `{name}` \| ([^|]+) \|", PAGE, re.M)
        assert row, name
        assert float(row.group(1)) == getattr(pruner, name), name
