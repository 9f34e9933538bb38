"""benchmarks/landscape_refine.py measures the large landscape's leaders again, each between two baseline runs,
and ``Landscape.refined`` puts those ratios on the grid's scale (drift_decisions.py --truth refined)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))


def _mean_truth() -> Any:
    from _landscapes import Landscape

    return Landscape.load(BENCH / "landscape_large.json").geometric_mean(
        Landscape.load(BENCH / "landscape_large_repeat.json"))


def test_the_refined_truth_keeps_each_leader_at_its_ratio_to_the_baseline_and_the_rest_as_recorded() -> None:
    mean = _mean_truth()
    path = BENCH / "landscape_large_refined.json"
    refined = mean.refined(path)
    data = json.loads(path.read_text())
    base_key = data["settings"]["baseline"]["config_key"]
    leaders = {r["config_key"]: r["ratio"] for r in data["results"]["configs"] if r["ratio"]}
    assert len(leaders) >= 10
    base = refined.value(base_key)
    assert base
    for key, ratio in leaders.items():
        assert refined.value(key) == pytest.approx(ratio * base)
    # One scale for all: the geometric mean of (recorded / ratio) over the leaders and the baseline.
    logs = [math.log(mean.value(k) / r) for k, r in [(base_key, 1.0), *leaders.items()]]
    assert base == pytest.approx(math.exp(sum(logs) / len(logs)))
    others = [k for k in mean.records if k not in leaders and k != base_key]
    assert others and all(refined.records[k] == mean.records[k] for k in others)
    top = max(leaders, key=leaders.__getitem__)
    assert refined.best == pytest.approx(leaders[top] * base)


def test_a_missing_refinement_names_the_script_that_writes_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"run `python benchmarks/landscape_refine\.py` first"):
        _mean_truth().refined(tmp_path / "absent.json")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_quick_refinement_reads_each_leader_between_two_baseline_runs(tmp_path: Path) -> None:
    out = tmp_path / "refined.json"
    done = subprocess.run([sys.executable, str(BENCH / "landscape_refine.py"), "--quick", "--out", str(out)],
                          cwd=BENCH, capture_output=True, text=True, timeout=220, start_new_session=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    configs = record["results"]["configs"]
    assert len(configs) == 2 and record["settings"]["rounds"] == 1
    for config in configs:
        (reading,) = config["readings"]
        assert reading["samples_s"] and reading["baseline_before"] and reading["baseline_after"]
        anchor = math.sqrt(reading["baseline_before"] * reading["baseline_after"])
        assert config["ratio"] == pytest.approx(reading["samples_s"] / anchor)
    # Back to back: one leader's closing baseline run is the other's opening one.
    one, other = (c["readings"][0] for c in configs)
    assert one["baseline_after"] == other["baseline_before"] or other["baseline_after"] == one["baseline_before"]
