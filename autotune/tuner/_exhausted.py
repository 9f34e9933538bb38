"""A small search space, exhausted: every configuration measured, the search stops instead of repeating one.

The study file's sampler proposes no configuration the study has measured while one is left
(:class:`autotune.samplers.Unrepeated`). Once none is left, a search trial could only re-read one by accident;
the search stops there, says so in the run's output, and records it as the study attribute
``autotune_space_exhausted``. What the budget has left goes only to deliberate second readings: the second looks
that ``pruner.second_looks`` allows (autotune/tuner/_second_look.py) and queued trials (a retry, the warm start)
still run, and the confirmation that follows (the race, or re-runs) measures the best again, side by side with
the baseline; nothing else of the budget is spent.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.samplers import space_points
from autotune.spec import StudySpec
from autotune.tuner._observer import Observer
from autotune.tuner._roles import counts_toward_budget
from autotune.tuner._second_look import queue_second_look

EXHAUSTED_ATTR = "autotune_space_exhausted"


class SpaceExhausted(Exception):
    """Every configuration of the search space is measured and nothing is queued: the search stops."""


def before_ask(study: optuna.Study, spec: StudySpec, observer: Observer) -> None:
    """Before the loop asks for a search trial, under the study lock: queue a second look when one is due
    (:func:`queue_second_look`); else, when every configuration is measured and nothing is queued, raise
    :class:`SpaceExhausted` (module docstring)."""
    line = queue_second_look(study, spec)
    if line:
        observer.note(line)
    elif space_exhausted(study, observer):
        raise SpaceExhausted


def space_exhausted(study: optuna.Study, observer: Observer) -> bool:
    """Whether the search stops because every configuration of its space is measured (module docstring); the
    first time in a study, the attribute is written, and each run that stops on it says so."""
    sampler: Any = study.sampler
    exhausted = getattr(sampler, "exhausted", None)
    if exhausted is None or not exhausted(study):
        return False
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return False
    points = len(space_points(sampler.space) or ())
    spent = sum(counts_toward_budget(t) for t in trials)
    line = (f"every configuration of the search space has been measured ({points} in all, after {spent} trials): "
            "the search stops here rather than run one again, and the confirmation re-measures the best")
    if EXHAUSTED_ATTR not in study.user_attrs:
        study.set_user_attr(EXHAUSTED_ATTR, {"configurations": points, "trials": spent, "line": line})
    observer.note(line)
    return True
