"""A race's entrants: the configuration, its confirmation trial and its paced run, started, measured, ended and
turned into the trial's result (the race itself is autotune/tuner/_race.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import optuna

from autotune.objectives import (
    Group,
    Paired,
    config_key,
    is_reference,
    measured_margin,
    reading_noise,
)
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.trial_result import Outcome, TrialResult, Window
from autotune.trial_runner import TrialPlan, plan_for
from autotune.tuner._confirmation import _visible
from autotune.tuner._roles import ROLE_BASELINE
from autotune.workload_check import knobs_not_decided


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


def paired_candidates(study: optuna.Study, spec: StudySpec, groups: list[Group], k: int) -> list[Group] | None:
    """The race's entrants besides the baseline, in a paired study (autotune/objectives/_margin.py): of the
    configurations by their median ratio to the anchor measured with them, pruned ones included, the best and
    those the paired evidence cannot separate from it (within the pruner's measured margin of ``anchor_ratio``,
    :func:`~autotune.objectives.measured_margin`: 10% until the study read configurations twice), at most ``k``,
    no two of which differ only in knobs the objective cannot see. One that ran to its end races as its measured
    group; one only pruned, as its pruned reading. A configuration clearly behind the leader does not race: the
    race's rounds are shorter by its block, and the drift within a round smaller. None when the study holds no
    paired search trial: the race then takes the best medians and the near misses, unpaired
    (:func:`autotune.tuner._confirmation.top_groups`, ``near_misses``)."""
    ratios: dict[str, list[float]] = {}
    pruned: dict[str, Group] = {}
    baseline: set[str] = set()
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    for t in study.get_trials(deepcopy=False, states=states):
        config, ratio = t.user_attrs.get("config"), Paired.ratio(t)
        if not isinstance(config, dict) or ratio is None or t.user_attrs.get("race"):
            continue
        key = str(t.user_attrs.get("config_key") or config_key(config))
        if t.user_attrs.get("role") == ROLE_BASELINE:
            baseline.add(key)
        if t.state == optuna.trial.TrialState.COMPLETE and not is_reference(t):
            continue
        ratios.setdefault(key, []).append(ratio)
        value = t.user_attrs.get(spec.objectives[0].key)
        if t.state == optuna.trial.TrialState.PRUNED and isinstance(value, (int, float)) and value > 0:
            pruned.setdefault(key, Group(key, config, (t.number,), (float(value),), float(value), 0.0,
                                         t.user_attrs.get("peak_memory_mb"), t.user_attrs.get("loss")))
    if len(ratios.keys() - baseline) == 0:
        return None
    measured = {g.config_key: g for g in groups}
    undecided = knobs_not_decided(spec)
    seen: set[tuple[tuple[str, str], ...]] = set()
    out: list[Group] = []
    ranked = sorted((key for key in ratios if key not in baseline), key=lambda key: statistics.median(ratios[key]),
                    reverse=True)
    bar = (1 - measured_margin(reading_noise(study.get_trials(deepcopy=False), Paired.RATIO))) * \
        statistics.median(ratios[ranked[0]])
    for key in ranked:
        group = measured.get(key) or pruned.get(key)
        if out and statistics.median(ratios[key]) < bar:
            break
        if group is None or _visible(group, undecided) in seen:
            continue
        seen.add(_visible(group, undecided))
        out.append(group)
        if len(out) == k:
            break
    return out
