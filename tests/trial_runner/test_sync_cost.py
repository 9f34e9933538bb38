"""A two-rank DDP trial whose step is nearly all gradient synchronisation reports that synchronisation as
exposed, at the cost it adds to the step: windows of DDP's synchronising steps alternate with windows under
``no_sync()``, and a synchronising window's known cost is its steps' period less its neighbours'; the windows
without an all-reduce report none; and bucket_cap_mb changes how many all-reduces a step makes
(benchmarks/sync_cost.py checks the 20% target, on a quiet machine)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_result import TrialResult
from autotune.trial_runner import Outcome, TrialPlan, WarmLauncher, run_trial
from tests.trial_runner.sync_workload import buckets, paired_costs, readings, sync_steps

HERE = Path(__file__).parent
PARAMS, PARAM_MB = 8, 4.0  # 32 MB of fp32 gradients a step, ~3 ms of computation
WARMUP, BLOCK, STEPS = 8, 4, 48  # after the warm-up, windows of 4 steps: synchronising, not, ...


def _trial(launcher: WarmLauncher, trial_dir: Path, cap: int) -> tuple[TrialResult, Path]:
    reference = trial_dir.parent / f"{trial_dir.name}.reference.jsonl"
    config = TrialConfig.create(base_lr=1e-4, base_batch_size=1, batch_size=1, world_size=2, bucket_cap_mb=cap,
                                gradient_as_bucket_view=True)
    limits = TrialLimits(warmup="fixed", warmup_steps=WARMUP, max_steps=STEPS, report_every=BLOCK,
                         max_seconds=180, hang_seconds=30)
    plan = TrialPlan(config=config, entrypoint="sync_workload.py:build", base_dir=str(HERE), limits=limits,
                     args={"params": PARAMS, "param_mb": PARAM_MB, "reference": str(reference), "warmup": WARMUP,
                           "block": BLOCK}, trace=True)
    result = run_trial(plan, trial_dir, launcher)
    assert result.outcome is Outcome.COMPLETE, result.reason
    return result, reference


@pytest.mark.slow
@pytest.mark.xdist_group("timing")  # a difference of two step times: beside a suite's load it is noise (median 5.0)
def test_exposed_sync_is_what_synchronising_adds_to_a_step_and_the_bucket_cap_sets_the_all_reduces(
    tmp_path: Path, warm_launcher: WarmLauncher
) -> None:
    for cap in (25, 1):
        result, reference = _trial(warm_launcher, tmp_path / f"cap{cap}", cap)
        pairs = paired_costs(result.windows, reference)
        assert len(pairs) >= 3, pairs  # 10 measured windows: 4 synchronising ones between two that are not
        # The target, the median within 20% of 1, is benchmarks/sync_cost.py's to check on a quiet machine. The
        # known cost is a difference of two step times, which load scatters (at load 6 the no_sync windows'
        # computation ran slower than the synchronising windows', whose ranks pause in the all-reduce: medians
        # up to 2.1), so this test's bound is what load leaves: the anatomy measures the all-reduce, neither
        # nothing nor the whole step (3-5x the known cost at load 6: the optimizer step and zeroing are much of it).
        # (2.7 once in the timing block beside niced tests: the backward's wait for a core counts, up to gloo's CPU)
        assert 0.5 <= statistics.median(e / k if k > 0 else 9.0 for e, k in pairs) <= 4.0, (cap, pairs)
        periods = readings(reference)
        for window in result.windows:
            a = window.step_anatomy_mean
            assert a is not None and a.sync_exposed_s is not None
            synced = {r["sync"] for r in periods if window.step - BLOCK < r["step"] <= window.step}
            if synced == {False}:  # no all-reduce, no exposed sync
                assert a.sync_exposed_s == 0.0, (window.step, a)
            elif synced == {True}:  # the all-reduce is much of the step
                assert a.sync_exposed_s > 0.15 * a.step_s, (window.step, a)
        # the bucket cap sets the layout (DDP's own, after its rebuild) and the all-reduces a synchronising step
        # (the first step's single bucket, DDP's layout before its rebuild, then the layout's)
        layout = buckets(PARAMS, PARAM_MB, cap)
        assert periods[-1]["buckets"] == layout
        applied = json.loads((tmp_path / f"cap{cap}" / "applied.json").read_text())
        calls = 1 + (sync_steps(STEPS, WARMUP, BLOCK) - 1) * layout
        assert applied["allreduce_calls_total"] == calls, (cap, applied["allreduce_calls_total"], calls)
    assert buckets(PARAMS, PARAM_MB, 25) == 2 and buckets(PARAMS, PARAM_MB, 1) == 8
