"""The confirmation race's statistics: configurations compared on readings taken seconds apart.

A race (autotune/tuner/_race.py) measures its entrants — the best configurations of the search and the
baseline — in rounds: every entrant once per round, one block of training each, in an order shuffled per
round (Abedi & Brecht's randomized multiple interleaved trials, at the level of blocks of steps). The
machine's drift (10-11% on the 2-core VM) moves every reading of a round alike, so the round is a block in
the statistical sense: the log readings follow ``y[c, r] = mu[c] + rho[r] + e``, the round effect ``rho``
carries the drift and is fitted away, and what is left, ``e``, is the noise of one block. Its variance is
pooled over every entrant and round (residual degrees of freedom ``N - C - R + 1``), and a difference of two
entrants, the log of their speed ratio, is the mean of their within-round differences with the ~95%
interval ``t(df) * sigma * sqrt(1/n_a + 1/n_b)`` (Kalibera & Jones: the interval on the ratio, at the level
where the variance lives). Relative half-widths are on the log scale: 0.05 is about ±5%.

On the quickstart's MLP (benchmarks/README.md, "The confirmation race") the ratio of two configurations read
in one round of 0.25 s blocks scattered 15% and over 2 s of each 5.4-6.2%, against 7-8.6% for one
configuration's own readings: a short block's noise is mostly the step's own, which only more blocks average
away; the drift is what the pairing removes.

A block taken while something else held the machine (another process woke on two cores) can read several
times slower than its round: on a calibration of the convnet, a compile-free baseline running two intra-op
threads read 49-783 samples/s in 8 of 24 rounds against ~1,150 in the rest while a test run took a core, and
those readings alone took the speed-up's interval to ±70% and its value from ~2.7x to 5.1x. Drift moves a
round's readings alike and the round effect takes it out; such a block does not. So the model is first fitted
robustly (Tukey's median polish: medians for the means, so the slow blocks cannot pull the effects they are
judged against), and a reading whose residual there lies below the fit by more than ``DISTURBED_SCALES`` times
one block's noise (estimated robustly: :func:`_block_noise`) and by a fifth or more (``DISTURBED_LOG``) is
left out as disturbed; the model is then fitted as above without it. Only low readings: interference slows
a block, nothing speeds one up. At most a third of an entrant's readings are left out
(``MAX_DISTURBED_SHARE``): past that, slow blocks are how the entrant runs (or the machine was too busy to
tell), and they stay in. What was left out is in the fit (``left_out``) and the race's summary says how many.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from autotune.trial_result import t975

Rounds = Sequence[Mapping[str, float]]  # each round: entrant key -> its block's reading (samples/s)

MIN_ROUNDS = 4  # before it, no entrant is dropped and the race does not stop (the noise is not yet known)
DISTURBED_SCALES = 5.0  # a reading this many robust deviations below the fit ... (module docstring)
DISTURBED_LOG = math.log(1.25)  # ... and at least a fifth below it (log scale) is left out as disturbed
MAX_DISTURBED_SHARE = 1 / 3  # of an entrant's readings, the most left out


@dataclass(frozen=True)
class Fit:
    """The additive model's fit: each entrant's effect (log scale), the noise of one block and its degrees of
    freedom (None and 0 while there are too few readings to tell it)."""

    effects: dict[str, float]
    counts: dict[str, int]
    sigma: float | None
    df: int
    level: float = 0.0  # the mean round effect: exp(effect + level) is an entrant's speed on the race's average round
    left_out: tuple[tuple[int, str], ...] = ()  # (round index, entrant) of each reading left out as disturbed

    def speed(self, key: str) -> float:
        """The entrant's reading on the race's average round (samples/s), the drift taken out."""
        return math.exp(self.effects[key] + self.level)


@dataclass(frozen=True)
class Contrast:
    """``a`` against ``b``: ``log_ratio`` (positive: ``a`` reads higher), its ~95% half-width (None: unknown),
    the rounds both were read in."""

    a: str
    b: str
    log_ratio: float
    half_width: float | None
    rounds: int

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def separated(self) -> bool:
        """The interval excludes no difference: one of the two is faster."""
        return self.half_width is not None and abs(self.log_ratio) > self.half_width

    def rounds_to_separate(self, df: int) -> int | None:
        """About how many rounds in all would part the two at their present gap (None: no affordable number,
        the gap is under 0.5%)."""
        if self.half_width is None or self.rounds == 0:
            return None
        if abs(self.log_ratio) < 0.005:
            return None
        scale = self.half_width * math.sqrt(self.rounds) / t975(max(1, df))  # sigma * sqrt(2)
        return math.ceil((1.96 * scale / abs(self.log_ratio)) ** 2)


def fit(rounds: Rounds, iterations: int = 50) -> Fit:
    """Fit ``log y[c, r] = mu[c] + rho[r] + e`` to the rounds (an entrant missing from a round, dropped or
    not yet started, is simply absent) by alternating means; again without the readings it shows disturbed
    (module docstring)."""
    logs = {(i, k): math.log(v) for i, r in enumerate(rounds) for k, v in r.items() if v > 0}
    gone: set[tuple[int, str]] = set()
    if len({i for i, _ in logs}) >= MIN_ROUNDS:
        robust, residuals = _fit(logs, iterations, statistics.median)  # Tukey's median polish: the slow blocks
        gone = _disturbed(logs, residuals, robust.counts)  # cannot pull the effects they are judged against
    fitted, _ = _fit({key: v for key, v in logs.items() if key not in gone}, iterations)
    return replace(fitted, left_out=tuple(sorted(gone)))


def _fit(
    logs: dict[tuple[int, str], float], iterations: int, centre: Callable[[list[float]], float] = statistics.fmean
) -> tuple[Fit, dict[tuple[int, str], float]]:
    """The additive model over ``logs`` ((round, entrant) -> log reading) by alternating ``centre``s (means:
    least squares; medians: median polish), and each reading's residual."""
    rounds = sorted({i for i, _ in logs})
    keys = sorted({k for _, k in logs})
    by_round = {i: {k: v for (j, k), v in logs.items() if j == i} for i in rounds}
    counts = {k: sum(k in r for r in by_round.values()) for k in keys}
    mu = {k: centre([v for (_, c), v in logs.items() if c == k]) for k in keys}
    rho = dict.fromkeys(rounds, 0.0)
    for _ in range(iterations):
        rho = {i: centre([v - mu[k] for k, v in r.items()]) for i, r in by_round.items()}
        mu = {k: centre([v - rho[i] for (i, c), v in logs.items() if c == k]) for k in keys}
    residuals = {(i, k): v - mu[k] - rho[i] for (i, k), v in logs.items()}
    df = len(logs) - len(keys) - len(rounds) + 1
    level = statistics.fmean(rho.values()) if rho else 0.0
    if df < 1:
        return Fit(mu, counts, None, 0, level), residuals
    return Fit(mu, counts, math.sqrt(sum(e * e for e in residuals.values()) / df), df, level), residuals


