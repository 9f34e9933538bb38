"""How far apart two readings of one configuration are in this study, and the pruner's margin that follows."""

from __future__ import annotations

import math
from collections.abc import Iterable

from optuna.trial import FrozenTrial, TrialState

from autotune.objectives._choice import is_reference
from autotune.objectives._noise import Pooled, pooled_sd

#: The margin before the study has read any configuration twice: whole runs of one configuration minutes apart
#: scatter 10-11% here (benchmarks/machine_noise.py), back-to-back ones 6-7%; 0.1 is what the margin was fixed at.
PRIOR_MARGIN = 0.1
#: Degrees of freedom (repeated readings beyond the first of each configuration) before the study's own noise
#: replaces :data:`PRIOR_MARGIN`.
MIN_NOISE_DF = 2
#: The measured margin stays within these: a study of near-identical repeats must not prune on a 1% dip, and a
#: study whose repeats scattered wildly still prunes what is clearly worse.
MARGIN_RANGE = (0.05, 0.35)


def reading_noise(trials: Iterable[FrozenTrial], metric: str) -> Pooled | None:
    """The relative standard deviation of one whole reading of a configuration, pooled over the configurations
    the study read more than once (:func:`~autotune.objectives.pooled_sd`): complete reference trials and pruned
    trials (their partial value is a reading), by ``config_key``; race entrants are left out (their paced
    readings are another measurement). None before any configuration has two readings.

    Repeats are not random: a second look follows a low reading, a confirmation a high one, so each pair is
    apart by its selection as well as the noise, and this estimate errs large: the margin it sets prunes less.
    """
    groups: dict[str, list[float]] = {}
    for t in trials:
        if t.user_attrs.get("race") or not (t.state == TrialState.PRUNED or is_reference(t)):
            continue
        key, value = t.user_attrs.get("config_key"), t.user_attrs.get(metric)
        if isinstance(key, str) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            groups.setdefault(key, []).append(float(value))
    return pooled_sd(groups.values())


def measured_margin(noise: Pooled | None) -> float:
    """The pruner's margin from the study's reading noise: one standard deviation of the ratio of two
    independent readings (√2·sd), within :data:`MARGIN_RANGE`; :data:`PRIOR_MARGIN` until the noise rests on
    :data:`MIN_NOISE_DF` degrees of freedom. A trial as good as the threshold is then pruned about one time in
    six (a one-sided normal tail at 1 σ), and a second look (autotune.tuner) can bring it back."""
    if noise is None or noise.df < MIN_NOISE_DF:
        return PRIOR_MARGIN
    low, high = MARGIN_RANGE
    return min(high, max(low, math.sqrt(2) * noise.sd))
