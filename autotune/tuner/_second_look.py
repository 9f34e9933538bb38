"""A second look: a search trial that re-reads a configuration pruned within the noise of the best.

The ``best`` pruner compares one window of a trial with the best configuration's reading, and both carry the
machine's luck of the moment: whole readings of one configuration minutes apart scatter 10-11% on the
2-core VM (benchmarks/machine_noise.py), and a real hf_gpt2 study pruned all 7 search trials against one
lucky baseline reading. A configuration pruned within twice the pruner's margin of the best may have been as
good; with ``pruner.second_looks: N``, before the sampler proposes a new configuration, the loop queues the
nearest such one once more (at most N a study), as a search trial that counts toward the budget. Its second
reading either brings it back (it completes, and the sampler and the confirmation see it) or confirms it;
either way the pair is one more degree of freedom of the study's reading noise, which sets the pruner's
margin (:func:`autotune.objectives.reading_noise`).

Off by default: on replayed drifting landscapes with a known truth, a tenth of the budget spent on second
looks chose no better (benchmarks/drift_decisions.py, 30 seeds of 20 trials: 100% vs 100% within 3% of the
best at 8% noise, 97% vs 100% at 12%; a 40-configuration landscape, 72 seeds: 61 vs 65 within 3%): the
trials they take are not spent on new configurations, and the race already re-measures a pruned near miss
when fewer than ``confirm.top_k`` configurations ran to their end.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.objectives import is_reference
from autotune.spec import StudySpec
from autotune.tuner._roles import ROLE_SEARCH

SECOND_LOOK = "second_look_of"  # user attr: the number of the pruned trial whose configuration this one re-reads
BAND = 2.0  # a pruned reading within this many margins of the best gets a second look


def queue_second_look(study: optuna.Study, spec: StudySpec) -> str | None:
    """Queue the configuration of the pruned search trial that read nearest the best, within :data:`BAND`
    margins of it, when the study has second looks left (``pruner.second_looks``) and nothing else queued; a
    line saying so, or None.

    Single-objective studies whose pruner measures its margin (``best``, ``median``, ``percentile``) only.
    Call under the study lock, before asking for the next trial."""
    margin_of = getattr(study.pruner, "current_margin", None)
    if spec.pruner.second_looks == 0 or margin_of is None or len(spec.objectives) != 1:
        return None  # (the default: no read of the study before every ask)
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return None  # a queued trial (a retry, the warm start) goes first; one queue at a time
    if sum(SECOND_LOOK in t.user_attrs for t in trials) >= spec.pruner.second_looks:
        return None
    metric = spec.objectives[0].key
    maximize = (spec.objectives[0].direction or "maximize") == "maximize"
    best = _best(trials, metric, maximize)
    if best is None:
        return None
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    margin = float(margin_of(finished))
    reads: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("config_key")
        if isinstance(key, str) and t.state != TrialState.FAIL:
            reads[key] = reads.get(key, 0) + 1
    found: tuple[float, FrozenTrial] | None = None
    for t in trials:
        value = _reading(t, metric)
        if (t.state != TrialState.PRUNED or t.user_attrs.get("role") != ROLE_SEARCH or SECOND_LOOK in t.user_attrs
                or value is None or reads.get(str(t.user_attrs.get("config_key")), 0) != 1):
            continue
        behind = (best - value) / abs(best) if maximize else (value - best) / abs(best)
        if behind <= BAND * margin and (found is None or behind < found[0]):
            found = (behind, t)
    if found is None:
        return None
    behind, pruned = found
    attrs: dict[str, Any] = {"role": ROLE_SEARCH, "config": pruned.user_attrs["config"], SECOND_LOOK: pruned.number}
    study.enqueue_trial(pruned.params, user_attrs=attrs, skip_if_exists=False)
    return (f"trial #{pruned.number} was pruned {behind:.0%} behind the best, within twice the pruner's margin "
            f"(±{margin:.0%}, the study's reading noise): its configuration gets a second look")


def _reading(trial: FrozenTrial, metric: str) -> float | None:
    value = trial.user_attrs.get(metric)
    if isinstance(value, (int, float)) and math.isfinite(value) and "config" in trial.user_attrs:
        return float(value)
    return None


def _best(trials: list[FrozenTrial], metric: str, maximize: bool) -> float | None:
    values = [v for t in trials if is_reference(t) and (v := _reading(t, metric)) is not None]
    if not values:
        return None
    best = max(values) if maximize else min(values)
    return best if best != 0 else None
