"""The host-memory reading of a trial's ranks: on a thread of each rank, about once a second, off the
training loop (a reading in the loop cost the window, or gave DataLoader workers free time)."""

from __future__ import annotations

import json

from autotune.trial_runner import Outcome
from autotune.trial_runner._training import MEMORY_EVERY_S

from .conftest import RunFaulty


def test_each_rank_reads_its_memory_about_once_a_second_off_the_training_loop(run_faulty: RunFaulty) -> None:
    # fault slow: 50 ms a step (80 steps: ~4 s), windows of 5 steps: a reading lands on a boundary 1 time in 5
    limits = {"warmup_steps": 2, "max_steps": 80, "report_every": 5, "max_seconds": 60}
    result, trial_dir = run_faulty("slow", world_size=2, limits=limits, at_step=1, step_times=True)
    assert result.outcome is Outcome.COMPLETE, result.reason
    for rank in (0, 1):
        data = json.loads((trial_dir / f"steps.rank{rank}.json").read_text())
        steps = [int(s) for s in data["memory_read_step"]]
        span = data["step_end"][-1] - data["step_end"][0]
        # about once a second on the thread, and once more at the last boundary (the final figure)
        assert span / MEMORY_EVERY_S - 1 <= len(steps) - 1 <= span / MEMORY_EVERY_S + 2, (steps, span)
        assert steps[-1] == 80
        assert any((s - 2) % 5 for s in steps[:-1]), steps  # inside windows, not at the loop's boundaries
    assert result.peak_memory_mb is not None and result.peak_memory_mb > 0
    windows = [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(w["peak_memory_mb"] > 0 for w in windows)
