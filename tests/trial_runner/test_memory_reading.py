"""The host-memory reading of a trial's ranks: on a clock every rank shares, so two ranks read at the same
boundaries and neither's window waits for the other's reading."""

from __future__ import annotations

import itertools
import json

from autotune.trial_runner import Outcome
from autotune.trial_runner._training import MEMORY_EVERY_S

from .conftest import RunFaulty


def test_two_ranks_read_their_memory_at_the_same_boundaries_about_once_a_second(run_faulty: RunFaulty) -> None:
    # fault slow: 50 ms a step, windows of 2 steps (~0.1 s): a reading every ~10 windows, not every window
    limits = {"warmup_steps": 2, "max_steps": 60, "report_every": 2, "max_seconds": 60}
    result, trial_dir = run_faulty("slow", world_size=2, limits=limits, at_step=1, step_times=True)
    assert result.outcome is Outcome.COMPLETE, result.reason
    ranks = [json.loads((trial_dir / f"steps.rank{r}.json").read_text()) for r in (0, 1)]
    steps = [r["memory_read_step"] for r in ranks]
    assert steps[0] == steps[1], steps  # the same boundaries on both ranks
    assert steps[0][0] == 2 and steps[0][-1] == 60  # the first boundary and the last
    ends = ranks[0]["step_end"]
    gaps = [ends[b - 1] - ends[a - 1] for a, b in itertools.pairwise(steps[0][:-1])]
    assert gaps and all(gap >= MEMORY_EVERY_S * 0.9 for gap in gaps), gaps  # about once a second, no more
    assert len(steps[0]) < 60 // 2 / 3  # far fewer readings than windows
    assert result.peak_memory_mb is not None and result.peak_memory_mb > 0
