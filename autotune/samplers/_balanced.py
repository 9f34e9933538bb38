"""The GP's start-up trials spread over the space: each knob's values taken in turn, in a seeded order, rather than
drawn at random."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial

from autotune.compat import optuna_private
from autotune.samplers._gp_view import queued

__all__ = ["BalancedStart"]

#: A knob of at most this many values has them taken in turn; a longer range is cut into ``_STRATA`` strata.
_MAX_VALUES = 64
_STRATA = 4


class BalancedStart(BaseSampler):
    """Independent draws that cover each knob evenly: the k-th trial the sampler proposes (trials queued with
    their parameters fixed, such as the baseline, do not count) takes, for a knob of m values, the value at
    position k mod m of a seeded permutation of them, a new permutation for each block of m trials; a knob of
    more values (a long integer or a continuous range) takes a uniform draw from the stratum at that position of
    a permutation of ``_STRATA`` equal strata of its (log) range. Each knob's permutations are its own, so the
    trials form a Latin hypercube over the knobs: four start-up trials put `amp: [off, bf16]` twice each and
    spread a batch size's five choices over four of them.

    Random draws do not: four of them are all bf16 one time in eight, and the GP that starts from them learns
    nothing about fp32. On the large landscape under drift (benchmarks/drift_decisions.py --landscape large, on a
    CPU where bf16 is 0.1-0.25x fp32) 5 and 8 studies of 20 spent five or more of their 18 trials on bf16 after
    random start-ups, 1 and 1 after this one (benchmarks/README.md, section 11)."""

    def __init__(self, seed: int | None = None) -> None:
        self._seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self._index: dict[int, int] = {}  # trial number -> its position among the proposed trials

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        k = self._position(study, trial)
        values = _values(param_distribution)
        if values is not None:
            block, at = divmod(k, len(values))
            return values[self._order(param_name, block, len(values))[at]]
        block, at = divmod(k, _STRATA)
        rng = random.Random(f"{self._seed}:{param_name}:{block}:{at}:draw")
        u = (self._order(param_name, block, _STRATA)[at] + rng.random()) / _STRATA
        return _at(param_distribution, u)

    def _order(self, name: str, block: int, n: int) -> list[int]:
        order = list(range(n))
        random.Random(f"{self._seed}:{name}:{block}").shuffle(order)
        return order

    def _position(self, study: optuna.Study, trial: FrozenTrial) -> int:
        """How many trials numbered before ``trial`` the sampler proposed (the study's other trials: several
        workers share one sequence)."""
        if trial.number not in self._index:
            before = [t for t in optuna_private.trials_of(study) if t.number < trial.number]
            self._index[trial.number] = sum(not queued(t) for t in before)
        return self._index[trial.number]


def _values(dist: BaseDistribution) -> list[Any] | None:
    """Every value of a knob of at most ``_MAX_VALUES`` values, in order; None for a longer or continuous range."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution) and not dist.log and (dist.high - dist.low) // dist.step < _MAX_VALUES:
        return list(range(dist.low, dist.high + 1, dist.step))
    if isinstance(dist, IntDistribution) and dist.log and dist.high - dist.low < _MAX_VALUES:
        return list(range(dist.low, dist.high + 1))
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        count = round((dist.high - dist.low) / dist.step) + 1
        if count <= _MAX_VALUES:
            return [dist.low + i * dist.step for i in range(count)]
    return None


def _at(dist: BaseDistribution, u: float) -> Any:
    """The value at quantile ``u`` in [0, 1) of a range (of its logarithm for a log range)."""
    assert isinstance(dist, IntDistribution | FloatDistribution)
    low, high = float(dist.low), float(dist.high)
    value = math.exp(math.log(low) + u * math.log(high / low)) if dist.log else low + u * (high - low)
    if isinstance(dist, IntDistribution):
        value = low + round((value - low) / dist.step) * dist.step
        return int(min(high, max(low, value)))
    if dist.step is not None:
        value = low + round((value - low) / dist.step) * dist.step
    return float(min(high, max(low, value)))
