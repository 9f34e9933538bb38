"""How far apart two readings of one configuration are in this study, and the pruner's margin that follows; and the
paired evidence a pruned or fitted trial carries (:class:`Paired`).

A machine's speed drifts by 10-30% over tens of seconds to minutes (the 2-core VM: benchmarks/machine_noise.py),
so two trials run a minute apart differ by the drift as much as by their configurations. During the search the
tuner keeps the baseline configuration alive as the **anchor** (a paced run, frozen between blocks) and measures
it in one short block after each trial (autotune/tuner/_anchor.py). Each search trial then carries, as user
attributes:

- ``anchor_before``: the anchor's block just before the trial was launched (samples/s): what the pruner pairs the
  trial's windows with;
- ``anchor_noise``: the relative deviation of one anchor block, from its blocks so far (None until known);
- ``anchor_samples_s``: the anchor's speed around the trial (the geometric mean of its blocks before and after);
- ``anchor_ratio``: the trial's throughput (its partial throughput when pruned) over ``anchor_samples_s``.

The baseline trial is the anchor's own configuration: its ratio is 1 by definition, and its ``anchor_samples_s``
its own throughput. The objective value a user reads stays samples/s; the ratio is what the pruner compares and
what the default sampler fits (autotune/samplers/_gp_view.py).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import ClassVar

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


def _positive(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


class Paired:
    """A trial's paired evidence, read from its user attributes (module docstring), and the arithmetic on the
    anchor's blocks. The names are the attributes' keys."""

    BEFORE: ClassVar[str] = "anchor_before"
    NOISE: ClassVar[str] = "anchor_noise"
    SPEED: ClassVar[str] = "anchor_samples_s"
    RATIO: ClassVar[str] = "anchor_ratio"
    #: The study attribute that records the anchor: its configuration key, its blocks (samples/s), its seconds.
    STUDY_ATTR: ClassVar[str] = "autotune_anchor"

    @staticmethod
    def ratio(trial: FrozenTrial) -> float | None:
        """The trial's throughput over the anchor's at the same time (None: the trial was not paired)."""
        return _positive(trial.user_attrs.get(Paired.RATIO))

    @staticmethod
    def speed(trial: FrozenTrial) -> float | None:
        """The anchor's speed while the trial ran (None: the trial was not paired)."""
        return _positive(trial.user_attrs.get(Paired.SPEED))

    @staticmethod
    def before(trial: FrozenTrial) -> float | None:
        """The anchor's block just before the trial was launched (None: not paired)."""
        return _positive(trial.user_attrs.get(Paired.BEFORE))

    @staticmethod
    def noise(trial: FrozenTrial) -> float | None:
        """The relative deviation of one anchor block, as known when the trial was launched (None: not known)."""
        value = trial.user_attrs.get(Paired.NOISE)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 else None

    @staticmethod
    def around(before: float, after: float | None) -> float:
        """The anchor's speed around a trial: the geometric mean of its blocks before and after (before alone when
        there is no block after)."""
        return before if after is None else math.sqrt(before * after)

    @staticmethod
    def block_noise(readings: Sequence[float]) -> float | None:
        """The relative deviation of one block of the anchor: the deviation of the log ratio of consecutive blocks
        over √2 (consecutive blocks are seconds apart, so the drift between them is small beside a block's own
        noise, and what is left of it errs large). None before three blocks."""
        logs = [math.log(v) for v in readings if v > 0]
        if len(logs) < 3:
            return None
        steps = [b - a for a, b in itertools.pairwise(logs)]
        return math.sqrt(statistics.fmean(d * d for d in steps) / 2)
