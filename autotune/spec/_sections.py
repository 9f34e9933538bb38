"""The study file's sections other than the search: workload, launcher, trial limits, objectives, constraints,
sampler, pruner, budget and confirmation runs."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from autotune.spec._global_batch import GlobalBatchField
from autotune.spec._knobs import STRICT

Metric = Literal["throughput", "peak_memory_mb", "loss", "eval_loss", "time_to_loss", "goodput"]
Direction = Literal["maximize", "minimize"]
SamplerName = Literal["tpe", "gp", "nsga2", "random", "grid", "cmaes", "qmc"]
PrunerName = Literal["best", "median", "percentile", "hyperband", "successive_halving", "none"]

# Names a metric has in the study file -> the unit-carrying name it is stored under.
METRIC_KEYS: dict[str, str] = {
    "throughput": "throughput_samples_s",
    "peak_memory_mb": "peak_memory_mb",
    "loss": "loss",
    "eval_loss": "eval_loss",
    "time_to_loss": "time_to_loss_s",
    "goodput": "goodput_samples_s",
}
_NATURAL_DIRECTION = {
    "throughput": "maximize", "peak_memory_mb": "minimize", "loss": "minimize", "eval_loss": "minimize",
    "time_to_loss": "minimize", "goodput": "maximize",
}



class WorkloadSpec(BaseModel):
    """What to train: a ``module:function`` or ``path/to/file.py:function`` returning an autotune.Workload."""

    model_config = STRICT
    entrypoint: str = Field(
        description="'package.module:function' or 'path/to/file.py:function' (relative to the study file)",
        examples=["autotune.workloads.mlp:build"],
    )
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the function")

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint_shape(cls, value: str) -> str:
        if not re.fullmatch(r"[^:\s]+:[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                f"{value!r} is not 'module:function' or 'path/to/file.py:function'; "
                "write e.g. autotune.workloads.mlp:build"
            )
        return value


class LauncherSpec(BaseModel):
    """Where trials run: ``local`` (torchrun on this machine) or ``slurm`` (srun in an allocation)."""

    model_config = STRICT
    kind: Literal["local", "slurm"] = Field(
        "local", description="local: trials run on this machine; slurm: one srun job step per trial in an allocation"
    )
    device: Literal["cpu", "cuda", "auto"] = Field(
        "cpu", description="auto: cuda when torch sees a GPU (else cpu, dropping fp16 and pin_memory with a note)"
    )
    start: Literal["warm", "torchrun"] = Field(
        "warm",
        description="local: fork ranks from a warm interpreter (fast) or start a cold torchrun per trial",
    )
    nodes: int = Field(1, ge=1, description="SLURM: nodes per trial")
    partition: str | None = Field(None, description="SLURM: partition to submit to")
    time: str | None = Field(None, description="SLURM: time limit of the allocation, e.g. 00:10:00")
    srun_args: tuple[str, ...] = Field((), description="SLURM: extra srun arguments")

    @model_validator(mode="after")
    def _slurm_only(self) -> LauncherSpec:
        if self.kind != "slurm":
            for key in ("partition", "time"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} only applies to kind: slurm; remove it or set kind: slurm")
            if self.nodes != 1:
                raise ValueError("nodes only applies to kind: slurm; remove it or set kind: slurm")
            if self.srun_args:
                raise ValueError("srun_args only applies to kind: slurm; remove it or set kind: slurm")
        return self


class TrialLimits(BaseModel):
    """How long one trial runs and what it measures."""

    model_config = STRICT
    warmup: Literal["steady", "fixed"] = Field(
        "steady",
        description="steady: measure once window throughput stopped rising (warmup_steps at least, "
        "warmup_max_steps at most); fixed: measure from warmup_steps on",
    )
    warmup_steps: int = Field(
        3, ge=0, description="fixed: steps excluded from every measurement; steady: the fewest warm-up steps"
    )
    warmup_max_steps: int | None = Field(
        None, ge=0, description="steady: the most warm-up steps (default: half of max_steps)"
    )
    settle_tolerance: float = Field(
        0.1, gt=0, lt=1,
        description="steady: settled once a probe window is at most this fraction faster than the one before",
    )
    max_steps: int = Field(40, ge=1, description="optimizer steps per trial")
    max_seconds: float = Field(60.0, gt=0, description="wall-clock cap per trial, start-up included")
    samples: int | None = Field(
        None, gt=0, description="stop once this many samples are seen, so loss compares at equal samples"
    )
    report_every: int | None = Field(
        None, ge=1, description="steps per reporting window (default: about 8 windows per trial)"
    )
    hang_seconds: float = Field(
        20.0, gt=0, description="a started trial silent this long is a hang and is killed"
    )
    evaluate: Literal["auto", "always", "never"] = Field(
        "auto",
        description="when a complete trial evaluates the workload's eval_dataset (eval_loss) — auto: every trial "
        "when an objective is a loss or hyperparameters are searched, otherwise the confirmation runs and "
        "`autotune trial` only; always: every complete trial; never",
    )

    @model_validator(mode="after")
    def _warmup_below_max(self) -> TrialLimits:
        if self.warmup_steps >= self.max_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be below max_steps ({self.max_steps}); "
                "lower warmup_steps or raise max_steps"
            )
        if self.warmup_max_steps is not None:
            if self.warmup == "fixed":
                raise ValueError("warmup_max_steps only applies to warmup: steady; remove it or set warmup: steady")
            if not self.warmup_steps <= self.warmup_max_steps < self.max_steps:
                raise ValueError(
                    f"warmup_max_steps ({self.warmup_max_steps}) must be at least warmup_steps "
                    f"({self.warmup_steps}) and below max_steps ({self.max_steps}); change warmup_max_steps"
                )
        return self

    def trial_steps(self, global_batch: int) -> int:
        """The optimizer steps a trial of ``global_batch`` samples a step runs: ``max_steps``, or fewer when
        ``samples`` are seen first (rounded up, and at least one step past the warm-up)."""
        if self.samples is None:
            return self.max_steps
        return min(self.max_steps, max(self.warmup_steps + 1, -(-self.samples // global_batch)))

    def warmup_cap(self, max_steps: int | None = None) -> int:
        """The most warm-up steps of a trial of ``max_steps`` steps (default: the study's): warmup_max_steps,
        or half of the trial, never below warmup_steps nor so late that no window is left to measure."""
        steps = self.max_steps if max_steps is None else max_steps
        cap = self.warmup_max_steps if self.warmup_max_steps is not None else steps // 2
        return max(self.warmup_steps, min(cap, steps - self.window()))

    def window(self) -> int:
        """Steps per reporting window."""
        if self.report_every is not None:
            return self.report_every
        return max(1, (self.max_steps - self.warmup_steps) // 8)


class ObjectiveSpec(BaseModel):
    """One objective: a metric and its direction."""

    model_config = STRICT
    metric: Metric = Field(
        description="throughput (samples/s) | peak_memory_mb | loss | eval_loss (held-out, at the end) | "
        "time_to_loss (seconds to target:) | goodput (samples/s x statistical efficiency at the global batch)"
    )
    direction: Direction | None = Field(
        None, description="maximize | minimize (default: the metric's natural)"
    )
    target: float | None = Field(
        None, description="time_to_loss: the training loss to reach; seconds of training to reach it are scored"
    )

    @model_validator(mode="after")
    def _natural(self) -> ObjectiveSpec:
        if self.metric == "time_to_loss" and self.target is None:
            raise ValueError("time_to_loss needs target: the loss to reach, e.g. {metric: time_to_loss, target: 0.5}")
        if self.metric != "time_to_loss" and self.target is not None:
            raise ValueError(f"target only applies to metric time_to_loss, not {self.metric}; remove it")
        if self.target is not None and not math.isfinite(self.target):
            raise ValueError(f"target: {self.target} is not a finite number; give the loss to reach")
        natural = _NATURAL_DIRECTION[self.metric]
        if self.direction is None:
            object.__setattr__(self, "direction", natural)
        elif self.direction != natural:
            raise ValueError(
                f"{self.metric} can only be {natural}d here (got {self.direction}); set direction: {natural}"
            )
        return self

    @property
    def key(self) -> str:
        """The unit-carrying name the metric is stored under (``throughput_samples_s``)."""
        return METRIC_KEYS[self.metric]


class ConstraintsSpec(BaseModel):
    """Limits that make a trial infeasible, and a global batch held fixed."""

    model_config = STRICT
    max_memory_mb: float | None = Field(
        None, gt=0, description="peak memory budget per rank; a trial over it is infeasible"
    )
    predict_memory: bool = Field(
        True, description="with max_memory_mb: a search trial predicted over it by more than the prediction's "
        "own error is told infeasible without being launched; false launches every trial and lets it measure",
    )
    global_batch: GlobalBatchField = Field(
        None,
        description="hold the global batch: only splits batch_size x grad_accum x data-parallel degree equal to it (an "
        "integer, or {choices: [...]}) are proposed, and the learning rate is base_lr in every trial (lr_scaling "
        "is not applied)",
    )


class SamplerSpec(BaseModel):
    """The Optuna sampler that proposes each trial's configuration."""

    model_config = STRICT
    name: SamplerName = Field(
        "gp", description="gp (Gaussian-process Bayesian optimisation) | tpe | nsga2 | random | grid | cmaes | qmc"
    )
    seed: int | None = Field(None, description="random seed of the sampler")
    n_startup_trials: int | None = Field(
        None, ge=0, description="trials before the model kicks in (null: a quarter of n_trials, 3 to 10); gp spreads "
        "them over the space, the others draw them at random")


class PrunerSpec(BaseModel):
    """How hopeless trials are stopped early (autotune's noise-aware rule, or Optuna's)."""

    model_config = STRICT
    name: PrunerName = Field(
        "best", description="best | median | percentile | hyperband | successive_halving | none"
    )
    n_startup_trials: int | None = Field(
        None, ge=0, description="complete trials needed before pruning starts (default: best 1, median/percentile 3)"
    )
    percentile: float = Field(25.0, gt=0, lt=100, description="percentile pruner: keep the best P percent")
    margin: float | None = Field(
        None, ge=0, lt=1,
        description="best/median/percentile: prune only when worse than the threshold by this fraction (noise); "
        "null: measured from the configurations the study read twice (0.1 until it has)",
    )
    second_looks: int = Field(
        0, ge=0,
        description="search trials (at most) that re-read a configuration pruned within twice the margin of the best",
    )

    def startup_trials(self) -> int:
        """Complete trials needed before pruning starts: as set, else 1 for ``best`` (the baseline is the
        first comparison) and 3 for the others."""
        if self.n_startup_trials is not None:
            return self.n_startup_trials
        return 1 if self.name == "best" else 3


class BudgetSpec(BaseModel):
    """When the study stops: a number of trials, a time, or both."""

    model_config = STRICT
    n_trials: int | None = Field(
        20, ge=1, description="trials to run (the baseline included); null: no limit (until timeout_s or Ctrl-C)"
    )
    timeout_s: float | None = Field(
        None, gt=0, description="seconds for the search and the confirmation runs together; null: no limit"
    )


class ConfirmSpec(BaseModel):
    """Re-runs of the best configurations at the end, so noise does not pick the winner."""

    model_config = STRICT
    top_k: int = Field(3, ge=0, description="configurations re-measured at the end (0: no confirmation)")
    method: Literal["race", "reruns"] = Field(
        "race",
        description="race: the top configurations and the baseline alive together, measured in rounds of short "
        "blocks in shuffled order, the others frozen, compared on within-round ratios (drift cancels); losers "
        "dropped once separated, until the leader separates with its speed-up known to `precision`, or `rounds`. "
        "reruns: whole re-runs of each (used where a race cannot run: SLURM, several objectives, a metric other "
        "than throughput)",
    )
    block_s: float = Field(0.5, gt=0, le=60, description="race: seconds of training per block (one entrant, one round)")
    rounds: int = Field(24, ge=4, le=1000, description="race: the most rounds")
    precision: float = Field(
        0.09, gt=0, lt=1,
        description="race: stop once the leader is separated from every other entrant and its speed-up's ~95% "
        "half-width is at most this (0.09: ±9%)",
    )
    repeats: int = Field(2, ge=1, description="reruns: extra runs of each")
    max_repeats: int | None = Field(
        None, ge=1,
        description="the most extra runs of the two leading configurations: after `repeats`, the winner and the "
        "runner-up are re-run, one each at a time, until their ~95% intervals separate, or each has this many, or "
        "the runs left could not separate them at their present medians (a tie); null: repeats + 2",
    )

    @model_validator(mode="after")
    def _max_at_least_repeats(self) -> ConfirmSpec:
        if self.max_repeats is not None and self.max_repeats < self.repeats:
            raise ValueError(
                f"max_repeats ({self.max_repeats}) is below repeats ({self.repeats}); raise it or leave it out"
            )
        return self

    def most_repeats(self) -> int:
        """The most confirmation runs of one configuration (``max_repeats``, by default ``repeats + 2``)."""
        return self.max_repeats if self.max_repeats is not None else self.repeats + 2


