"""The pruner a study file names, built for Optuna (single-objective studies; a multi-objective study is judged
by :class:`~autotune.pruners.DominancePruner` in the tuner's window callback)."""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner

from autotune.errors import UsageError
from autotune.pruners._noise_aware import NoiseAwarePruner
from autotune.pruners._references import FeasibleReferences
from autotune.spec import StudySpec


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
        # the noise margin) cannot become it, so it stops once it has measured two windows. Not on one: a
        # trial's first window after its warm-up scatters far beyond the margin (DataLoader workers filling
        # their queues: the quickstart's batch-256 bf16 two-worker configuration read 4,300-6,460 samples/s
        # in it in 8 studies and 3,070 in a ninth, 45% below its end, and was pruned as 1.13x where it is 2x).
        # The baseline, run first and never pruned, is the first trial to compare with.
        return NoiseAwarePruner(
            0.0,
            n_startup_trials=cfg.startup_trials(),
            n_warmup_steps=spec.trial.warmup_steps,
            min_windows=2,
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
            min_windows=2,  # with a steady warm-up the first window's step varies: count the windows too
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
