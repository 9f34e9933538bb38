"""Grid search over a study's space: every value of every searched knob (a log range by its powers of two)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.search_space import SearchSpace


class GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, less the ``study.stop()`` it calls once the grid is covered: that works only
    inside ``Study.optimize`` and raised RuntimeError from the last grid trial's tell, ending the run.
    autotune's loop stops at its budget; trials past the grid repeat a grid point."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def grid_points(space: SearchSpace) -> dict[str, list[Any]]:
    """Every value of every searched knob; a log range contributes its powers of two (and its ends)."""
    grid: dict[str, list[Any]] = {}
    for name, dist in space.distributions().items():
        if isinstance(dist, CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution):
            if dist.log:
                values = {dist.low, dist.high}
                power = 1
                while power <= dist.high:
                    if power >= dist.low:
                        values.add(power)
                    power *= 2
                grid[name] = sorted(values)
            else:
                grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution):  # a float hyperparameter (hp.<name>)
            grid[name] = float_grid(dist)
    return grid


def float_grid(dist: FloatDistribution, points: int = 5) -> list[float]:
    """Grid values of a float range: every step when it has a step, else ``points`` values evenly spaced
    (geometrically on a log range), ends included."""
    if dist.step:
        count = round((dist.high - dist.low) / dist.step) + 1
        return [dist.low + i * dist.step for i in range(count)]
    if dist.low == dist.high:
        return [dist.low]
    if dist.log:
        ratio = (dist.high / dist.low) ** (1 / (points - 1))
        return [dist.low * ratio**i for i in range(points - 1)] + [dist.high]
    width = (dist.high - dist.low) / (points - 1)
    return [dist.low + i * width for i in range(points - 1)] + [dist.high]
