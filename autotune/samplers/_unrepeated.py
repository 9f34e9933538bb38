"""No configuration proposed twice by accident: every sampler a study file names, wrapped so that it proposes a
configuration the study has not measured while one exists.

A configuration comes back on purpose only: a second look, a retry, the warm start, a race entrant or a
confirmation run, each queued with its parameters fixed, which no sampler proposes. What a sampler proposes is
new. Left alone, Optuna's samplers do not hold to that: random, QMC and the independent draws of TPE, CMA-ES and
the GP (a knob the baseline lacks, a hyperparameter whose default is not one of its choices, is outside every
model's joint space) repeat; a held-out study of one hyperparameter of three values proposed 40 twice and 20
twice in 4 search trials, and never 5.

:class:`Unrepeated` lets the sampler propose and steers only a proposal that leads nowhere new. It keeps one rule
at every suggestion of a trial: the branch of the space the trial has taken so far (the values suggested, and
the joint proposal's values of the knobs still to come) still holds a configuration the study has not measured
(:func:`open_branch`: the space's own ``suggest`` walked down that branch, conditional knobs as they are
suggested, until it meets one). A joint proposal that breaks the rule is drawn again (:data:`REDRAWS` times),
then moved by one knob to the nearest value that keeps it, else dropped (every knob then drawn on its own); a
knob drawn on its own that breaks it takes the nearest value that keeps it. While the space holds an unmeasured
configuration, a value that keeps the rule exists at every step, so the trial ends on one. When it holds none,
the space is exhausted (:meth:`Unrepeated.exhausted`), and the tuner stops searching (autotune/tuner/_exhausted.py).

"Measured" is what the GP counts (:func:`~autotune.samplers._gp_view.others_of`): a trial finished, running, or
failed for a reason that recurs; and only where the trial ran the configuration its parameters make in this
space: the baseline runs the workload's defaults whatever the space fixes (``num_workers: 1``), so where its
parameters coincide with a point of the space whose fixed knobs differ, that point is still unmeasured. A walk
looks at no more configurations than the study has measured, plus one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError
from autotune.objectives import config_key
from autotune.samplers._gp_view import others_of
from autotune.search_space import SearchSpace

__all__ = ["REDRAWS", "Unrepeated", "open_branch", "space_points"]

#: A joint proposal that leads nowhere new is drawn again this many times before it is moved.
REDRAWS = 5
_NEAREST = 64  # values tried around a knob's draw (an integer range's), nearest first, before random ones
_REFUSED = 1000  # configurations the space refuses (a mesh that does not divide the ranks) a walk passes at most

Point = dict[str, Any]
Key = tuple[tuple[str, str], ...]


class _Continuous(Exception):
    """The walk met a continuous range: its branch holds configurations without end."""


class _Probe:
    """A stand-in trial that answers the space's ``suggest`` along one branch: the ``fixed`` value of a knob that
    has one, else the ``path``'s choice at that suggestion (the first value past its end), recording how many
    values each suggestion had to choose from."""

    def __init__(self, path: list[int], fixed: Point) -> None:
        self.path, self.fixed = path, fixed
        self.widths: list[int] = []
        self.params: Point = {}

    def _pick(self, name: str, values: Sequence[Any]) -> Any:
        if name in self.fixed:
            values = [self.fixed[name]]
        depth = len(self.widths)
        self.widths.append(len(values))
        value = values[self.path[depth] if depth < len(self.path) else 0]
        self.params[name] = value
        return value

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._pick(name, list(choices))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return int(self._pick(name, range(low, high + 1, step)))

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        if step is None and low != high and name not in self.fixed:
            raise _Continuous(name)
        count = 1 if step is None else round((high - low) / step) + 1
        return float(self._pick(name, [low + i * (step or 0.0) for i in range(count)]))


def _walk(space: SearchSpace, fixed: Point, most: int, until: Callable[[Point], bool] = lambda point: False
          ) -> tuple[list[Point], bool]:
    """The configurations on the branch ``fixed`` sets, depth first, at most ``most`` of them and none past the
    first that is ``until``; and whether that was all of them (False also where a continuous range makes them
    endless)."""
    points: list[Point] = []
    path: list[int] | None = []
    refused = 0
    while path is not None:
        probe = _Probe(path, fixed)
        try:
            space.suggest(probe)  # type: ignore[arg-type]
            points.append(probe.params)
            if until(probe.params):
                return points, _next(path, probe.widths) is None
        except _Continuous:
            return points, False
        except (ValueError, AutotuneError):
            refused += 1
            if refused > _REFUSED:
                return points, False
        if len(points) >= most:
            return points, _next(path, probe.widths) is None
        path = _next(path, probe.widths)
    return points, True


def _next(path: list[int], widths: list[int]) -> list[int] | None:
    """The next branch, depth first: the deepest suggestion with a value left moves on, the deeper ones restart."""
    full = path[: len(widths)] + [0] * (len(widths) - len(path))
    for depth in range(len(widths) - 1, -1, -1):
        if full[depth] + 1 < widths[depth]:
            return [*full[:depth], full[depth] + 1]
    return None


def open_branch(space: SearchSpace, fixed: Point, taken: set[Key]) -> bool:
    """Whether the branch of ``space`` on which the knobs of ``fixed`` take its values (a knob the branch does not
    suggest is ignored) holds a configuration not in ``taken``. The walk stops at the first such one, and looks
    at no more than ``len(taken) + 1``: past that, one of them is not taken."""
    points, complete = _walk(space, fixed, len(taken) + 1, lambda point: _key(point) not in taken)
    return any(_key(p) not in taken for p in points) or not complete


def space_points(space: SearchSpace, most: int = 4096) -> list[Point] | None:
    """Every configuration of the space as Optuna params (a conditional knob only where it is suggested); None
    when there are more than ``most``, or endless (a continuous range)."""
    points, complete = _walk(space, {}, most + 1)
    return points if complete and len(points) <= most else None


def _key(params: Point) -> Key:
    return tuple(sorted((name, repr(value)) for name, value in params.items()))


class Unrepeated(BaseSampler):
    """``inner`` (any Optuna sampler) proposing a configuration the study has not measured while one exists
    (module docstring). Every other attribute is ``inner``'s (``sampler_of``, ``max_trials`` ...)."""

    def __init__(self, inner: BaseSampler, space: SearchSpace, *, seed: int | None = None) -> None:
        self.inner = inner
        self.space = space
        self._rng = random.Random(None if seed is None else seed + 3)
        self._ask: tuple[int, set[Key]] | None = None  # the trial being asked for, and what is measured
        self._relative: dict[int, Point] = {}  # its joint proposal, as steered
        self._ran_its_params: dict[int, bool] = {}  # trial number: its configuration is its params' in this space

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def exhausted(self, study: optuna.Study) -> bool:
        """Whether the study has measured every configuration of the space (the walk is short then: the space
        holds no more configurations than the study measured)."""
        return not open_branch(self.space, {}, self._measured(study, -1))

    # -- Optuna's sampler interface ------------------------------------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        params = self.inner.sample_relative(study, trial, search_space)
        taken = self._taken(study, trial)
        for _ in range(REDRAWS):
            if not params or open_branch(self.space, params, taken):
                break
            params = self.inner.sample_relative(study, trial, search_space)
        else:
            params = self._moved(params, search_space, taken)
        self._relative = {trial.number: dict(params)}
        return params

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        value = self.inner.sample_independent(study, trial, param_name, param_distribution)
        taken = self._taken(study, trial)
        fixed = {**self._relative.get(trial.number, {}), **trial.params}
        if open_branch(self.space, {**fixed, param_name: value}, taken):
            return value
        for other in _around(param_distribution, value, self._rng):
            if open_branch(self.space, {**fixed, param_name: other}, taken):
                return other
        return value  # the branch so far holds nothing new: the space is exhausted

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    # -- steering ------------------------------------------------------------------------------------------------
    def _taken(self, study: optuna.Study, trial: FrozenTrial) -> set[Key]:
        """The configurations measured, read once per ask."""
        if self._ask is None or self._ask[0] != trial.number:
            self._ask = (trial.number, self._measured(study, trial.number))
        return self._ask[1]

    def _measured(self, study: optuna.Study, number: int) -> set[Key]:
        """The configurations the study has measured (module docstring), but trial ``number``'s."""
        return {_key(t.params) for t in others_of(study, SimpleNamespace(number=number))  # type: ignore[arg-type]
                if self.ran_its_params(t)}

    def ran_its_params(self, trial: FrozenTrial) -> bool:
        """Whether ``trial`` ran the configuration its parameters make in this space (a trial without a stored
        configuration: yes)."""
        key = trial.user_attrs.get("config_key")
        if not isinstance(key, str):
            return True
        if trial.number not in self._ran_its_params:
            probe = _Probe([], dict(trial.params))
            try:
                made = config_key(self.space.suggest(probe).model_dump())  # type: ignore[arg-type]
            except (ValueError, AutotuneError, _Continuous):
                made = None
            self._ran_its_params[trial.number] = made == key
        return self._ran_its_params[trial.number]

    def _moved(self, params: Point, space: dict[str, BaseDistribution], taken: set[Key]) -> Point:
        """``params`` with one knob moved to the nearest value that leads somewhere new (the knobs in random
        order); {} when no single move does: every knob is then drawn on its own, and steered."""
        names = list(params)
        self._rng.shuffle(names)
        for name in names:
            for other in _around(space[name], params[name], self._rng):
                moved = {**params, name: other}
                if open_branch(self.space, moved, taken):
                    return moved
        return {}


