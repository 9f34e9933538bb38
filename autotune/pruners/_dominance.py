"""autotune's multi-objective pruning rule: prune a trial that enough finished trials clearly dominate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.objectives import check_directions, check_length, dominates

#: One finished trial's history: ``(step, values)`` per reporting window, values in objective order.
History = Sequence[tuple[int, Sequence[float]]]


@dataclass(frozen=True)
class PruningDecision:
    """What :meth:`DominancePruner.decide` found at one step."""

    prune: bool
    step: int
    comparable: int  # finished trials with a window at or before ``step``
    dominated_by: int  # of those, how many dominate the running trial with margin
    needed: int  # how many must dominate it for it to be pruned (0: still in the start-up phase)

    @property
    def reason(self) -> str:
        """One line for the trial's ``reason`` attribute."""
        if self.needed == 0:
            return f"not pruned at step {self.step}: {self.comparable} finished trials to compare with"
        verb = "pruned" if self.prune else "not pruned"
        return (
            f"{verb} at step {self.step}: dominated by {self.dominated_by} of {self.comparable} finished "
            f"trials (needs {self.needed})"
        )


class DominancePruner:
    """Prune a running trial when enough finished trials clearly beat it in every objective at the same step.

    Optuna's pruners refuse multi-objective studies (``NotImplementedError``), so autotune brings this rule.
    At a reporting step, the running trial's values are compared with each finished (complete) trial's
    values at the same step: that trial's latest window at or before ``step``. A finished trial with no
    window by then is not counted. Let N be the number of finished trials so compared:

    - if N < ``n_startup_trials``, the trial is never pruned;
    - otherwise it is pruned when at least ``max(1, ceil(min_dominating_fraction * N))`` of them
      dominate it with margin: the other trial is at least as good in every objective and better by more
      than ``margin`` (relative to the running trial's value, ``|value| * margin``) in at least one.

    The margin keeps noise from pruning: throughput measured on a shared machine varies by about 10%
    between identical runs, so a trial merely within noise of the finished ones is kept. A trial that is
    better than every finished trial in some objective (a Pareto trade-off) is never dominated, hence
    never pruned. Making a trial worse never un-prunes it.

    Args:
        directions: ``"maximize"`` or ``"minimize"`` per objective, in the study's order.
        n_startup_trials: finished trials with a comparable window needed before anything is pruned.
        min_dominating_fraction: the fraction (0 < f <= 1) of those that must dominate the trial.
        margin: the relative improvement (0 <= m < 1) that counts as better rather than noise.
    """

    def __init__(
        self,
        directions: Sequence[str],
        n_startup_trials: int = 3,
        min_dominating_fraction: float = 0.5,
        margin: float = 0.05,
    ) -> None:
        self._maximize = check_directions(directions)
        if n_startup_trials < 0:
            raise ValueError(f"n_startup_trials ({n_startup_trials}) is negative; give 0 or more")
        if not 0 < min_dominating_fraction <= 1:
            raise ValueError(f"min_dominating_fraction ({min_dominating_fraction}) is out of range; give 0 < f <= 1")
        if not 0 <= margin < 1:
            raise ValueError(f"margin ({margin}) is out of range; give a relative margin 0 <= m < 1, e.g. 0.05")
        self.directions = tuple(directions)
        self.n_startup_trials = n_startup_trials
        self.min_dominating_fraction = min_dominating_fraction
        self.margin = margin

    def __repr__(self) -> str:
        return (
            f"DominancePruner(directions={list(self.directions)}, n_startup_trials={self.n_startup_trials}, "
            f"min_dominating_fraction={self.min_dominating_fraction}, margin={self.margin})"
        )

    def should_prune(self, step: int, values: Sequence[float], finished: Sequence[History]) -> bool:
        """Whether the running trial, with ``values`` at ``step``, is pruned given the finished histories."""
        return self.decide(step, values, finished).prune

    def decide(self, step: int, values: Sequence[float], finished: Sequence[History]) -> PruningDecision:
        """:meth:`should_prune`, with the counts behind the answer."""
        check_length(values, len(self._maximize), "values")
        comparable = 0
        dominated_by = 0
        for i, history in enumerate(finished):
            at_step = _value_at(history, step)
            if at_step is None:
                continue
            check_length(at_step, len(self._maximize), f"finished[{i}] window values")
            comparable += 1
            if dominates(at_step, values, self._maximize, self.margin):
                dominated_by += 1
        if comparable < self.n_startup_trials or comparable == 0:
            return PruningDecision(False, step, comparable, dominated_by, needed=0)
        # The small epsilon keeps float products such as 0.1 * 30 = 3.0000000000000004 from rounding up.
        needed = max(1, math.ceil(self.min_dominating_fraction * comparable - 1e-9))
        return PruningDecision(dominated_by >= needed, step, comparable, dominated_by, needed)


def _value_at(history: History, step: int) -> Sequence[float] | None:
    """The values of the latest window at or before ``step`` (histories need not be sorted)."""
    best_step: int | None = None
    best: Sequence[float] | None = None
    for window_step, window_values in history:
        if window_step <= step and (best_step is None or window_step >= best_step):
            best_step, best = window_step, window_values
    return best
