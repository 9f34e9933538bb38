"""Pareto dominance and the Pareto front over plain value vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.objectives import dominates, pareto_front

MAX_MIN = ["maximize", "minimize"]


def test_front_of_throughput_and_memory() -> None:
    points = [
        [100.0, 500.0],  # 0: front (fast, big)
        [80.0, 300.0],  # 1: front (trade-off)
        [90.0, 600.0],  # 2: dominated by 0
        [60.0, 300.0],  # 3: dominated by 1
        [50.0, 100.0],  # 4: front (smallest)
    ]
    assert pareto_front(points, MAX_MIN) == [0, 1, 4]


def test_directions_decide_the_front() -> None:
    points = [[1.0, 1.0], [2.0, 2.0]]
    assert pareto_front(points, ["maximize", "maximize"]) == [1]
    assert pareto_front(points, ["minimize", "minimize"]) == [0]
    assert pareto_front(points, ["maximize", "minimize"]) == [0, 1]


def test_equal_points_are_all_kept() -> None:
    assert pareto_front([[1.0, 2.0], [1.0, 2.0], [0.0, 2.0]], MAX_MIN) == [0, 1]


def test_single_objective_front_is_the_best_points() -> None:
    assert pareto_front([[3.0], [5.0], [5.0], [1.0]], ["maximize"]) == [1, 2]
    assert pareto_front([], ["maximize"]) == []


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="'up'"):
        pareto_front([[1.0]], ["up"])
    with pytest.raises(ValueError, match=r"points\[1\] has 1 values but there are 2 objectives"):
        pareto_front([[1.0, 2.0], [1.0]], MAX_MIN)


def test_margin_needs_a_clear_gain_relative_to_the_dominated_value() -> None:
    assert dominates([106.0, 100.0], [100.0, 100.0], [True, False], margin=0.05)
    assert not dominates([104.0, 100.0], [100.0, 100.0], [True, False], margin=0.05)
    assert dominates([100.0, 94.0], [100.0, 100.0], [True, False], margin=0.05)
    assert not dominates([100.0, 96.0], [100.0, 100.0], [True, False], margin=0.05)
    # a clear gain in one objective does not excuse a loss in another
    assert not dominates([200.0, 100.5], [100.0, 100.0], [True, False], margin=0.05)


def test_equal_points_do_not_dominate_each_other() -> None:
    assert not dominates([1.0, 2.0], [1.0, 2.0], [True, False])


points_st = st.lists(
    st.lists(st.integers(-5, 5).map(float), min_size=2, max_size=2),
    min_size=0,
    max_size=12,
)


@given(points_st, st.lists(st.sampled_from(["maximize", "minimize"]), min_size=2, max_size=2))
def test_front_is_exactly_the_undominated_points(points: list[list[float]], directions: list[str]) -> None:
    front = pareto_front(points, directions)
    flags = [d == "maximize" for d in directions]
    assert front == sorted(front)
    for i, p in enumerate(points):
        dominated = any(dominates(q, p, flags) for q in points)
        assert (i in front) == (not dominated)
    # every point off the front is dominated by a point on it
    for i, p in enumerate(points):
        if i not in front:
            assert any(dominates(points[j], p, flags) for j in front)
    if points:
        assert front


@given(points_st)
def test_front_of_negated_maximize_is_front_of_minimize(points: list[list[float]]) -> None:
    negated = [[-x for x in p] for p in points]
    assert pareto_front(points, ["maximize", "maximize"]) == pareto_front(negated, ["minimize", "minimize"])
