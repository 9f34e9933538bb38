"""A small search space, exhausted: every configuration measured, the rest of the search re-reads them on purpose.

The study file's sampler proposes no configuration the study has measured while one is left
(:class:`autotune.samplers.Unrepeated`). Once none is left, a proposal could only repeat one by accident. Instead,
the run says so once (a line in its output, and the study attribute ``autotune_space_exhausted``), and each
search trial the budget has left is a deliberate second reading, queued with its parameters fixed and marked
``reread_of`` (the trial whose configuration it reads again): the configuration read fewest times, the best
reading first among equals, so the readings go where they tell the choice most and each one adds a degree of
freedom to the study's reading noise (the pruner's margin). Second looks that ``pruner.second_looks`` allows, and
queued trials (a retry, the warm start), come first. A configuration another worker is reading now counts as read
(without a value yet): a worker that finds every configuration taken by the others' running trials reads one
again rather than stopping with nothing of its own. A configuration that failed for good is not read again;
with nothing left to read, the search stops (:class:`SpaceExhausted`) and the confirmation follows.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.samplers import space_points
from autotune.spec import StudySpec
from autotune.tuner._observer import Observer
from autotune.tuner._roles import ROLE_BASELINE, ROLE_SEARCH, counts_toward_budget
from autotune.tuner._second_look import queue_second_look

EXHAUSTED_ATTR = "autotune_space_exhausted"
REREAD = "reread_of"  # user attr: the trial whose configuration this search trial reads again, on purpose


class SpaceExhausted(Exception):
    """Every configuration of the search space is measured and none can be read again: the search stops."""


def before_ask(study: optuna.Study, spec: StudySpec, observer: Observer) -> None:
    """Before the loop asks for a search trial, under the study lock: queue a second look when one is due
    (:func:`queue_second_look`); else, when every configuration is measured and nothing is queued, queue a
    deliberate second reading, or raise :class:`SpaceExhausted` when none is left to read (module docstring)."""
    line = queue_second_look(study, spec)
    if line:
        observer.note(line)
        return
    sampler: Any = study.sampler
    exhausted = getattr(sampler, "exhausted", None)
    if exhausted is None or not exhausted(study):
        return
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return  # a queued trial goes first
    if EXHAUSTED_ATTR not in study.user_attrs:
        points = len(space_points(sampler.space) or ())
        spent = sum(counts_toward_budget(t) for t in trials)
        said = (f"every configuration of the search space has been measured ({points} in all, after {spent} "
                "trials): the search proposes none again by chance; the rest of its budget reads them again on "
                "purpose, the least read first (the best among equals)")
        study.set_user_attr(EXHAUSTED_ATTR, {"configurations": points, "trials": spent, "line": said})
        observer.note(said)
    again = reread(study, spec, trials, sampler)
    if again is None:
        raise SpaceExhausted
    study.enqueue_trial(again.params, user_attrs={"role": ROLE_SEARCH, REREAD: again.number}, skip_if_exists=False)


def reread(study: optuna.Study, spec: StudySpec, trials: list[FrozenTrial], sampler: Any) -> FrozenTrial | None:
    """The trial whose configuration to read again: of the configurations of the space read whole or in part
    (not failed) or being read (another worker's running trial), the one read fewest times, the best reading
    first among equals; None when there is none."""
    metric = spec.objectives[0].key
    maximize = (spec.objectives[0].direction or "maximize") == "maximize"
    readings: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        key = t.user_attrs.get("config_key")
        if (t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) and isinstance(key, str)
                and t.user_attrs.get("role") in (ROLE_BASELINE, ROLE_SEARCH) and sampler.ran_its_params(t)):
            readings.setdefault(key, []).append(t)

    def rank(key: str) -> tuple[int, float]:
        values = [float(v) for t in readings[key] if isinstance(v := t.user_attrs.get(metric), (int, float))
                  and math.isfinite(v)]
        best = (max(values) if maximize else -min(values)) if values else -math.inf
        return len(readings[key]), -best

    if not readings:
        return None
    return readings[min(readings, key=rank)][0]
