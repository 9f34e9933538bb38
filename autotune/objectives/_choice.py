"""The one choice of a study: the configuration autotune recommends, and the baseline it is measured against.

:func:`choose` is the only place a winner is picked. The CLI summary, ``autotune best``, ``autotune status``,
the report's headline, ``calibrate()`` and the stored ``autotune_confirmation`` attribute all show its answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.objectives._config_key import config_key
from autotune.objectives._confirmation import Group, choose_best, group_measurements
from autotune.objectives._noise import Separation, far_off, ratio_half_width, separation
from autotune.objectives._race import Contrast, contrast, lighter, standing

ROLE_BASELINE, ROLE_CONFIRM = "baseline", "confirm"
THROUGHPUT = "throughput_samples_s"
CONFIRMATION_ATTR = "autotune_confirmation"  # the study attribute written when the confirmation runs are done
RACE_ATTR = "autotune_race"  # the confirmation race's readings (docs/storage.md), written after every round


@dataclass(frozen=True)
class Choice:
    """What :func:`choose` found.

    ``best`` is the recommended configuration (the baseline itself when the default is best);
    ``default_is_best`` says so; ``speedup`` is best over baseline of throughput (1.0 when the default is
    chosen; None without a measured baseline or when the first objective is not throughput);
    ``confirmed`` is True once confirmation runs measured the candidates; ``candidates`` are the groups
    the choice was made among. How sure it is: ``runner_up`` (the best other candidate) and ``versus``
    (``best`` against it: separated or not, the gain and its interval); ``speedup_half_width`` (relative)
    of the speed-up, both spreads propagated; ``left_out``: the study's first trial when it read far
    below its own re-runs (it is re-measured, not averaged in). :meth:`statement` says it in one line.
    """

    best: Group | None
    baseline: Group | None
    speedup: float | None
    default_is_best: bool
    confirmed: bool
    candidates: tuple[Group, ...]
    runner_up: Group | None = None
    versus: Separation | None = None
    speedup_half_width: float | None = None
    left_out: tuple[int, ...] = ()
    advice: str | None = None  # a race that could not part its two leaders: what more rounds would take
    runs_on_less: str | None = None  # chosen over the runner-up it is tied with as the lighter: "1 rank against 2"

    @property
    def separated(self) -> bool:
        """The winner's interval clears the runner-up's (True, too, when nothing else was measured)."""
        return self.best is not None and (self.versus is None or self.versus.separated)

    def statement(self, name_of: Callable[[Group], str] | None = None) -> str | None:
        """``best by 12% (± 5%) over #7`` or ``tied within noise with #7 (...)``: how the winner compares
        with the runner-up; None without a winner. ``name_of`` names a group (default: its first trial)."""
        if self.best is None:
            return None
        name = name_of or (lambda g: f"#{g.trials[0]}")
        if self.runner_up is None or self.versus is None:
            return "the only configuration measured to the end"
        versus = self.versus
        width = versus.gain_half_width
        interval = "interval unknown: measured once" if width is None else f"± {width:.0%}"
        if versus.separated:
            return f"best by {versus.gain:.0%} ({interval}) over {name(self.runner_up)}"
        lighter = f"; chosen as it runs on less ({self.runs_on_less})" if self.runs_on_less else ""
        return f"tied within noise with {name(self.runner_up)} ({versus.gain:+.0%}, {interval}){lighter}"


def is_reference(trial: FrozenTrial) -> bool:
    """A feasible trial that ran to its end: the only kind a pruner compares with or a choice may pick.

    COMPLETE in Optuna's sense is not enough: an oom or diverged trial is told COMPLETE with its partial
    values (and infeasible constraints), so samplers that model constraints learn from it.
    """
    if trial.state != TrialState.COMPLETE:
        return False
    if trial.user_attrs.get("outcome", "complete") != "complete":
        return False
    return all(v <= 0 for v in trial.constraints.values())


def measured_groups(study: optuna.Study, metric: str, exclude: Collection[int] = ()) -> list[Group]:
    """Feasible complete measurements of ``metric`` grouped by configuration (every role), but the trials
    in ``exclude``. A throughput measurement carries its trial's window interval (``throughput_spread``)."""
    records = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not is_reference(t) or "config" not in t.user_attrs or t.number in exclude:
            continue
        value = t.user_attrs.get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        key = str(t.user_attrs.get("config_key") or config_key(t.user_attrs["config"]))
        records.append(
            (t.number, key, dict(t.user_attrs["config"]), float(value), t.user_attrs.get("peak_memory_mb"),
             t.user_attrs.get("loss"), t.user_attrs.get("throughput_spread") if metric == THROUGHPUT else None)
        )
    return group_measurements(records)


