"""Pareto dominance over plain value vectors, with an optional relative margin."""

from __future__ import annotations

from collections.abc import Sequence

DIRECTIONS = ("maximize", "minimize")


def check_directions(directions: Sequence[str]) -> tuple[bool, ...]:
    """``directions`` as one flag per objective (True: maximize); ValueError for anything else."""
    if not directions:
        raise ValueError("directions is empty; give one of 'maximize' or 'minimize' per objective")
    flags = []
    for i, direction in enumerate(directions):
        if direction not in DIRECTIONS:
            raise ValueError(f"directions[{i}]: {direction!r} is not valid; use 'maximize' or 'minimize'")
        flags.append(direction == "maximize")
    return tuple(flags)


def check_length(values: Sequence[float], n: int, what: str) -> None:
    if len(values) != n:
        raise ValueError(f"{what} has {len(values)} values but there are {n} objectives; give one per objective")


def dominates(other: Sequence[float], values: Sequence[float], maximize: Sequence[bool], margin: float = 0.0) -> bool:
    """Whether ``other`` dominates ``values``, with a relative ``margin``.

    ``other`` must be at least as good in every objective and, in at least one, better by more than
    ``margin * |value|`` (``margin=0``: strictly better, plain Pareto dominance). NaN is never at least
    as good as anything, so a point with NaN neither dominates nor is dominated.
    """
    clearly_better = False
    for o, v, up in zip(other, values, maximize, strict=True):
        gain = o - v if up else v - o
        if not gain >= 0:  # also False for NaN
            return False
        if gain > margin * abs(v):
            clearly_better = True
    return clearly_better


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices (ascending) of the points no other point dominates; equal points are all kept."""
    maximize = check_directions(directions)
    for i, point in enumerate(points):
        check_length(point, len(maximize), f"points[{i}]")
    return [
        i
        for i, point in enumerate(points)
        if not any(dominates(other, point, maximize) for j, other in enumerate(points) if j != i)
    ]
