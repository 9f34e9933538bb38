"""autotune's default sampler: Gaussian-process Bayesian optimisation that learns from pruned trials too."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import GPSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.compat import optuna_private
from autotune.samplers._acquisition import all_discrete, coordinate_search, evaluate, grid_of
from autotune.samplers._balanced import BalancedStart
from autotune.samplers._gp_view import (
    ABSENT,
    DEFAULT_MINIMUM_NOISE_VAR,
    OnAnchor,
    WithPartial,
    as_ordinal,
    fitted_search_space,
    from_ordinal,
    measured,
    noise_floor,
    ordinal_choices,
    others_of,
    to_ordinal,
)

__all__ = ["GP_MAX_TRIALS", "OneThreadGPSampler", "PartialGPSampler", "preload_gp"]

#: Finished trials past which the default sampler hands over to TPE (docs/reference/sampler.md, benchmarks/scale.py).
GP_MAX_TRIALS = 100


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with one torch intra-op thread, then restore the count (the tuner may be a user's own
    launcher, through ``calibrate()``).

    The GP's tensors are small (a few dozen trials; the acquisition function over at most a few thousand
    points at a time), and with two threads the first operations after a trial's run waited for the sleeping
    thread pool: on the quickstart's space each elementwise operation of the first acquisition evaluation
    took ~8 ms instead of microseconds, so every other ask took 0.10-0.13 s instead of 0.02 s. With one
    thread every ask took 0.016-0.022 s (the same study replayed, benchmarks/README.md section 1)."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class OneThreadGPSampler(GPSampler):
    """Optuna's GPSampler, its fit and search on one torch thread (:func:`one_torch_thread`), its start-up trials
    spread over the space (:class:`~autotune.samplers._balanced.BalancedStart`, unless ``independent_sampler`` says
    otherwise): the multi-objective default, and the base of :class:`PartialGPSampler`."""

    def __init__(self, *, seed: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("independent_sampler", BalancedStart(seed))
        super().__init__(seed=seed, **kwargs)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        with one_torch_thread():
            return super().sample_relative(study, trial, search_space)


class PartialGPSampler(OneThreadGPSampler):
    """Optuna's GPSampler for a single objective, fitted on pruned and failed trials as well, and never
    proposing a configuration the study has already measured or seen fail for a reason that will recur.

    GPSampler models complete trials only. With a pruner that stops most trials early, it would keep
    proposing the regions it was just shown to be poor, and see them pruned again. A pruned trial's
    last reported value is a measurement (for throughput an unbiased one, just shorter; for a loss at
    an earlier step a pessimistic one), and autotune scores pruned trials on it: the model sees it too.

    A trial that failed for a reason that recurs (crashed, timeout, hang: Optuna state FAIL) is fitted as
    infeasible (every constraint +1) at its last reported value, or at the worst value measured (pruned trials'
    included) when it reported none; without that the model never sees it and proposes it again and again.

    A noisy model's expected improvement is often highest at the incumbent itself, so GP search repeats
    its best configuration; re-measuring the best is the confirmation runs' job. When the model's choice
    has been measured, is running or failed for good (and during the start-up trials), this trial takes the
    next point of a spread design (:class:`~autotune.samplers._balanced.BalancedStart`: each knob's values in
    turn, so four start-up trials hold both values of a two-valued knob twice), or random points until one is
    new: one more point explored.

    On a space of discrete knobs (choices, integer ranges) of up to ``EXHAUSTIVE_POINTS`` points, the
    acquisition function is evaluated at every point, and the trial gets the best one not yet measured:
    exact where Optuna's search samples, and never spent on a repeat. On a larger discrete space Optuna's
    search runs batched (:func:`~autotune.samplers._acquisition.coordinate_search`), and the trial gets the best
    point it scored that is not yet measured.

    Past ``max_trials`` finished trials (``GP_MAX_TRIALS``, 100) the fit and the acquisition search cost a second
    per trial and grow with every trial, so the sampler hands over to TPE (multivariate, grouped, constant liar:
    milliseconds), which models the same trials, pruned ones included; ``None`` never hands over.
    """

    def __init__(self, *, seed: int | None = None, max_trials: int | None = GP_MAX_TRIALS, **kwargs: Any) -> None:
        super().__init__(seed=seed, **kwargs)
        self._explore = optuna.samplers.RandomSampler(seed=None if seed is None else seed + 1)
        self.max_trials = max_trials
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # group, constant_liar
            self._tpe = optuna.samplers.TPESampler(
                seed=None if seed is None else seed + 2, multivariate=True, group=True, constant_liar=True
            )
        self._by_tpe: set[int] = set()  # trials (numbers) this sampler handed to TPE
        self._names: list[str] = []  # the relative search space of the ask in progress, in order
        self._taken: set[tuple[Any, ...]] = set()  # and its points already measured (_measured's trials)

    def _hand_over(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` is TPE's: once the study has ``max_trials`` finished trials, a GP fit and its
        acquisition search take 0.6-2.3 s at 100-500 trials of 14 knobs and grow (benchmarks/scale.py), TPE's 0.1 s."""
        if trial.number in self._by_tpe:
            return True
        if self.max_trials is None:
            return False
        finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        if len(optuna_private.trials_of(study, finished, use_cache=True)) < self.max_trials:
            return False
        self._by_tpe.add(trial.number)
        return True

    def sampler_of(self, number: int) -> str:
        """Which sampler proposed trial ``number`` (asked of this sampler): ``tpe`` past the hand-over, else ``gp``."""
        return "tpe" if number in self._by_tpe else "gp"

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._hand_over(study, trial):
            return self._tpe.infer_relative_search_space(OnAnchor(study), trial)  # type: ignore[arg-type]
        # The parameters every fitted trial has, pruned and failed ones included: a conditional knob
        # (prefetch_factor without workers, bucket_cap_mb under fsdp) absent from a pruned trial is sampled
        # independently, not looked up in a trial that lacks it. Computed afresh at every ask, not with
        # Optuna's incremental cache: which trials the GP fits can change after they finished (a failure
        # is fitted only once some trial measured a value), and a cache that walked past a trial while it
        # was not fitted would keep a knob that trial lacks (KeyError in the fit).
        return fitted_search_space(WithPartial(study))

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        others = others_of(study, trial)  # read once per ask: the storage is a database
        if self._hand_over(study, trial):
            params = self._tpe.sample_relative(OnAnchor(study), trial, search_space)  # type: ignore[arg-type]
        else:
            ordinal = ordinal_choices(search_space)  # numbers as choices: modelled in their order
            self._names = list(search_space)
            self._taken = {self._point(to_ordinal(other.params, ordinal)) for other in others}
            view = WithPartial(study, ordinal, search_space)
            self._set_noise_floor(noise_floor(view.fitted()))
            params = super().sample_relative(view, trial, as_ordinal(search_space, ordinal))  # type: ignore[arg-type]
            params = from_ordinal(params, ordinal)
        if (params and not measured(others, params)) or not search_space:
            return params
        return self._unmeasured(study, trial, search_space, others)

    def _set_noise_floor(self, floor: float) -> None:
        """The objective's GP fits its noise variance (standardized) at ``floor`` or above (:func:`noise_floor`).
        Optuna keeps it as ``_minimum_noise`` (tests/tuner/test_second_look.py fails if that name goes); a cached
        fit from below a raised floor would start its search at the log of a negative number, so the cache goes."""
        if floor != self._minimum_noise:
            self._minimum_noise = floor
            self._gprs_cache_list = None

    def _get_constraints_acqf_args(self, *args: Any, **kwargs: Any) -> Any:
        # The floor is the objective's noise; a constraint (memory over the budget, a diverged run) is not
        # measured with it, so its GPs keep Optuna's floor.
        floor, self._minimum_noise = self._minimum_noise, DEFAULT_MINIMUM_NOISE_VAR
        try:
            return super()._get_constraints_acqf_args(*args, **kwargs)
        finally:
            self._minimum_noise = floor

    def _point(self, params: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(params.get(name, ABSENT) for name in self._names)

    def _optimize_acqf(self, acqf: Any, best_params: np.ndarray | None) -> np.ndarray:
        """The acquisition function's best point not yet measured: over every point of a small discrete space;
        by a batched coordinate search on a larger discrete one; otherwise (a continuous knob, or when every
        point found is measured) Optuna's search."""
        space = acqf.search_space
        grid = grid_of(space)
        if grid is not None:
            points, values = grid, evaluate(acqf, grid)
        elif all_discrete(space):
            points, values = coordinate_search(
                acqf, best_params, self._rng.rng, samples=self._n_preliminary_samples, starts=self._n_local_search
            )
        else:
            return np.asarray(super()._optimize_acqf(acqf, best_params))
        seen: set[bytes] = set()
        for index in np.argsort(-values, kind="stable"):
            key = np.round(points[index], 9).tobytes()
            if key in seen:
                continue
            seen.add(key)
            if self._point(space.get_unnormalized_param(points[index])) not in self._taken:
                return np.asarray(points[index])
        return np.asarray(super()._optimize_acqf(acqf, best_params))

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        if self._hand_over(study, trial):
            return self._tpe.sample_independent(OnAnchor(study), trial, param_name,  # type: ignore[arg-type]
                                                param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)

    def _unmeasured(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution],
        others: list[FrozenTrial], tries: int = 200,
    ) -> dict[str, Any]:
        """A point none of ``others`` (:func:`others_of`) has measured, runs or failed at for good: the independent
        sampler's (:class:`~autotune.samplers._balanced.BalancedStart`: the start-up trials spread over the space)
        when it is new, else a random one ({} when none is found: the parameters are then sampled independently)."""
        for attempt in range(tries):
            explore = self._independent_sampler if attempt == 0 else self._explore  # the start's spread draw first
            params = {name: explore.sample_independent(study, trial, name, dist) for name, dist in search_space.items()}
            if not measured(others, params):
                return params
        return {}


def preload_gp() -> None:
    """Import what GPSampler's first fit imports (torch, scipy and optuna's GP modules: seconds on a busy
    machine), so that it is not paid between two trials. scipy.optimize is imported by the first fit
    itself (optuna imports it lazily): 0.7 s of the quickstart's first GP trial's ask, 1.3 s in all."""
    optuna_private.preload_gp_modules()
    import scipy.optimize  # noqa: F401


