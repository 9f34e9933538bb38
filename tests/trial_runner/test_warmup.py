"""The steady-state warm-up: when probe windows count as settled, where the measured part starts, the cap."""

from __future__ import annotations

import json

import pytest

from autotune.spec import TrialLimits
from autotune.trial_runner import Outcome
from autotune.trial_runner._warmup import Warmup, is_settled

from .conftest import RunFaulty


def test_settled_once_a_probe_window_is_not_faster_than_the_one_before_by_more_than_the_tolerance() -> None:
    assert not is_settled([100.0], 0.1)  # one window: nothing to compare
    assert is_settled([100.0, 110.0], 0.1)  # 10% faster: within the tolerance
    assert not is_settled([100.0, 111.0], 0.1)  # still rising
    assert is_settled([100.0, 60.0], 0.1)  # slower: scatter, not a slow start (the window interval keeps it)
    # a ramp of 5% a window settles at 8% but never at 4%
    assert is_settled([100.0, 105.0], 0.08) and not is_settled([100.0, 105.0], 0.04)
    # only the newest two count: a slow start is forgotten once the throughput stops rising
    assert is_settled([40.0, 70.0, 99.0, 100.0], 0.05)
    assert not is_settled([0.0, 0.0], 0.1)


def _run(limits: TrialLimits, throughputs: list[float], max_steps: int | None = None) -> Warmup:
    """Drive a Warmup as the rank loop does, offering ``throughputs`` one probe window at a time."""
    warmup = Warmup.for_limits(limits, max_steps or limits.max_steps)
    windows = iter(throughputs)
    for step in range(1, (max_steps or limits.max_steps) + 1):
        if not warmup.warming:
            break
        if warmup.boundary(step):
            warmup.offer(step, None if step == warmup.min_steps else next(windows))
    return warmup


def test_steady_warmup_starts_measuring_where_the_throughput_stopped_rising() -> None:
    limits = TrialLimits(warmup_steps=3, max_steps=200, report_every=5)
    # probes end at steps 8, 13, 18, 23: each faster than the last by more than 10% until the fourth
    warmup = _run(limits, [50.0, 80.0, 97.0, 100.0, 999.0])
    assert warmup.settled and warmup.measure_from == 23
    assert warmup.throughputs == [50.0, 80.0, 97.0, 100.0]
    record = warmup.record()
    assert record.steps_used == 23 and record.settled is True and record.mode == "steady"
    # scatter both ways after the first window is no slow start: measured from the second probe on
    assert _run(limits, [100.0, 70.0, 130.0]).measure_from == 13


def test_steady_warmup_that_never_settles_stops_at_the_cap_unsettled() -> None:
    limits = TrialLimits(warmup_steps=2, max_steps=40, report_every=4)
    # the cap is half the trial (20): probes end at 6, 10, 14, 18; the next (22) would pass it
    warmup = _run(limits, [10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    assert not warmup.settled and warmup.measure_from == 18
    limits = TrialLimits(warmup_steps=2, max_steps=40, report_every=4, warmup_max_steps=10)
    assert _run(limits, [10.0, 20.0, 30.0, 40.0]).measure_from == 10


def test_the_cap_leaves_a_window_to_measure() -> None:
    # 12 steps in windows of 5: half would be 6, but the cap is 12 - 5 = 7 at most anyway; here 6
    assert TrialLimits(warmup_steps=1, max_steps=12, report_every=5).warmup_cap() == 6
    assert TrialLimits(warmup_steps=1, max_steps=12, report_every=8).warmup_cap() == 4
    # never below the fewest warm-up steps
    assert TrialLimits(warmup_steps=5, max_steps=12, report_every=8).warmup_cap() == 5


def test_fixed_warmup_measures_from_warmup_steps_without_probes() -> None:
    warmup = Warmup.for_limits(TrialLimits(warmup="fixed", warmup_steps=4, max_steps=20), 20)
    assert not warmup.warming and warmup.measure_from == 4 and warmup.settled
    assert not any(warmup.boundary(step) for step in range(1, 21))


def test_a_steady_warmup_with_no_room_for_probes_measures_from_warmup_steps() -> None:
    # trial.samples can shorten a trial to a few steps: the cap is then the fewest steps, nothing to probe
    warmup = Warmup.for_limits(TrialLimits(warmup_steps=3, max_steps=40, samples=128), 4)
    assert warmup.measure_from == 3 and not warmup.settled


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"warmup": "slow"}, "warmup"),
        ({"warmup": "fixed", "warmup_max_steps": 10}, "warmup_max_steps only applies to warmup: steady"),
        ({"warmup_steps": 5, "warmup_max_steps": 4}, "warmup_max_steps (4) must be at least warmup_steps (5)"),
        ({"warmup_max_steps": 40}, "below max_steps (40)"),
        ({"settle_tolerance": 0}, "settle_tolerance"),
        ({"settle_tolerance": 1.5}, "settle_tolerance"),
    ],
)
def test_bad_warmup_fields_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrialLimits(**fields)


@pytest.mark.parametrize(("fault", "settles"), [("slow", True), ("ramp", False)])
def test_a_real_two_rank_trial_measures_from_where_its_throughput_stopped_rising(
    run_faulty: RunFaulty, fault: str, settles: bool
) -> None:
    # slow: 50 ms a step, flat; ramp: every step sleeps 20% less than the one before (0.4 s at first), so
    # each 3-step window is ~1.95x faster than the last. Probe windows are steps 3-5, 6-8 and 9-11 (the cap,
    # 12, leaves no room for a fourth); the last sleeps 0.13 s, so only a stall of over 0.1 s in it could
    # flip the ramp to settled. (With 2-step windows the last slept 0.06 s at ~1.56x, and a 26 ms stall of
    # a loaded machine in it flipped it once: probes 337, 522, 787, 1191, 1309.)
    limits = {"warmup": "steady", "warmup_steps": 2, "max_steps": 24, "report_every": 3,
              "settle_tolerance": 0.9 if settles else 0.1}
    result, trial_dir = run_faulty(fault, world_size=2, limits=limits, at_step=1)
    assert result.outcome is Outcome.COMPLETE, result.reason
    record = json.loads((trial_dir / "applied.json").read_text())["warmup"]
    probes = record["probe_throughputs"]
    assert record["mode"] == "steady" and record["cap_steps"] == 12
    # both ranks decided alike (one metrics file, no hang), and as the rule says on the reduced probe times
    assert result.settled is settles is is_settled(probes, limits["settle_tolerance"]), probes
    used = result.warmup_steps_used
    assert used == record["steps_used"] == 2 + 3 * len(probes)
    assert used == (8 if settles else 11)  # two probes compared at once; still rising: the last probe in the cap
    lines = [json.loads(line) for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]
    assert [w["step"] for w in lines] == [*range(used + 3, 25, 3), 24]  # the last window the trial's tail
    assert all(w["warmup_steps"] == used and w["settled"] is settles for w in lines)
    assert result.throughput_samples_s == pytest.approx((24 - used) * 64 / result.training_s, rel=1e-6)
    assert result.throughput_spread is not None and result.throughput_spread >= 0
