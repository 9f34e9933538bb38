"""The records a rank writes and the monitor reads: one definition each, a round trip, a loud error on a bad one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.spec import TrialLimits
from autotune.trial_result import RecordError, Window
from autotune.trial_runner import MetricsTail, Monitor, Outcome
from autotune.trial_runner._exit import classify_exit
from autotune.trial_runner._records import (
    AppliedRecord,
    DoneRecord,
    LoaderFacts,
    RankErrorRecord,
    RankFacts,
    ThreadsSetting,
    WarmupFacts,
    parse_window_line,
    read_record,
    window_line,
    write_record,
)
from tests.trial_runner.test_monitor import Clock, ScriptedRun

WINDOW = Window(step=8, samples=64, elapsed_s=1.5, window_throughput_samples_s=120.0, throughput_samples_s=110.0,
                loss=0.25, peak_memory_mb=300.0, time_to_first_step_s=0.4, warmup_steps=4, settled=True)
DONE = DoneRecord(outcome="complete", reason="10 steps", steps=10, samples=80, training_s=0.5, loss=0.2,
                  peak_memory_mb=300.0, time_to_first_step_s=0.4, compile_s=None, threads_per_rank=1,
                  training_span_s=1.0, eval_loss=0.3)
FACTS = RankFacts(rank=0, torch_threads=1, blas_threads=None, thread_env={"OMP_NUM_THREADS": "1"}, env={},
                  env_at_start={}, thread_env_at_start={"OMP_NUM_THREADS": None}, compiled=False, dtensor_params=0,
                  local_param_numel=10, param_numel=10, ddp=True)
APPLIED = AppliedRecord(
    torch_threads=1, threads_per_rank=ThreadsSetting(setting="auto", resolved=1), ranks=[FACTS],
    optimizer_lr=[0.1], grad_scaler=False, ddp_bucket_bytes_cap=26214400,
    dataloader=LoaderFacts(batch_size=8, num_workers=0, prefetch_factor=None, pin_memory=False,
                           persistent_workers=False, sampler="DistributedSampler"),
    autocast_enabled=False, autocast_dtype=None,
    warmup=WarmupFacts(mode="steady", steps_used=8, settled=True, probe_steps=4, cap_steps=20, tolerance=0.1,
                       probe_throughputs=[100.0, 101.0]),
)
ERROR = RankErrorRecord(rank=1, kind="error", type="ValueError", message="boom", lines=["a", "b"], time=1.0,
                        where="train.py:3 in loss")


@pytest.mark.parametrize("record", [DONE, APPLIED, ERROR], ids=lambda r: type(r).__name__)
def test_each_record_reads_back_as_written(tmp_path: Path, record: object) -> None:
    write_record(tmp_path / "r.json", record)
    assert read_record(tmp_path / "r.json", type(record)) == record
    assert read_record(tmp_path / "absent.json", type(record)) is None


def test_a_window_line_reads_back_as_written() -> None:
    assert parse_window_line(window_line(WINDOW).encode(), "metrics.jsonl line 1") == WINDOW


def test_applied_keeps_a_key_only_once_it_is_known() -> None:
    data = APPLIED.to_json()
    assert "checkpoint_wrappers" not in data and "compile_s" not in data  # never set
    assert data["autocast_dtype"] is None and data["autocast_enabled"] is False  # looked at: autocast off
    assert "autocast_dtype" not in AppliedRecord(torch_threads=1).to_json()  # not looked at yet


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"loss": None}, "metrics.jsonl line 2: loss: Input should be a valid number"),
        ({"stepz": 3}, "metrics.jsonl line 2: stepz: Unexpected keyword argument"),
        ({"step": "eight"}, "metrics.jsonl line 2: step: Input should be a valid integer"),
    ],
)
def test_a_window_line_that_does_not_parse_is_an_error_naming_line_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    bad = {**WINDOW.to_json(), **change}
    (tmp_path / "metrics.jsonl").write_text(window_line(WINDOW) + json.dumps(bad) + "\n")
    with pytest.raises(RecordError) as e:
        MetricsTail(tmp_path / "metrics.jsonl").read()
    assert str(e.value).startswith(message)


def test_a_missing_key_is_an_error_too(tmp_path: Path) -> None:
    data = WINDOW.to_json()
    del data["peak_memory_mb"]
    with pytest.raises(RecordError, match="line 1: peak_memory_mb: Field required"):
        parse_window_line(json.dumps(data).encode(), "line 1")


def test_the_monitor_ends_a_run_whose_window_does_not_parse_as_crashed(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(window_line(WINDOW) + '{"step": 12}\n')
    clock = Clock()
    limits = TrialLimits(warmup_steps=1, max_steps=10, max_seconds=30, hang_seconds=5)
    verdict = Monitor(ScriptedRun(), tmp_path, limits, clock=clock, sleep=clock.sleep, poll_s=0.5).watch()
    assert verdict.outcome is Outcome.CRASHED
    assert verdict.reason.startswith("rank 0's window record does not parse: metrics.jsonl line 2: ")
    assert verdict.windows == []  # the good line came in the same read; the run is judged crashed


def test_a_done_record_that_does_not_parse_makes_the_trial_crashed(tmp_path: Path) -> None:
    data = DONE.__dict__ | {"steps": "many"}
    (tmp_path / "done.json").write_text(json.dumps(data))
    outcome, reason, _, done = classify_exit(tmp_path, ScriptedRun())
    assert outcome is Outcome.CRASHED and done is None
    assert reason.startswith("a rank's record does not parse: done.json: steps: Input should be a valid integer")
    write_record(tmp_path / "done.json", DONE)
    assert classify_exit(tmp_path, ScriptedRun())[::3] == (Outcome.COMPLETE, DONE)


def test_an_error_record_that_does_not_parse_makes_the_trial_crashed(tmp_path: Path) -> None:
    (tmp_path / "errors").mkdir()
    (tmp_path / "errors" / "rank1.json").write_text(json.dumps(ERROR.__dict__ | {"rank": None}))
    outcome, reason, _, _ = classify_exit(tmp_path, ScriptedRun())
    assert outcome is Outcome.CRASHED
    assert reason.startswith("a rank's record does not parse: rank1.json: rank: Input should be a valid integer")


def test_an_applied_record_that_does_not_parse_makes_the_trial_crashed(tmp_path: Path) -> None:
    from autotune.search_space import TrialConfig
    from autotune.trial_result import TrialResult
    from autotune.trial_runner import TrialPlan
    from autotune.trial_runner._monitor import _knob_facts

    config = TrialConfig.create(base_lr=0.1, base_batch_size=8, batch_size=8)
    plan = TrialPlan(config=config, entrypoint="w.py:build", base_dir=".")
    write_record(tmp_path / "applied.json", APPLIED)
    result = TrialResult(outcome=Outcome.COMPLETE)
    _knob_facts(result, plan, tmp_path)
    assert result.outcome is Outcome.COMPLETE and result.threads_per_rank == 1
    (tmp_path / "applied.json").write_text(json.dumps({"torch_threads": 1, "compile_seconds": 2.0}))
    _knob_facts(result, plan, tmp_path)
    assert result.outcome is Outcome.CRASHED
    assert result.reason == ("rank 0's applied record does not parse: applied.json: compile_seconds: Unexpected "
                             "keyword argument (a AppliedRecord record)")
