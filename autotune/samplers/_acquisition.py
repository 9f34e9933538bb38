"""The search of the GP's acquisition function over a space of discrete knobs: every point of a small one, a
batched coordinate search of a larger one (:class:`~autotune.samplers.PartialGPSampler` proposes the best point
either scored that is not yet measured)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["EXHAUSTIVE_POINTS", "all_discrete", "coordinate_search", "evaluate", "grid_of"]

#: A search space of discrete knobs with at most this many points has its acquisition function evaluated at
#: every point instead of Optuna's sampled-and-refined search (2,048 points, then 10 local searches: most of
#: an ask), and the best point not yet measured is proposed. On the quickstart this took the ask from 0.79 s
#: to 0.18 s (benchmarks/README.md, section 1).
EXHAUSTIVE_POINTS = 20_000
_CHUNK = 4096  # points per batched evaluation of the acquisition function
_ALL_VALUES = 16  # a knob of up to this many values has each one tried at every step of a climb (Optuna's limit too)
_CLIMB_STEPS = 100  # a coordinate search's steps at most (each moves every start that can improve by one knob)


def coordinate_search(
    acqf: Any, best_params: np.ndarray | None, rng: np.random.RandomState, *, samples: int, starts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every point the search evaluated and its value, on a space of discrete knobs too large to evaluate
    whole (the 14 CPU knobs: 46 million points).

    The same search as Optuna's for such a space: ``samples`` quasi-random points (its ``n_preliminary_samples``);
    the best of them, the incumbents (``best_params``) and points drawn by Optuna's roulette as ``starts``
    starting points (its ``n_local_search``); each climbed one knob at a time until no single knob's change
    improves it. Optuna climbs each start knob by knob, an evaluation of a few points per call (a line search on
    an integer knob of more than 16 values), about 560 calls an ask at 50 trials of 14 knobs: 0.47 of the ask's
    0.50 s (benchmarks/README.md, section 10). Here every start's one-knob neighbours (:func:`_neighbours`) are
    one batched evaluation per step."""
    space = acqf.search_space
    sampled = space.sample_normalized_params(samples, rng=rng)
    sampled_values = evaluate(acqf, sampled)
    first = _starts(sampled, sampled_values, best_params, starts, rng)
    choices = space.get_choices_of_discrete_params()  # one array per dimension: every dimension is discrete
    points, values = [sampled, first], [sampled_values]
    xs, fs = first.copy(), evaluate(acqf, first)
    values.append(fs)
    fs = fs.copy()
    climbing = np.arange(len(xs))
    for _ in range(_CLIMB_STEPS):
        neighbours = [_neighbours(x, choices) for x in xs[climbing]]
        flat = np.concatenate(neighbours)
        scores = evaluate(acqf, flat)
        points.append(flat)
        values.append(scores)
        moved = []
        per_start = np.split(scores, np.cumsum([len(n) for n in neighbours])[:-1])
        for start, own, own_scores in zip(climbing, neighbours, per_start, strict=True):
            best = int(np.argmax(own_scores))
            if own_scores[best] > fs[start]:
                xs[start], fs[start] = own[best], own_scores[best]
                moved.append(start)
        climbing = np.asarray(moved, dtype=int)
        if not climbing.size:
            break
    return np.concatenate(points), np.concatenate(values)


def evaluate(acqf: Any, points: np.ndarray) -> np.ndarray:
    """The acquisition function at ``points`` (rows), in batches of ``_CHUNK``."""
    return np.concatenate([
        np.asarray(acqf.eval_acqf_no_grad(points[i:i + _CHUNK])).reshape(-1) for i in range(0, len(points), _CHUNK)
    ] or [np.empty(0)])


def _starts(
    sampled: np.ndarray, values: np.ndarray, best_params: np.ndarray | None, count: int, rng: np.random.RandomState
) -> np.ndarray:
    """The coordinate search's starting points, chosen as Optuna's ``optimize_acqf_mixed`` chooses its local
    searches': the best sampled point, the incumbents, and sampled points drawn with probability
    ``exp(value - best)``."""
    incumbents = np.empty((0, sampled.shape[1])) if best_params is None else best_params
    top = int(np.argmax(values))
    weights = np.exp(values - values[top])
    weights[top] = 0.0
    total = weights.sum()
    extra = min(count - len(incumbents) - 1, int(np.count_nonzero(weights > 0)))
    chosen = [top]
    if extra > 0:
        chosen += list(rng.choice(len(sampled), size=extra, replace=False, p=weights / total))
    return np.vstack([sampled[chosen], incumbents])


def _neighbours(x: np.ndarray, choices: list[np.ndarray]) -> np.ndarray:
    """The points one knob away from ``x`` (normalized): every value of a knob of up to ``_ALL_VALUES`` values,
    and of a longer integer range the values 1, 2, 4, 8, ... steps away on either side, which a climb follows
    to the range's best value in a few steps (Optuna searches such a knob by a line search)."""
    rows = []
    for dim, values in enumerate(choices):
        if len(values) > _ALL_VALUES:
            at = int(np.argmin(np.abs(values - x[dim])))
            steps = 2 ** np.arange(int(np.log2(len(values))) + 1)
            values = values[np.unique(np.clip(np.concatenate([at - steps, at + steps]), 0, len(values) - 1))]
        block = np.repeat(x[None, :], len(values), axis=0)
        block[:, dim] = values
        rows.append(block)
    return np.concatenate(rows)


def all_discrete(space: Any) -> bool:
    """Whether every dimension of a GP search space is discrete (choices, integer ranges)."""
    return bool(space.dim) and not len(space.continuous_indices)


def grid_of(space: Any) -> np.ndarray | None:
    """Every point of a GP search space (normalized, one row each) when all its dimensions are discrete and
    there are at most ``EXHAUSTIVE_POINTS``; None otherwise."""
    if not all_discrete(space):
        return None
    choices = space.get_choices_of_discrete_params()  # in dimension order: every dimension is discrete
    if math.prod(len(c) for c in choices) > EXHAUSTIVE_POINTS:
        return None
    return np.stack(np.meshgrid(*choices, indexing="ij"), axis=-1).reshape(-1, space.dim)
