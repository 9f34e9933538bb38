"""One real study through `autotune run` whose trials hit every fault a training job has, at one and two
ranks: each trial gets its outcome in bounded time, the study goes on and exits 0, the study can be read
back (report, best, status), and nothing it started is left running.

The grid covers ``batch_size`` x ``world_size``; chaos.py turns the batch size into the fault (on the last
rank) and a learning rate above 0.06 (lr_scaling linear: batch 64) into a NaN loss.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.tuner import counts_toward_budget

from .conftest import StudyDir, assert_nothing_left

BUDGET_MB = 1500
HANG_S = 5.0
MAX_S = 30.0

# batch size -> (outcome, state, what the reason says; {r} is the failing rank)
EXPECTED = {
    8: ("complete", TrialState.COMPLETE, "10 steps"),
    10: ("crashed", TrialState.FAIL, "rank {r}: RuntimeError: [/src/chaos.cc:{r}] injected failure on rank {r}"),
    12: ("hang", TrialState.FAIL, ""),
    14: ("oom", TrialState.COMPLETE, f"over the budget of {BUDGET_MB} MB"),
    18: ("crashed", TrialState.FAIL, "rank {r} killed by SIGSEGV"),
    20: ("crashed", TrialState.FAIL, "DataLoader worker"),
    64: ("diverged", TrialState.COMPLETE, "loss became NaN/inf"),
}


@pytest.fixture
def chaos_study(make_study: Callable[..., StudyDir]) -> StudyDir:
    return make_study(
        "chaos",
        # batch 14 grows by 192 MB a step from step 3: 8 steps are 1.5 GB, over the budget whatever the rank's
        # own footprint (PSS counts the torch pages a forked rank shares with its zygote only in part)
        workload_args={"grow_mb": 192},
        search_space={
            "batch_size": {"choices": sorted(EXPECTED)},
            "world_size": {"choices": [1, 2]},
            "lr_scaling": "linear",
            "num_workers": 1,  # every trial has a DataLoader worker, so one can die
        },
        trial={"max_steps": 10, "max_seconds": MAX_S, "hang_seconds": HANG_S},
        # every fault must really run: no configuration is skipped as predicted over the budget
        constraints={"max_memory_mb": BUDGET_MB, "predict_memory": False},
        sampler={"name": "grid", "seed": 0},
        budget={"n_trials": 1 + 2 * len(EXPECTED)},  # the baseline, then every grid point once
    )


@pytest.mark.slow
# it bounds each trial's wall time and calls 5 s without a step a hang: under -n 3 beside two busy workers (CI)
# the growing-memory trial at one rank went 5 s without a step and was read as hung
@pytest.mark.xdist_group("timing")
def test_every_fault_at_one_and_two_ranks_gets_its_outcome_and_the_study_goes_on(
    chaos_study: StudyDir, started: float, tmp_path: Path
) -> None:
    sd = chaos_study
    out = sd.autotune("run", "study.yaml", timeout=420)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert "Warning" not in out.stderr, out.stderr  # a user reads this: no noise from autotune's own processes

    study = sd.load()
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 1 + 2 * len(EXPECTED)
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert sum(counts_toward_budget(t) for t in trials) == len(trials)
    baseline, search = trials[0], trials[1:]
    assert baseline.user_attrs["role"] == "baseline" and baseline.user_attrs["outcome"] == "complete"
    visited = sorted((t.params["batch_size"], t.params["world_size"]) for t in search)
    assert visited == sorted((b, w) for b in EXPECTED for w in (1, 2)), "the grid was not covered once each"

    wrong = []
    for t in search:
        a = t.user_attrs
        bs, ws = t.params["batch_size"], t.params["world_size"]
        outcome, state, reason = EXPECTED[bs]
        reason = reason.format(r=ws - 1)
        if (a["outcome"], t.state) != (outcome, state) or reason not in a["reason"]:
            wrong.append((bs, ws, a["outcome"], t.state.name, a["reason"], a["error_lines"][-3:]))
            continue
        # bounded: a hang is seen hang_seconds after the last step, everything ends before max_seconds
        limit = HANG_S + 8 if outcome == "hang" else MAX_S
        assert a["wall_s"] < limit, (bs, ws, outcome, a["wall_s"])
        if outcome == "hang":
            assert "hang_seconds" in a["reason"] or "collective timed out" in a["reason"], a["reason"]
        if outcome == "oom":
            assert t.constraints["memory"] > 0 and a["peak_memory_mb"] > BUDGET_MB
        if outcome == "diverged":
            assert t.constraints["diverged"] == 1 and a["config"]["lr"] > 0.06
        if outcome == "complete":
            assert t.constraints["memory"] <= 0 and t.constraints["diverged"] == 0
        if bs in (10, 18, 20):
            assert a["error_lines"], (bs, ws, "a crash keeps the failing rank's last lines")
    assert not wrong, "\n".join(map(str, wrong))

    # the stored study still reads back
    report = sd.cli("report", "study.yaml", "-o", str(tmp_path / "chaos.html"))
    assert report.returncode == 0, report.stdout + report.stderr
    assert (tmp_path / "chaos.html").stat().st_size > 10_000
    best = sd.cli("best", "study.yaml", "--format", "json")
    assert best.returncode == 0, best.stdout + best.stderr
    payload = json.loads(best.stdout)
    assert payload["config"]["batch_size"] == 8
    assert study.trials[payload["trial"]].user_attrs["outcome"] == "complete"
    status = sd.cli("status", "study.yaml")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "crashed: 6" in status.stdout and "hang: 2" in status.stdout, status.stdout
    assert "chaos.cc" in status.stdout  # a reason with brackets is shown as text, not read as markup

    assert_nothing_left(sd, started)