def _disturbed(logs: dict[tuple[int, str], float], residuals: dict[tuple[int, str], float], counts: dict[str, int]
               ) -> set[tuple[int, str]]:
    """The readings far below the fit (module docstring), at most ``MAX_DISTURBED_SHARE`` of an entrant's."""
    threshold = max(DISTURBED_SCALES * _block_noise(logs), DISTURBED_LOG)
    low = {key for key, e in residuals.items() if e < -threshold}
    per_entrant = Counter(k for _, k in low)
    return {(i, k) for i, k in low if per_entrant[k] <= MAX_DISTURBED_SHARE * counts[k]}


def _block_noise(logs: dict[tuple[int, str], float]) -> float:
    """One block's noise (log scale), robustly: for each pair of entrants, their within-round differences'
    absolute deviations from the pair's median difference, pooled; 1.4826 x the median of those, over sqrt(2)
    (a difference holds two blocks' noise). Slow blocks barely move it: they are a few of many deviations."""
    by_round: dict[int, dict[str, float]] = {}
    for (i, k), v in logs.items():
        by_round.setdefault(i, {})[k] = v
    keys = sorted({k for _, k in logs})
    deviations: list[float] = []
    for n, a in enumerate(keys):
        for b in keys[n + 1:]:
            diffs = [r[a] - r[b] for r in by_round.values() if a in r and b in r]
            if len(diffs) >= 3:
                middle = statistics.median(diffs)
                deviations += [abs(d - middle) for d in diffs]
    return 1.4826 * statistics.median(deviations) / math.sqrt(2) if deviations else 0.0


