"""autotune's multi-objective pruning rule (docs/pruning.md)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from autotune.pruners import DominancePruner, History

# objectives: throughput (maximize), peak memory MB (minimize)
MAX_MIN = ["maximize", "minimize"]


def flat(values: Sequence[float], steps: Sequence[int] = (10, 20, 30)) -> History:
    """A finished trial whose values are the same at every window."""
    return [(s, list(values)) for s in steps]


def pruner(**kwargs: float) -> DominancePruner:
    return DominancePruner(MAX_MIN, **kwargs)  # type: ignore[arg-type]


FAST_SMALL = flat([1000.0, 400.0])


def test_never_prunes_before_n_startup_trials() -> None:
    p = pruner(n_startup_trials=3)
    slow_big = [100.0, 4000.0]
    for n in range(3):
        assert not p.should_prune(20, slow_big, [FAST_SMALL] * n)
    assert p.should_prune(20, slow_big, [FAST_SMALL] * 3)


def test_prunes_a_clearly_dominated_trial() -> None:
    finished = [flat([1000.0, 400.0]), flat([900.0, 500.0]), flat([1100.0, 450.0])]
    decision = pruner().decide(20, [500.0, 800.0], finished)
    assert decision.prune
    assert (decision.comparable, decision.dominated_by, decision.needed) == (3, 3, 2)
    assert decision.reason == "pruned at step 20: dominated by 3 of 3 finished trials (needs 2)"


def test_does_not_prune_a_pareto_trade_off() -> None:
    # far slower than every finished trial, but smaller than all of them
    finished = [flat([1000.0, 400.0]), flat([900.0, 500.0]), flat([1100.0, 450.0])]
    assert not pruner().should_prune(20, [200.0, 390.0], finished)
    assert pruner().decide(20, [200.0, 390.0], finished).dominated_by == 0


def test_does_not_prune_within_the_margin() -> None:
    # every finished trial is 4% faster at the same memory: noise on a shared machine, not a verdict
    finished = [flat([1040.0, 500.0])] * 3
    assert not pruner(margin=0.05).should_prune(20, [1000.0, 500.0], finished)
    # the same 4% is enough without a margin, and 6% is enough with it
    assert pruner(margin=0.0).should_prune(20, [1000.0, 500.0], finished)
    assert pruner(margin=0.05).should_prune(20, [1000.0, 500.0], [flat([1060.0, 500.0])] * 3)


def test_margin_applies_to_minimized_objectives_too() -> None:
    assert not pruner().should_prune(20, [1000.0, 500.0], [flat([1000.0, 490.0])] * 3)  # 2% smaller
    assert pruner().should_prune(20, [1000.0, 500.0], [flat([1000.0, 450.0])] * 3)  # 10% smaller


def test_a_slightly_worse_finished_trial_never_dominates() -> None:
    # much faster but 1% bigger: not at least as good in every objective
    assert not pruner().should_prune(20, [100.0, 500.0], [flat([5000.0, 505.0])] * 3)


@pytest.mark.parametrize(
    ("directions", "running", "better"),
    [
        (["maximize", "maximize"], [100.0, 0.5], [200.0, 0.9]),
        (["minimize", "minimize"], [900.0, 3.0], [400.0, 1.0]),
        (["minimize", "maximize"], [900.0, 100.0], [400.0, 200.0]),
        (["maximize", "minimize", "minimize"], [100.0, 900.0, 3.0], [200.0, 400.0, 1.0]),
    ],
)
def test_directions_mix(directions: list[str], running: list[float], better: list[float]) -> None:
    p = DominancePruner(directions)
    assert p.should_prune(20, running, [flat(better)] * 3)
    # the roles swapped: the formerly pruned values now lead and are kept
    assert not p.should_prune(20, better, [flat(running)] * 3)


def test_direction_flips_the_verdict() -> None:
    finished = [flat([200.0, 200.0])] * 3
    assert DominancePruner(["maximize", "maximize"]).should_prune(20, [100.0, 100.0], finished)
    assert not DominancePruner(["minimize", "minimize"]).should_prune(20, [100.0, 100.0], finished)


def test_compares_at_the_same_step_not_the_final_one() -> None:
    # finished trials: slow at step 10 (warming up), fast by the end
    warming = [(10, [300.0, 500.0]), (20, [900.0, 500.0]), (40, [1000.0, 500.0])]
    finished = [warming] * 3
    # at step 10 the running trial keeps up with them: kept, although their final value is far better
    assert not pruner().should_prune(10, [300.0, 500.0], finished)
    # the same values at step 20 are far behind what they had at step 20: pruned
    assert pruner().should_prune(20, [300.0, 500.0], finished)


def test_uses_the_latest_window_at_or_before_the_step() -> None:
    history = [(10, [1000.0, 500.0]), (30, [100.0, 500.0])]
    p = pruner()
    assert p.should_prune(25, [500.0, 500.0], [history] * 3)  # compares with step 10's values
    assert not p.should_prune(30, [500.0, 500.0], [history] * 3)  # compares with step 30's
    assert not p.should_prune(99, [500.0, 500.0], [history] * 3)  # past the end: the last window
    unsorted = list(reversed(history))
    assert p.should_prune(25, [500.0, 500.0], [unsorted] * 3)


def test_a_finished_trial_with_no_window_yet_does_not_count() -> None:
    late = [(20, [1000.0, 400.0]), (30, [1000.0, 400.0])]  # first window at step 20
    early = flat([1000.0, 400.0], steps=(5, 20))
    p = pruner(n_startup_trials=3)
    decision = p.decide(10, [100.0, 900.0], [late, late, early])
    assert (decision.comparable, decision.prune) == (1, False)
    assert p.should_prune(10, [100.0, 900.0], [early] * 3)
    assert not p.should_prune(10, [100.0, 900.0], [[], [], early])  # nothing reported at all


def test_a_non_comparable_trial_does_not_dilute_the_fraction() -> None:
    # 3 comparable, 2 of them dominate; late trials with no window by step 10 must not raise the bar
    late = [(50, [1.0, 9999.0])]
    finished = [FAST_SMALL, FAST_SMALL, flat([10.0, 9999.0])] + [late] * 5
    decision = pruner(min_dominating_fraction=0.6).decide(10, [500.0, 800.0], finished)
    assert (decision.comparable, decision.dominated_by, decision.needed, decision.prune) == (3, 2, 2, True)


@pytest.mark.parametrize(
    ("fraction", "n", "needed"),
    [(0.5, 3, 2), (0.5, 4, 2), (0.5, 5, 3), (1.0, 4, 4), (0.28, 25, 7), (0.01, 5, 1), (0.7, 10, 7)],
)
def test_needed_is_the_ceiling_of_the_fraction(fraction: float, n: int, needed: int) -> None:
    # 0.28 * 25 is 7.000000000000001 in floating point: the rule still needs 7, not 8
    p = pruner(n_startup_trials=0, min_dominating_fraction=fraction)
    decision = p.decide(20, [1.0, 1.0], [FAST_SMALL] * n)
    assert decision.needed == needed


def test_prunes_exactly_at_the_needed_count() -> None:
    weak = flat([10.0, 9000.0])
    p = pruner(min_dominating_fraction=0.5)
    assert p.should_prune(20, [500.0, 800.0], [FAST_SMALL, FAST_SMALL, weak, weak])  # 2 of 4
    assert not p.should_prune(20, [500.0, 800.0], [FAST_SMALL, weak, weak, weak])  # 1 of 4


def test_zero_startup_trials_and_nothing_finished_never_prunes() -> None:
    assert not pruner(n_startup_trials=0).should_prune(20, [1.0, 1e9], [])


def test_single_objective() -> None:
    p = DominancePruner(["maximize"])
    assert p.should_prune(20, [100.0], [flat([200.0])] * 3)
    assert not p.should_prune(20, [100.0], [flat([103.0])] * 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"directions": ["maximize", "up"]}, r"directions\[1\]: 'up'"),
        ({"directions": []}, "directions is empty"),
        ({"n_startup_trials": -1}, "n_startup_trials"),
        ({"min_dominating_fraction": 0.0}, "min_dominating_fraction"),
        ({"min_dominating_fraction": 1.5}, "min_dominating_fraction"),
        ({"margin": -0.1}, "margin"),
        ({"margin": 1.0}, "margin"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"directions": MAX_MIN, **kwargs}
    with pytest.raises(ValueError, match=match):
        DominancePruner(**args)  # type: ignore[arg-type]


def test_values_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(ValueError, match="values has 1 values but there are 2 objectives"):
        pruner().should_prune(20, [1.0], [FAST_SMALL] * 3)
    with pytest.raises(ValueError, match=r"finished\[0\]"):
        pruner().should_prune(20, [1.0, 1.0], [flat([1.0])])


def test_not_pruned_reason_names_the_start_up_phase() -> None:
    decision = pruner().decide(15, [1.0, 1.0], [FAST_SMALL])
    assert decision.reason == "not pruned at step 15: 1 finished trials to compare with"


# ------------------------------------------------------------------------------------------ properties
DIRS = st.lists(st.sampled_from(["maximize", "minimize"]), min_size=1, max_size=3)
VALUE = st.floats(min_value=1.0, max_value=1e4, allow_nan=False)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[DominancePruner, int, list[float], list[History]]:
    directions = draw(DIRS)
    k = len(directions)
    p = DominancePruner(
        directions,
        n_startup_trials=draw(st.integers(0, 4)),
        min_dominating_fraction=draw(st.floats(0.05, 1.0)),
        margin=draw(st.sampled_from([0.0, 0.05, 0.1, 0.3])),
    )
    window = st.tuples(st.integers(1, 50), st.lists(VALUE, min_size=k, max_size=k))
    finished: list[History] = draw(st.lists(st.lists(window, max_size=4), max_size=8))
    values = draw(st.lists(VALUE, min_size=k, max_size=k))
    return p, draw(st.integers(1, 50)), values, finished


def worsen(p: DominancePruner, values: list[float], factors: list[float]) -> list[float]:
    return [v * f if d == "minimize" else v / f for v, f, d in zip(values, factors, p.directions, strict=True)]


@given(scenarios())
def test_a_trial_dominating_every_finished_trial_is_never_pruned(
    scenario: tuple[DominancePruner, int, list[float], list[History]],
) -> None:
    p, step, _, finished = scenario
    everything = [v for history in finished for _, vs in history for v in vs]
    assume(everything)
    best = [2 * max(everything) if d == "maximize" else min(everything) / 2 for d in p.directions]
    assert not p.should_prune(step, best, finished)


@given(scenarios())
def test_a_trial_beating_every_finished_trial_in_one_objective_is_never_pruned(
    scenario: tuple[DominancePruner, int, list[float], list[History]],
) -> None:
    p, step, values, finished = scenario
    everything = [v for history in finished for _, vs in history for v in vs]
    assume(everything)
    values[0] = max(everything) + 1 if p.directions[0] == "maximize" else min(everything) - 1
    assert not p.should_prune(step, values, finished)


@given(scenarios(), st.data())
def test_pruning_is_monotone(
    scenario: tuple[DominancePruner, int, list[float], list[History]], data: st.DataObject
) -> None:
    p, step, values, finished = scenario
    factors = data.draw(st.lists(st.floats(1.0, 10.0), min_size=len(values), max_size=len(values)))
    before = p.decide(step, values, finished)
    after = p.decide(step, worsen(p, values, factors), finished)
    assert after.dominated_by >= before.dominated_by
    if before.prune:
        assert after.prune


@given(scenarios(), st.randoms())
def test_the_order_of_finished_trials_does_not_matter(
    scenario: tuple[DominancePruner, int, list[float], list[History]], rnd: object
) -> None:
    p, step, values, finished = scenario
    shuffled = list(finished)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert p.decide(step, values, shuffled) == p.decide(step, values, finished)


@given(scenarios(), st.floats(0.0, 0.99))  # exactly at the margin is float rounding's call
def test_finished_trials_within_the_margin_never_prune(
    scenario: tuple[DominancePruner, int, list[float], list[History]], shrink: float
) -> None:
    p, step, values, _ = scenario
    # every finished trial is better than the running one in every objective, but by at most the margin
    gain = [shrink * p.margin * v for v in values]
    near = [v + g if d == "maximize" else v - g for v, g, d in zip(values, gain, p.directions, strict=True)]
    finished = [flat(near, steps=(1,))] * 5
    assert not p.should_prune(step, values, finished)


@given(scenarios())
def test_never_pruned_before_the_start_up_trials(
    scenario: tuple[DominancePruner, int, list[float], list[History]],
) -> None:
    p, step, values, finished = scenario
    decision = p.decide(step, values, finished)
    if decision.comparable < p.n_startup_trials or decision.comparable == 0:
        assert not decision.prune
    if decision.prune:
        assert decision.dominated_by >= max(1, decision.needed)
