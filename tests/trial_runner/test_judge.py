"""The one judgement after each window (autotune.trial_runner.WindowJudge), used by the live monitor and the replays
alike, and the one rule for how many steps a trial runs (TrialLimits.trial_steps), used by the rank and replays."""

from __future__ import annotations

from autotune.spec import TrialLimits
from autotune.trial_result import Outcome, Window
from autotune.trial_runner import WindowJudge


def window(step: int, peak_mb: float) -> Window:
    return Window(step=step, samples=step * 32, elapsed_s=float(step), window_throughput_samples_s=100.0,
                  throughput_samples_s=100.0, loss=1.0, peak_memory_mb=peak_mb, time_to_first_step_s=0.5)


def test_the_pruner_is_asked_first_and_its_step_is_the_reason() -> None:
    asked: list[int] = []

    def prune_at_9(w: Window) -> bool:
        asked.append(w.step)
        return w.step >= 9

    judge = WindowJudge(prune_at_9, max_memory_mb=100.0)
    assert judge(window(6, 50.0)) is None
    # over the budget too, but the pruner's word comes first, as in the monitor
    assert judge(window(9, 500.0)) == (Outcome.PRUNED, "pruned at step 9")
    assert asked == [6, 9]


def test_a_window_over_the_budget_is_oom_where_windows_measure_memory() -> None:
    judge = WindowJudge(None, max_memory_mb=1000.0, memory_name="device memory", memory_detail=" (the largest rank)")
    assert judge(window(6, 999.0)) is None
    assert judge(window(9, 1500.0)) == (
        Outcome.OOM, "device memory 1500 MB (the largest rank) is over the budget of 1000 MB")


def test_host_memory_is_not_judged_from_windows() -> None:
    # a live CPU trial's memory is sampled from its processes by the monitor, not read from its windows
    assert WindowJudge(None, max_memory_mb=1000.0, window_memory=False)(window(9, 1500.0)) is None
    assert WindowJudge(None, max_memory_mb=None)(window(9, 1500.0)) is None


def test_trial_steps_is_max_steps_or_fewer_when_the_samples_are_seen_first() -> None:
    assert TrialLimits(max_steps=40).trial_steps(64) == 40
    assert TrialLimits(max_steps=40, samples=640).trial_steps(64) == 10
    assert TrialLimits(max_steps=40, samples=650).trial_steps(64) == 11  # rounded up: at least the samples
    assert TrialLimits(max_steps=40, samples=64_000).trial_steps(64) == 40  # never past max_steps
    assert TrialLimits(max_steps=40, warmup_steps=5, samples=64).trial_steps(64) == 6  # one step past warm-up
