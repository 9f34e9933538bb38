"""Confirmation runs: the top configurations and the baseline re-measured, interleaved, after the search.

The record written at the end (``autotune_confirmation``) holds :func:`autotune.objectives.choose`'s
choice, as the summary does: one module picks the winner.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import optuna

from autotune.objectives import Choice, Group, config_key, could_separate, pareto_front, pooled_sd
from autotune.spec import StudySpec
from autotune.tuner._observer import Observer
from autotune.tuner._results import chosen, measured_groups
from autotune.tuner._roles import FINISHED, INTERRUPTED, ROLE_BASELINE, ROLE_CONFIRM
from autotune.workload_check import knobs_not_decided

RunConfirmation = Callable[[Group], None]  # queue one confirmation run of the group's configuration, run it


def confirm(
    study: optuna.Study,
    spec: StudySpec,
    run: RunConfirmation,
    *,
    observer: Observer,
    clock: Callable[[], float],
    deadline: float | None = None,
) -> None:
    """Re-measure the top configurations and the baseline, interleaved, until each has ``repeats``
    confirmation runs; then, while the winner's interval overlaps the runner-up's, both once more each
    (and the baseline once more when its first trial read far below its re-runs and was left out), until
    they separate or each has ``max_repeats`` (:func:`more_runs`). The summary then picks the best by the
    median of all its measurements. A run expected to end past ``deadline`` (``clock``'s time) is not
    started."""
    settings = spec.confirm
    if settings.top_k == 0:
        return
    groups = measured_groups(study, spec)
    if not groups:
        return
    candidates = top_groups(groups, spec, settings.top_k)
    for group in near_misses(study, spec, groups, settings.top_k - len(candidates)):
        observer.note(
            f"trial #{group.trials[0]} was pruned {_below(group, groups, spec):.0%} from the best measured value, "
            "within two runs' scatter, and fewer than confirm.top_k configurations ran to their end: it is "
            "re-measured whole"
        )
        candidates.append(group)
    baseline = _baseline_group(study, groups)
    if baseline is not None and all(g.config_key != baseline.config_key for g in candidates):
        candidates.append(baseline)
    done = {g.config_key: _confirm_count(study, g.config_key) for g in candidates}
    runs = sum(max(0, settings.repeats - done[g.config_key]) for g in candidates)
    if runs:
        observer.confirming(runs)
    walls = wall_times(study)
    expected = statistics.median(walls) if walls else 0.0
    for repeat in range(settings.repeats):
        for group in candidates:
            if done[group.config_key] > repeat:
                continue
            if deadline is not None and clock() + expected > deadline:
                break
            run(group)
    for _ in range(2 * settings.most_repeats()):  # bounded even if a run is not counted (failed as stale)
        more = more_runs(study, spec)
        if not more or (deadline is not None and clock() + expected * len(more) > deadline):
            break
        observer.confirming(len(more))
        for group in more:
            run(group)
    study.set_user_attr("autotune_confirmation", confirmation_record(study, spec))


def more_runs(study: optuna.Study, spec: StudySpec) -> list[Group]:
    """The configurations to re-run once more, none when the choice is sure: the winner and the runner-up
    while their intervals overlap and the runs left to them could still part them (:func:`separable`), the
    winner while none of its measurements settled (``settled: false``
    on every one: a low-confidence number must be re-measured before it wins), and the baseline while its
    far-off first trial is left out and it has no second re-run; each only while it has fewer than
    ``confirm.max_repeats`` confirmation runs."""
    choice = chosen(study, spec)
    most = spec.confirm.most_repeats()
    wanted: list[Group] = []
    if not choice.separated and separable(study, spec, choice):
        wanted += [g for g in (choice.best, choice.runner_up) if g is not None]
    if choice.best is not None and not settled_once(study, choice.best):
        wanted.append(choice.best)
    baseline = choice.baseline
    if choice.left_out and baseline is not None and len(baseline.values) < 2:
        wanted.append(baseline)
    out: list[Group] = []
    for group in wanted:
        if group.config_key not in {g.config_key for g in out} and _confirm_count(study, group.config_key) < most:
            out.append(group)
    return out


def separable(study: optuna.Study, spec: StudySpec, choice: Choice) -> bool:
    """Whether the winner's and the runner-up's intervals could still separate within ``confirm.max_repeats``
    confirmation runs each, at their present medians (:func:`autotune.objectives.could_separate`). When they
    could not, more runs would only re-measure a tie: a leader 6% ahead at two runs each, on a study whose
    runs scatter 8%, needs dozens of runs each to clear its runner-up, not the one or two left; the study
    stops and reports the tie. In benchmarks/peer_ray.py's quickstart studies the confirmation took 7 runs
    (31-40 s), 4 of them re-measuring such a tie; with this, 3-4 runs (18-22 s) and the same tie
    (benchmarks/README.md section 6)."""
    best, other = choice.best, choice.runner_up
    if best is None or other is None:
        return True
    most = spec.confirm.most_repeats()
    left = (max(0, most - _confirm_count(study, best.config_key)),
            max(0, most - _confirm_count(study, other.config_key)))
    pooled = pooled_sd(g.values for g in measured_groups(study, spec))
    direction = spec.objectives[0].direction or "maximize"
    return could_separate(best, other, direction, left, pooled.df if pooled else None)


def settled_once(study: optuna.Study, group: Group) -> bool:
    """Whether one of the group's measurements settled before it was measured (a trial from before the
    steady warm-up, without ``settled``, counts as settled)."""
    numbers = set(group.trials)
    return any(t.user_attrs.get("settled") is not False for t in study.get_trials(deepcopy=False)
               if t.number in numbers)


#: The rounds a race is expected to take when the search leaves it time (the replayed drifting landscapes of
#: benchmarks/drift_decisions.py took a median of 14).
RESERVED_ROUNDS = 15


def confirm_reserve_s(study: optuna.Study, spec: StudySpec, timeout_s: float | None) -> float:
    """The time the confirmation is expected to take, at most half of ``timeout_s`` (0 before any trial
    finished): by re-runs, the median finished trial's wall time per run; a race, that per entrant (its
    start) and :data:`RESERVED_ROUNDS` rounds of a block each."""
    settings = spec.confirm
    if settings.top_k == 0 or timeout_s is None:
        return 0.0
    walls = wall_times(study)
    if not walls:
        return 0.0
    if settings.method == "race":  # each entrant's start (about a trial), then rounds of a block each
        entrants = settings.top_k + 1
        expected = entrants * statistics.median(walls) + RESERVED_ROUNDS * entrants * settings.block_s
        return min(expected, timeout_s / 2)
    runs = (settings.top_k + 1) * settings.repeats  # the top configurations and the baseline
    return min(runs * statistics.median(walls), timeout_s / 2)


def wall_times(study: optuna.Study) -> list[float]:
    """Wall times of the finished baseline and search trials that ran (the cost of a trial here)."""
    return [
        float(t.user_attrs["wall_s"])
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if t.user_attrs.get("role") != ROLE_CONFIRM and t.user_attrs.get("wall_s")
    ]


def top_groups(groups: list[Group], spec: StudySpec, k: int) -> list[Group]:
    """The best ``k`` configurations by median of the first objective (Pareto-optimal ones first when
    there are several objectives), no two of which differ only in knobs the objectives cannot see
    (:func:`autotune.workload_check.knobs_not_decided`: ``lr_scaling`` under throughput and memory): such a
    pair is one configuration to these objectives, and re-measuring both spends the confirmation on telling
    equal speeds apart (the quickstart, when it searched lr_scaling, gave 6 of its 7 confirmation runs to one
    configuration at two lr_scalings). The better-ranked one stands for both."""
    direction = spec.objectives[0].direction or "maximize"
    reverse = direction == "maximize"
    ranked = sorted(groups, key=lambda g: g.median, reverse=reverse)
    if len(spec.objectives) > 1:
        points = [_group_point(g, spec) for g in ranked]
        front = set(pareto_front(points, [o.direction or "maximize" for o in spec.objectives]))
        ranked = [g for i, g in enumerate(ranked) if i in front] + [g for i, g in enumerate(ranked) if i not in front]
    undecided = knobs_not_decided(spec)
    if undecided:
        seen: set[tuple[tuple[str, str], ...]] = set()
        distinct = []
        for group in ranked:
            visible = _visible(group, undecided)
            if visible not in seen:
                seen.add(visible)
                distinct.append(group)
        ranked = distinct
    return ranked[:k]


#: How far from the best measured value a pruned configuration may have read and still be re-measured when the
#: confirmation has room: two whole runs of one configuration read up to 1.9x apart on the 2-core machine
#: (benchmarks/first_fork.py: 147-276 samples/s; run-to-run CV 12-19%), and a trial's windows share its run's luck.
NEAR_MISS = 0.3


def near_misses(study: optuna.Study, spec: StudySpec, groups: list[Group], room: int) -> list[Group]:
    """Up to ``room`` pruned configurations, best first, whose partial value read within :data:`NEAR_MISS` of
    the best measured median (single-objective studies). The ``best`` pruner compares one window of a trial
    with one run of the best configuration; when that run was lucky, a configuration as good is stopped, and if
    too few configurations ran to their end to fill ``confirm.top_k``, the confirmation re-measures the nearest
    such miss whole instead of leaving the choice to the one lucky run (a real hf_gpt2 study here pruned all 7
    search trials against a baseline that read 250 samples/s and 180 when re-run)."""
    if room <= 0 or not groups or len(spec.objectives) != 1:
        return []
    metric = spec.objectives[0].key
    maximize, best = _best_median(groups, spec)
    undecided = knobs_not_decided(spec)
    taken = {_visible(g, undecided) for g in groups}
    found: dict[tuple[tuple[str, str], ...], Group] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,)):
        config, value = t.user_attrs.get("config"), t.user_attrs.get(metric)
        if not isinstance(config, dict) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        near = value >= (1 - NEAR_MISS) * best if maximize else value <= (1 + NEAR_MISS) * best
        group = Group(str(t.user_attrs.get("config_key") or config_key(config)), config, (t.number,),
                      (float(value),), float(value), 0.0, t.user_attrs.get("peak_memory_mb"), t.user_attrs.get("loss"))
        visible = _visible(group, undecided)
        if not near or visible in taken:
            continue
        if visible not in found or (value > found[visible].median) == maximize:
            found[visible] = group
    return sorted(found.values(), key=lambda g: g.median, reverse=maximize)[:room]


def _best_median(groups: list[Group], spec: StudySpec) -> tuple[bool, float]:
    """Whether the first objective is maximized, and the best median of ``groups`` by it."""
    maximize = (spec.objectives[0].direction or "maximize") == "maximize"
    return maximize, (max if maximize else min)(g.median for g in groups)


def _below(group: Group, groups: list[Group], spec: StudySpec) -> float:
    best = _best_median(groups, spec)[1]
    return abs(best - group.median) / abs(best) if best else 0.0


def _visible(group: Group, undecided: list[str]) -> tuple[tuple[str, str], ...]:
    """The group's configuration as the objectives see it: without the undecided knobs and what they
    derive (``lr`` from ``lr_scaling``)."""
    hidden = set(undecided) | ({"lr"} if "lr_scaling" in undecided else set())
    return tuple(sorted((name, repr(value)) for name, value in group.config.items() if name not in hidden))


def _group_point(group: Group, spec: StudySpec) -> list[float]:
    out = []
    for o in spec.objectives:
        if o.key == spec.objectives[0].key:
            out.append(group.median)
        elif o.key == "peak_memory_mb":
            out.append(group.peak_memory_mb if group.peak_memory_mb is not None else math.inf)
        elif o.key == "loss":
            out.append(group.loss if group.loss is not None else math.inf)
        else:
            out.append(math.nan)
    return out


def _baseline_group(study: optuna.Study, groups: list[Group]) -> Group | None:
    keys = {
        t.user_attrs.get("config_key")
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("role") == ROLE_BASELINE
    }
    return next((g for g in groups if g.config_key in keys), None)


def _confirm_count(study: optuna.Study, key: str) -> int:
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if t.user_attrs.get("role") == ROLE_CONFIRM
        and t.user_attrs.get("config_key") == key
        and t.user_attrs.get("outcome") != INTERRUPTED
    )


def confirmation_record(study: optuna.Study, spec: StudySpec) -> dict[str, Any]:
    """The ``autotune_confirmation`` study attribute: the choice as confirmed (:func:`chosen`)."""
    choice = chosen(study, spec)
    best = choice.best
    return {
        "best_trial": best.trials[0] if best else None,
        "best_config_key": best.config_key if best else None,
        "groups": [g.to_json() for g in choice.candidates],
        "baseline": choice.baseline.to_json() if choice.baseline else None,
        "speedup": choice.speedup,
        "default_is_best": choice.default_is_best,
        "metric": spec.objectives[0].key,
        "runner_up": choice.runner_up.to_json() if choice.runner_up else None,
        "separated": choice.separated,
        "separable": choice.separated or separable(study, spec, choice),
        "statement": choice.statement(),
        "speedup_half_width": choice.speedup_half_width,
        "left_out": list(choice.left_out),
    }
