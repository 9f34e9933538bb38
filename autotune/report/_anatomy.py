"""The step anatomy per configuration: where a step's time went, the median over each configuration's
complete trials, the baseline and the chosen configuration marked (a stacked bar each in the report)."""

from __future__ import annotations

from typing import NamedTuple

import optuna
from optuna.trial import TrialState

from autotune.objectives import choose, median_anatomy, stored_anatomy
from autotune.trial_result import StepAnatomy

# The parts of a step, as the report names them.
PARTS = {
    "data_wait_s": "waiting for data",
    "forward_backward_s": "forward/backward",
    "sync_exposed_s": "exposed sync",
    "optimizer_s": "optimizer",
    "other_s": "other",
}


class AnatomyBar(NamedTuple):
    """One configuration: its median step anatomy (seconds per step, slowest rank) over ``trials``."""

    label: str
    config_key: str
    trials: tuple[int, ...]
    anatomy: StepAnatomy
    baseline: bool
    chosen: bool


def anatomy_data(study: optuna.Study) -> list[AnatomyBar]:
    """A bar per configuration with a measured step anatomy, in the order the study first ran each."""
    groups: dict[str, list[tuple[int, StepAnatomy]]] = {}
    roles: dict[str, set[str]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        anatomy = stored_anatomy(t.user_attrs)
        key = t.user_attrs.get("config_key")
        if anatomy is None or not isinstance(key, str):
            continue
        groups.setdefault(key, []).append((t.number, anatomy))
        roles.setdefault(key, set()).add(str(t.user_attrs.get("role", "search")))
    choice = choose(study)
    chosen = choice.best.config_key if choice.best is not None else None
    bars = []
    for key, measured in groups.items():
        median = median_anatomy([a for _, a in measured])
        if median is None:
            continue
        numbers = tuple(n for n, _ in measured)
        tags = [tag for tag, on in (("baseline", "baseline" in roles[key]), ("chosen", key == chosen)) if on]
        label = f"#{numbers[0]}" + (f" ({', '.join(tags)})" if tags else "")
        bars.append(AnatomyBar(label, key, numbers, median, "baseline" in roles[key], key == chosen))
    return bars
