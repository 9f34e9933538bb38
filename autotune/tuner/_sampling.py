"""The decisions of a study: the sampler and the pruner the study file names, built for Optuna."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler

from autotune.errors import UsageError
from autotune.objectives import NoiseAwarePruner, is_reference
from autotune.search_space import SearchSpace
from autotune.spec import StudySpec
from autotune.tuner._gp import OneThreadGPSampler, PartialGPSampler
from autotune.tuner._storage import quiet


def make_sampler(spec: StudySpec, space: SearchSpace) -> BaseSampler:
    """The sampler named in the study file, seeded."""
    with quiet():
        return _make_sampler(spec, space)


def _make_sampler(spec: StudySpec, space: SearchSpace) -> BaseSampler:
    cfg = spec.sampler
    seed = cfg.seed
    n_trials = spec.budget.n_trials or 20  # for the start-up heuristic only; a null budget runs without a limit
    startup = cfg.n_startup_trials if cfg.n_startup_trials is not None else max(3, min(10, n_trials // 4))
    name = cfg.name
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=startup, multivariate=True, group=True, constant_liar=True
        )
    if name == "gp":
        if len(spec.objectives) == 1:
            return PartialGPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
        return OneThreadGPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, n_trials // 3)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
    if name == "grid":
        return _GridSampler(grid_points(space), seed=seed)
    raise UsageError(f"sampler {name!r} is not supported")


class _GridSampler(optuna.samplers.GridSampler):
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


def make_pruner(spec: StudySpec) -> BasePruner:
    """Optuna's pruner for single-objective studies (multi-objective ones use autotune's own rule)."""
    cfg = spec.pruner
    if len(spec.objectives) > 1 or cfg.name == "none":
        return optuna.pruners.NopPruner()
    first_window = spec.trial.warmup_steps + spec.trial.window()
    # The margin is at least a compared trial's window interval, which is throughput's.
    spread_attr = "throughput_spread" if spec.objectives[0].key == "throughput_samples_s" else None
    if cfg.name == "best":
        # Only the best configuration matters: a trial clearly worse than the best finished one (by more than
        # the noise margin) cannot become it, so it stops at its first measured window. The baseline, run
        # first and never pruned, is the first trial to compare with.
        return NoiseAwarePruner(
            0.0,
            n_startup_trials=cfg.startup_trials(),
            n_warmup_steps=spec.trial.warmup_steps,
            margin=cfg.margin,
            spread_attr=spread_attr,
            metric_attr=spec.objectives[0].key,
        )
    if cfg.name in ("median", "percentile"):
        # Against the median, a trial as good as most is pruned on noise: judge from the second measured
        # window on (the first is the noisiest: workers starting, caches cold), and only when clearly worse.
        return NoiseAwarePruner(
            50.0 if cfg.name == "median" else cfg.percentile,
            n_startup_trials=cfg.startup_trials(),
            n_warmup_steps=first_window,
            margin=cfg.margin,
            spread_attr=spread_attr,
            metric_attr=spec.objectives[0].key,
        )
    if cfg.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=first_window + 1,
            max_resource=spec.trial.max_steps,
            reduction_factor=3,
        )
    if cfg.name == "successive_halving":
        halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=first_window + 1, reduction_factor=3)
        return FeasibleReferences(halving)
    raise UsageError(f"pruner {cfg.name!r} is not supported")


class FeasibleReferences(BasePruner):
    """An Optuna pruner that sees, among the finished trials, only the feasible ones that ran to their end
    (:func:`autotune.objectives.is_reference`): an oom or diverged trial, told COMPLETE with its partial
    values, is never the trial others are measured against. (Hyperband's brackets read the storage
    directly, so it cannot be wrapped this way.)"""

    def __init__(self, pruner: BasePruner) -> None:
        self.pruner = pruner

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.pruner.prune(_ReferencesOnly(study), trial)  # type: ignore[arg-type]


class _ReferencesOnly:
    """A study whose COMPLETE trials are its references only (everything else is the study's own)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[optuna.trial.FrozenTrial]:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if t.state != optuna.trial.TrialState.COMPLETE or is_reference(t)]