def _role_keys(study: optuna.Study, role: str) -> set[str]:
    return {
        str(t.user_attrs.get("config_key"))
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("role") == role and t.user_attrs.get("config_key")
    }


def _clearly_better(value: float, than: float, margin: float, maximize: bool) -> bool:
    gain = value - than if maximize else than - value
    return gain > margin * abs(than)


def choose(study: optuna.Study, metric: str | None = None, direction: str | None = None) -> Choice:
    """The study's recommendation, by the median of ``metric`` (default: the study's first objective).

    Candidates are every configuration measured feasibly to the end, the baseline included; once
    confirmation runs measured some (``confirm`` trials), only those and the baseline. ``confirmed``: the
    confirmation is done (the ``autotune_confirmation`` attribute is written).
    The best median wins (ties: lower spread, more measurements). A configuration other than the
    baseline wins only when its median beats the baseline's by more than the measured spread of
    either (``Group.spread``); otherwise the default configuration is best, and is returned.
    """
    if metric is None:
        names = study.metric_names
        metric = names[0] if names else THROUGHPUT
    if direction is None:
        direction = "maximize" if study.directions[0] == StudyDirection.MAXIMIZE else "minimize"
    race = study.user_attrs.get(RACE_ATTR)
    if metric == THROUGHPUT and direction == "maximize" and isinstance(race, dict) and race.get("rounds"):
        return choose_from_race(race, confirmed=CONFIRMATION_ATTR in study.user_attrs)
    groups = measured_groups(study, metric)
    baseline_keys = _role_keys(study, ROLE_BASELINE)
    baseline = next((g for g in groups if g.config_key in baseline_keys), None)
    left_out = _first_far_off(baseline, direction)
    if left_out:
        groups = measured_groups(study, metric, exclude=left_out)
        baseline = next((g for g in groups if g.config_key in baseline_keys), None)
    confirmed_keys = _role_keys(study, ROLE_CONFIRM)
    candidates = [g for g in groups if g.config_key in confirmed_keys or g is baseline]
    if not any(g.config_key in confirmed_keys for g in candidates):
        candidates = groups  # no confirmation run measured anything yet
    confirmed = CONFIRMATION_ATTR in study.user_attrs and candidates is not groups
    if not candidates:
        return Choice(None, baseline, None, False, False, (), left_out=left_out)
    best = choose_best(candidates, direction)
    if baseline is not None and best is not baseline:
        margin = max(best.spread, baseline.spread)
        if not _clearly_better(best.median, baseline.median, margin, direction == "maximize"):
            best = baseline
    default_is_best = baseline is not None and best is baseline
    speedup = speedup_half_width = None
    if baseline is not None and metric == THROUGHPUT and baseline.median > 0:
        speedup = 1.0 if default_is_best else best.median / baseline.median
        speedup_half_width = 0.0 if default_is_best else ratio_half_width(best, baseline)
    others = [g for g in candidates if g.config_key != best.config_key]
    runner_up = choose_best(others, direction) if others else None
    versus = separation(best, runner_up, direction) if runner_up is not None else None
    return Choice(best, baseline, speedup, default_is_best, confirmed, tuple(candidates), runner_up, versus,
                  speedup_half_width, left_out)


def _first_far_off(baseline: Group | None, direction: str) -> tuple[int, ...]:
    """The baseline's first measurement (the study's first trial), when it reads far worse than the
    baseline's later measurements, its re-runs (:func:`autotune.objectives._noise.far_off`)."""
    if baseline is None or len(baseline.values) < 2:
        return ()
    return baseline.trials[:1] if far_off(baseline.values[0], baseline.values[1:], direction) else ()