def contrast(rounds: Rounds, a: str, b: str, fitted: Fit | None = None) -> Contrast:
    """``a`` against ``b`` over the rounds that read both (module docstring)."""
    fitted = fitted or fit(rounds)
    gone = set(fitted.left_out)
    diffs = [math.log(r[a]) - math.log(r[b]) for i, r in enumerate(rounds)
             if r.get(a, 0) > 0 and r.get(b, 0) > 0 and (i, a) not in gone and (i, b) not in gone]
    if not diffs:
        return Contrast(a, b, 0.0, None, 0)
    mean = statistics.fmean(diffs)
    if fitted.sigma is None:
        return Contrast(a, b, mean, None, len(diffs))
    width = t975(fitted.df) * fitted.sigma * math.sqrt(2 / len(diffs))
    return Contrast(a, b, mean, width, len(diffs))


@dataclass(frozen=True)
class Standing:
    """Where a race stands: the leader (by effect), every entrant against it, the leader against the anchor
    (the baseline), and the fit."""

    leader: str
    anchor: str
    versus_leader: dict[str, Contrast]  # each other entrant: leader against it
    speedup: Contrast | None  # the leader against the anchor; None when the anchor leads
    fit: Fit

    def runner_up(self) -> str | None:
        """The entrant closest to the leader (the smallest lead over it)."""
        if not self.versus_leader:
            return None
        return min(self.versus_leader, key=lambda k: self.versus_leader[k].log_ratio)

    def losers(self) -> list[str]:
        """Entrants the leader is separated from, the anchor never among them (it is read every round)."""
        return [k for k, c in self.versus_leader.items() if k != self.anchor and c.separated and c.log_ratio > 0]

    def decided(self, precision: float) -> bool:
        """The leader is separated from every other entrant, and its speed-up over the anchor is known to
        within ``precision`` (the anchor leading: separated from the rest is enough)."""
        if not self.versus_leader or not all(c.separated and c.log_ratio > 0 for c in self.versus_leader.values()):
            return False
        if self.speedup is None:
            return True
        return self.speedup.half_width is not None and self.speedup.half_width <= precision


def standing(rounds: Rounds, anchor: str, alive: Sequence[str] | None = None) -> Standing:
    """The race's standing over ``rounds`` among the ``alive`` entrants (default: every one read)."""
    fitted = fit(rounds)
    keys = [k for k in (alive if alive is not None else fitted.effects) if k in fitted.effects]
    leader = max(keys, key=lambda k: fitted.effects[k])
    versus = {k: contrast(rounds, leader, k, fitted) for k in keys if k != leader}
    speedup = contrast(rounds, leader, anchor, fitted) if leader != anchor and anchor in fitted.effects else None
    return Standing(leader, anchor, versus, speedup, fitted)


def lighter(a: Mapping[str, object], b: Mapping[str, object]) -> str | None:
    """How configuration ``a`` runs on less than ``b`` ("1 rank against 2", "0 DataLoader workers a rank
    against 2"), or None when it does not: fewer ranks first (devices or cores a user pays for), then, at the
    same ranks, fewer DataLoader worker processes. Of two entrants a race cannot part, it keeps the lighter
    (autotune/tuner/_race.py): the same speed on less, and the same pick from one study to the next, where
    the leader of two tied entrants is a matter of which read luckier."""
    ranks_a, ranks_b = (int(c.get("world_size") or 1) for c in (a, b))  # type: ignore[call-overload]
    if ranks_a != ranks_b:
        return f"{ranks_a} rank{'s' * (ranks_a != 1)} against {ranks_b}" if ranks_a < ranks_b else None
    workers_a, workers_b = (int(c.get("num_workers") or 0) for c in (a, b))  # type: ignore[call-overload]
    if workers_a < workers_b:
        return f"{workers_a} DataLoader worker{'s' * (workers_a != 1)} a rank against {workers_b}"
    return None
