"""benchmarks/search_efficiency.py --judge-on: a replayed study's choice is read on the other recording of
the grid (an independent reading of every configuration), and --margins replays the default study with other
pruner margins beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))


def _run(*args: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(BENCH / "search_efficiency.py"), *args]
    return subprocess.run(cmd, cwd=BENCH, capture_output=True, text=True, timeout=timeout, start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_choice_is_judged_on_the_other_recording(tmp_path: Path) -> None:
    from _landscapes import Landscape

    out = tmp_path / "search.json"
    done = _run("--landscape", "landscape.json", "--judge-on", "landscape_repeat.json", "--seeds", "1",
                "--max-trials", "6", "--budget", "5", "--strategies", "autotune", "--margins", "0.3",
                "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["settings"]["judge_on"].endswith("landscape_repeat.json")
    judged = record["results"]["judged_on_other"]["strategies"]
    assert set(judged) == {"autotune", "autotune-no-pruning", "autotune-margin-0.3"}
    assert [judged[s]["margin"] for s in ("autotune", "autotune-no-pruning", "autotune-margin-0.3")] == [
        "measured", None, 0.3]
    assert judged["autotune-no-pruning"]["as_good_as_unpruned_seeds"] == 1  # itself (one seed proves the judging)

    # Recompute each choice: the complete trial this recording read best, worth what the other one read.
    first = Landscape.load(BENCH / "landscape.json").by_config()
    other = Landscape.load(BENCH / "landscape_repeat.json")
    again = other.by_config()
    for strategy, seeds in record["results"]["trials"].items():
        if strategy not in judged:
            continue
        for seed in seeds:
            complete = [k for k, s in zip(seed["keys"][:5], seed["states"][:5], strict=True) if s == "complete"]
            pick = max(complete, key=lambda k: first[k]["throughput_samples_s"])
            expected = again[pick]["throughput_samples_s"] / other.best if again[pick]["outcome"] == "complete" else 0
            assert judged[strategy]["pick_on_other"][seed["seed"]] == pytest.approx(expected)
    assert "measured on the other recording" in done.stdout


def test_a_recording_of_another_grid_is_refused_before_any_replay() -> None:
    done = _run("--landscape", "landscape.json", "--judge-on", "landscape_large.json", "--seeds", "1",
                "--out", "/nonexistent/never-written.json", timeout=60)
    assert done.returncode != 0
    assert "not a recording of landscape.json's grid" in done.stderr
    assert "Replayed studies" not in done.stdout