def choose_from_race(race: dict[str, Any], *, confirmed: bool = True) -> Choice:
    """The choice a confirmation race makes (autotune/objectives/_race.py): the leader by its drift-corrected
    effect, recommended only when its speed-up over the baseline (the race's anchor) is separated from none;
    the speed-up and the leader's lead over the runner-up as intervals on within-round ratios. Each entrant's
    ``median`` is its speed on the race's average round, ``half_width`` its comparison's with the leader
    (the leader's: its speed-up's)."""
    rounds, anchor = race["rounds"], str(race["anchor"])
    entrants: dict[str, dict[str, Any]] = race["entrants"]
    now = standing(rounds, anchor, [k for k in entrants if any(k in r for r in rounds)])
    fitted = now.fit
    leader = now.leader
    tied = set(race.get("tied") or ())
    if leader in tied:
        # Dropped as tied with the one the race went on with, and marginally ahead of it on its fewer rounds: the
        # two are one choice, and the one raced to the end has its speed-up known to confirm.precision; the
        # dropped one's interval is as wide as its rounds were few (a quickstart: ±16% against the survivor's ±9%)
        leader = max((k for k in fitted.effects if k not in tied), key=lambda k: fitted.effects[k])
    over_anchor = contrast(rounds, leader, anchor, fitted) if leader != anchor and anchor in fitted.effects else None
    gains = {k: contrast(rounds, leader, k, fitted) for k in entrants if k != leader and k in fitted.effects}

    def group(key: str) -> Group:
        info = entrants[key]
        values = tuple(float(r[key]) for r in rounds if key in r)
        width = over_anchor.half_width if key == leader and over_anchor else (
            gains[key].half_width if key in gains else None)
        spread = (max(values) - min(values)) / fitted.speed(key) if values else 0.0
        return Group(key, dict(info["config"]), tuple(int(t) for t in info["trials"]), values, fitted.speed(key),
                     spread, info.get("peak_memory_mb"), info.get("loss"), width)

    groups = {k: group(k) for k in entrants if k in fitted.effects}
    baseline = groups.get(anchor)
    best_key = leader
    if leader != anchor and baseline is not None and not _ahead(over_anchor):
        best_key = anchor  # not separated from the default configuration: keep it
    best = groups[best_key]
    others = [k for k in groups if k != best_key]
    runner_key = max(others, key=lambda k: fitted.effects[k]) if others else None
    versus = advice = None
    if runner_key is not None:
        lead = contrast(rounds, best_key, runner_key, fitted)
        versus = Separation(_ahead(lead), lead.ratio - 1, lead.half_width)
        if not versus.separated:
            advice = _advice(lead, fitted.df, race, groups)
    default_is_best = best_key == anchor
    speedup = speedup_width = None
    if baseline is not None:
        against = contrast(rounds, best_key, anchor, fitted) if not default_is_best else None
        speedup = against.ratio if against else 1.0
        speedup_width = against.half_width if against else 0.0
    runner = groups[runner_key] if runner_key is not None else None
    less = lighter(best.config, runner.config) if runner is not None and versus is not None and not (
        versus.separated or default_is_best) else None
    return Choice(best, baseline, speedup, default_is_best, confirmed, tuple(groups.values()), runner, versus,
                  speedup_width, (), advice, less)


def _ahead(c: Contrast | None) -> bool:
    return c is not None and c.separated and c.log_ratio > 0


def _advice(lead: Contrast, df: int, race: dict[str, Any], groups: dict[str, Group]) -> str:
    """What it would take to part two entrants the race left tied."""
    a, b = (f"#{groups[k].trials[0]}" for k in (lead.a, lead.b))
    needed = lead.rounds_to_separate(df)
    if needed is None:
        return f"{a} and {b} read within 0.5% of each other: no affordable race parts them; either will do"
    more = max(1, needed - lead.rounds)
    per_round = float(race.get("round_s") or 0.0)
    cost = f" (~{more * per_round:.0f} s)" if per_round else ""
    return f"about {more} more rounds{cost} would likely separate {a} from {b} (confirm.rounds)"
