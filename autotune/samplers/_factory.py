"""The sampler a study file names, built for Optuna and seeded."""

from __future__ import annotations

import warnings

import optuna
from optuna.samplers import BaseSampler

from autotune.errors import UsageError
from autotune.samplers._gp import OneThreadGPSampler, PartialGPSampler
from autotune.samplers._grid import GridSampler, grid_points
from autotune.samplers._unrepeated import Unrepeated
from autotune.search_space import SearchSpace
from autotune.spec import StudySpec


def make_sampler(spec: StudySpec, space: SearchSpace) -> Unrepeated:
    """The sampler named in the study file, seeded, proposing no configuration the study has measured while one
    is left (:class:`Unrepeated`; the named sampler is its ``inner``)."""
    with warnings.catch_warnings():  # Optuna's notices about the experimental features used on purpose
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return Unrepeated(_make_sampler(spec, space), space, seed=spec.sampler.seed)


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
        return GridSampler(grid_points(space), seed=seed)
    raise UsageError(f"sampler {name!r} is not supported")
