"""Noise in measurements: a configuration's interval, whether two configurations separate, the speed-up's
interval, the first trial that read far below its re-runs, and the trials measured on a busy machine.

A configuration measured n times has the ~95% interval ``median ± t(df) · s / √n``, s the relative standard
deviation of a measurement and df its degrees of freedom. s is pooled over every configuration of the study
measured more than once (the standard deviation of log values about each configuration's own mean, pooled
as in an analysis of variance: Σ(n_i - 1) degrees of freedom): the noise is the machine's, multiplicative,
and alike across configurations, while a configuration's own two measurements give t(1) = 12.7 and an
interval many times its real width — on the quiet quickstart a baseline read 1,064 and 938 samples/s
(±80% alone, ±17% pooled over 3 configurations and 6 degrees of freedom). The interval is never narrower
than the trial's own window-to-window interval (``throughput_spread``, per trial, over √n). Measured once, it
is the pooled deviation's interval for n = 1 when the study has one, else the window interval alone: a
trial's windows share its run's luck, and on the 2-core VM whole 20-100-step runs of one configuration
scattered 9-19% (coefficient of variation) while each run's windows put its error at 2-4%
(benchmarks/trial_scatter.py), so the window interval alone would call a once-measured baseline or runner-up
precise. Relative half-widths throughout: 0.04 is ±4%.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from autotune.trial_result import t975

# The study's first trial (the baseline) is re-measured, not averaged in, when it reads this much worse than
# the median of its own re-runs (below it for a metric to maximize): a cold first run (page cache, imports,
# the first torchrun) rather than the configuration. The quickstart read 922 against 1,605 (43%).
FIRST_TRIAL_FAR_OFF = 0.2


class Pooled(NamedTuple):
    """The study's pooled relative standard deviation of one measurement and its degrees of freedom."""

    sd: float
    df: int


def pooled_sd(groups: Iterable[Sequence[float]]) -> Pooled | None:
    """The relative standard deviation pooled over the groups of repeated measurements (module docstring);
    None when no group has two positive values. Groups with a value <= 0 are left out (no log)."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) < 2 or min(values) <= 0:
            continue
        logs = [math.log(v) for v in values]
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    return Pooled(math.sqrt(squares / df), df) if df else None


def half_width(
    values: Sequence[float], within: Iterable[float | None] = (), pooled: Pooled | None = None
) -> float | None:
    """The relative half-width of a configuration's ~95% interval (module docstring); None when it cannot
    be told (one measurement, no window interval, nothing pooled). Without ``pooled``, the values' own deviation
    (none for one value)."""
    center = statistics.median(values) if values else 0.0
    known = [w for w in within if w is not None and math.isfinite(w)]
    window = statistics.median(known) / math.sqrt(len(values)) if known and values else None
    if not values or center == 0 or (len(values) < 2 and pooled is None):
        return window
    if pooled is not None:
        between = t975(pooled.df) * pooled.sd / math.sqrt(len(values))
    else:
        between = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)) / abs(center)
    return max(between, window or 0.0)


class Separation(NamedTuple):
    """The winner against the runner-up: ``gain`` is how much better the winner's median is (0.12: 12%),
    ``gain_half_width`` its ~95% half-width (both intervals propagated); ``separated`` when the two
    intervals do not overlap."""

    separated: bool
    gain: float
    gain_half_width: float | None


def separation(best: Any, other: Any, direction: str) -> Separation:
    """Whether ``best``'s interval clears ``other``'s (Groups: ``median``, ``half_width``)."""
    maximize = direction == "maximize"
    if best.median == 0 or other.median == 0:
        return Separation(False, 0.0, None)
    ratio = best.median / other.median if maximize else other.median / best.median
    hb, ho = best.half_width, other.half_width
    if hb is None or ho is None:
        return Separation(False, ratio - 1, None)
    width = ratio * math.hypot(hb, ho)
    if maximize:
        apart = best.median * (1 - hb) > other.median * (1 + ho)
    else:
        apart = best.median * (1 + hb) < other.median * (1 - ho)
    return Separation(apart, ratio - 1, width)


def could_separate(best: Any, other: Any, direction: str, more: tuple[int, int], df: int | None) -> bool:
    """Whether ``best``'s and ``other``'s intervals would clear each other after ``more`` further measurements
    of each (best's, other's), were their medians to stay where they are: each half-width shrinks by
    √(n / (n + k)) and by t(df + k_best + k_other) / t(df), ``df`` the pooled deviation's degrees of freedom.

    The projection is the optimistic one (the window interval does not shrink by t; the pooled deviation is
    taken as it is), so a pair is called inseparable only when the runs left could not part them at their
    present gap. True when it cannot be told (an interval unknown, nothing pooled).
    """
    if best.half_width is None or other.half_width is None or df is None:
        return True
    added = more[0] + more[1]
    shrink_t = t975(df + added) / t975(df)

    def projected(group: Any, k: int) -> Any:
        n = len(group.values)
        return replace(group, half_width=group.half_width * math.sqrt(n / (n + k)) * shrink_t)

    return separation(projected(best, more[0]), projected(other, more[1]), direction).separated


def ratio_half_width(a: Any, b: Any) -> float | None:
    """The relative half-width of ``a.median / b.median``: both intervals propagated (in quadrature)."""
    if a.half_width is None or b.half_width is None:
        return None
    return math.hypot(a.half_width, b.half_width)


def far_off(first: float, reruns: Sequence[float], direction: str) -> bool:
    """Whether a first measurement reads far worse than its re-runs' median (:data:`FIRST_TRIAL_FAR_OFF`)."""
    if not reruns:
        return False
    center = statistics.median(reruns)
    if direction == "maximize":
        return first < (1 - FIRST_TRIAL_FAR_OFF) * center
    return first * (1 - FIRST_TRIAL_FAR_OFF) > center


def busy_trials(study: Any) -> list[int]:
    """The numbers of the finished trials measured on a busy machine (their ``busy`` attribute)."""
    return [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("busy") is True]


def busy_warning(study: Any) -> str | None:
    """One line naming the trials measured on a busy machine; None when there were none."""
    numbers = busy_trials(study)
    if not numbers:
        return None
    loads = [t.user_attrs.get("machine_load") for t in study.get_trials(deepcopy=False) if t.number in numbers]
    worst = max((v for v in loads if isinstance(v, (int, float))), default=None)
    shown = ", ".join(f"#{n}" for n in numbers[:12]) + (f" and {len(numbers) - 12} more" if len(numbers) > 12 else "")
    heaviest = f"; others used up to {worst:.0%} of their cores" if worst is not None else ""
    return (f"warning: {len(numbers)} trial(s) measured on a busy machine ({shown}{heaviest}): their numbers are "
            "noisy; re-run the study when the machine is quiet")