def _around(dist: BaseDistribution, value: Any, rng: random.Random) -> list[Any]:
    """Other values of ``dist`` to try instead of ``value``, nearest first: every choice (numbers by distance, others
    at random), the ``_NEAREST`` nearest values of an integer range and then random ones, random ones of a float
    range."""
    if isinstance(dist, CategoricalDistribution):
        choices = [c for c in dist.choices if c != value]
        rng.shuffle(choices)
        if _number(value) and all(_number(c) for c in choices):
            choices.sort(key=lambda c: abs(c - value))
        return choices
    if isinstance(dist, IntDistribution):
        near = sorted(range(dist.low, dist.high + 1, dist.step), key=lambda v: abs(v - value))[1:_NEAREST + 1] \
            if (dist.high - dist.low) // dist.step < 4 * _NEAREST else \
            [v for k in range(1, _NEAREST // 2 + 1) for v in (value - k * dist.step, value + k * dist.step)
             if dist.low <= v <= dist.high]
        count = (dist.high - dist.low) // dist.step + 1
        return near + [dist.low + dist.step * rng.randrange(count) for _ in range(_NEAREST)]
    if isinstance(dist, FloatDistribution):
        if dist.step is not None:
            count = round((dist.high - dist.low) / dist.step) + 1
            return [dist.low + dist.step * rng.randrange(count) for _ in range(_NEAREST)]
        if dist.log:
            return [math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))) for _ in range(_NEAREST)]
        return [rng.uniform(dist.low, dist.high) for _ in range(_NEAREST)]
    return []


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
