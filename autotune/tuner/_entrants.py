"""A race's entrants: the configuration, its confirmation trial and its paced run, started, measured, ended and
turned into the trial's result (the race itself is autotune/tuner/_race.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import optuna

from autotune.objectives import Group
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.trial_result import Outcome, TrialResult, Window
from autotune.trial_runner import TrialPlan, plan_for


class Entrant(Protocol):
    """One configuration in a race: a paced run (live) or its replay."""

    windows: list[Window]
    wall_s: float
    trial_dir: Path

    def start(self, timeout_s: float) -> None: ...

    def block(self, timeout_s: float) -> Window: ...

    def finish(self, timeout_s: float) -> dict[str, object] | None: ...

    def close(self) -> None: ...


OpenEntrant = Callable[[TrialPlan, Path], Entrant]  # an entrant of the plan (with pace_steps) in its trial folder
Enter = Callable[[Group], optuna.Trial]  # the confirmation trial a group races as (queued, asked, its attrs set)
Tell = Callable[[optuna.Trial, TrialResult], None]


class EntrantFailed(RuntimeError):
    """An entrant that could not start or finish a block; the message is why."""


@dataclass
class Runner:
    group: Group
    trial: optuna.Trial
    entrant: Entrant
    block_samples: int
    failed: str | None = None
    eval_loss: float | None = None
    ended: bool = False

    def end(self, timeout_s: float) -> None:
        """End the entrant once: finished as a trial (evaluated) when it is well, killed when it failed."""
        if self.ended:
            return
        self.ended = True
        if self.failed is not None:
            self.entrant.close()
            return
        try:
            done = self.entrant.finish(timeout_s) or {}
        except RuntimeError as e:  # its done record did not parse
            self.failed = str(e)
            return
        value = done.get("eval_loss")
        self.eval_loss = float(value) if isinstance(value, (int, float)) else None


def block_steps(block_s: float, throughput: float, config: TrialConfig) -> int:
    """Steps in one block: ``block_s`` at the entrant's search throughput, and at least twice what its DataLoader
    holds ready (``num_workers x prefetch_factor`` batches, ``grad_accum`` to a step): a frozen entrant resumes with
    the queue its workers filled, and a block shorter than that queue reads how full it was, not the speed. On the
    quickstart, 0.5 s blocks of a 2-worker configuration whose queue held more than a block scattered 23% a block."""
    steps = max(1, round(block_s * max(throughput, 1e-9) / config.global_batch))
    queued = config.num_workers * (config.prefetch_factor or 2) / max(1, config.grad_accum)
    return max(steps, math.ceil(2 * queued))


def block_timeout(spec: StudySpec) -> float:
    return max(30.0, 20 * spec.confirm.block_s, float(spec.trial.hang_seconds))


def start_entrant(study: optuna.Study, spec: StudySpec, group: Group, open_entrant: OpenEntrant, enter: Enter,
           beat: Callable[[optuna.Trial], None]) -> Runner:
    trial = enter(group)
    config = TrialConfig.model_validate(group.config)
    steps = block_steps(spec.confirm.block_s, group.median, config)
    plan = plan_for(spec, config, evaluate=spec.evaluates(searching=False)).model_copy(update={"pace_steps": steps})
    trial_dir = spec.runs_dir() / f"trial-{trial.number:04d}"
    entrant = open_entrant(plan, trial_dir)
    runner = Runner(group, trial, entrant, steps * config.global_batch)
    try:
        entrant.start(float(spec.trial.max_seconds))
    except (EntrantFailed, RuntimeError) as e:
        runner.failed = str(e)
    beat(trial)
    return runner


def entrant_result(runner: Runner) -> TrialResult:
    entrant = runner.entrant
    windows = list(entrant.windows)
    folder = str(entrant.trial_dir)
    if runner.failed is not None and not windows:
        return TrialResult(Outcome.CRASHED, reason=runner.failed, wall_s=entrant.wall_s, trial_dir=folder)
    if not windows:  # started, then the race ended before its first block (its baseline could not start)
        return TrialResult(Outcome.PRUNED, reason="the race ended before its first block", wall_s=entrant.wall_s,
                           trial_dir=folder)
    result = TrialResult(Outcome.COMPLETE, reason=f"raced {len(windows)} block(s)", wall_s=entrant.wall_s,
                         trial_dir=folder)
    result.take_windows(windows)
    speeds = [w.window_throughput_samples_s for w in windows if w.window_throughput_samples_s > 0]
    if speeds:  # every block holds block_samples: all of them over all their time
        result.training_s = sum(runner.block_samples / v for v in speeds)
        result.throughput_samples_s = len(speeds) * runner.block_samples / result.training_s
    if runner.failed is not None:
        result.reason += f", then failed: {runner.failed}"
    result.eval_loss = runner.eval_loss
    return result
