"""Which bottleneck binds a configuration, read from its trials' step anatomy, and a study's diagnosis: what
binds the baseline and the chosen configuration, and which knobs moved it.

A step's parts (:class:`autotune.trial_result.StepAnatomy`) map to the three bottlenecks autotune's knobs act
on: the input pipeline (``data_wait_s``), the computation (``forward_backward_s`` and ``optimizer_s``) and the
gradient synchronisation (``sync_exposed_s``); the largest of them binds. Every knob of the knob table acts
on one or more of them (:data:`KNOB_BOTTLENECKS`, the table's ``bottlenecks=``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.knobs import COMPUTE, INPUT, KNOBS, SYNC
from autotune.trial_result import StepAnatomy, parse_record

OTHER = "other"

# The parts of a step each bottleneck is made of.
BOTTLENECK_PARTS: dict[str, tuple[str, ...]] = {
    INPUT: ("data_wait_s",),
    COMPUTE: ("forward_backward_s", "optimizer_s"),
    SYNC: ("sync_exposed_s", "pipeline_bubble_s", "tp_comm_exposed_s"),  # waiting on other ranks
    OTHER: ("other_s",),
}

# The bottlenecks each knob acts on (the table's ``bottlenecks=``).
KNOB_BOTTLENECKS: dict[str, tuple[str, ...]] = {name: knob.bottlenecks for name, knob in KNOBS.items()}


def bottleneck_shares(anatomy: StepAnatomy) -> dict[str, float]:
    """Each bottleneck's share of the step (0-1)."""
    step = anatomy.step_s
    if step <= 0:
        return dict.fromkeys(BOTTLENECK_PARTS, 0.0)
    return {
        name: sum(getattr(anatomy, part) or 0.0 for part in parts) / step for name, parts in BOTTLENECK_PARTS.items()
    }


def binding(anatomy: StepAnatomy) -> str:
    """The bottleneck with the largest share of the step."""
    shares = bottleneck_shares(anatomy)
    return max(shares, key=lambda name: shares[name])


__all__ = ["KNOB_BOTTLENECKS", "Diagnosis", "binding", "bottleneck_shares", "diagnose", "group_anatomy",
           "median_anatomy", "stored_anatomy", "study_diagnosis"]


def median_anatomy(anatomies: Sequence[StepAnatomy]) -> StepAnatomy | None:
    """Each part's median over ``anatomies`` (a configuration's trials); None when empty."""
    if not anatomies:
        return None
    syncs = [a.sync_exposed_s for a in anatomies]

    def optional(part: str) -> float | None:  # a part some trials do not have (no pipeline, no tp): None
        values = [getattr(a, part) for a in anatomies]
        return None if any(v is None for v in values) else statistics.median(values)

    return StepAnatomy(
        data_wait_s=statistics.median(a.data_wait_s for a in anatomies),
        forward_backward_s=statistics.median(a.forward_backward_s for a in anatomies),
        sync_exposed_s=None if any(s is None for s in syncs) else statistics.median(s or 0.0 for s in syncs),
        optimizer_s=statistics.median(a.optimizer_s for a in anatomies),
        other_s=statistics.median(a.other_s for a in anatomies),
        data_wait_share=statistics.median(a.data_wait_share for a in anatomies),
        pipeline_bubble_s=optional("pipeline_bubble_s"),
        tp_comm_exposed_s=optional("tp_comm_exposed_s"),
    )


def stored_anatomy(attrs: Mapping[str, Any], key: str = "step_anatomy") -> StepAnatomy | None:
    """A trial's stored step anatomy (its user attributes' ``step_anatomy``; None when it has none)."""
    data = attrs.get(key)
    return parse_record(StepAnatomy, data, key) if isinstance(data, dict) else None


def group_anatomy(study: Any, trials: Iterable[int]) -> StepAnatomy | None:
    """A configuration's step anatomy: each part's median over its ``trials`` (numbers) that measured one."""
    wanted = set(trials)
    found = [stored_anatomy(t.user_attrs) for t in study.get_trials(deepcopy=False) if t.number in wanted]
    return median_anatomy([a for a in found if a is not None])


@dataclass(frozen=True)
class Diagnosis:
    """Which bottleneck binds the baseline and the chosen configuration, and the knobs that moved it."""

    baseline: StepAnatomy
    chosen: StepAnatomy
    baseline_binds: str
    chosen_binds: str
    moved_by: tuple[str, ...]  # changed knobs that act on the baseline's bottleneck
    changes: Mapping[str, tuple[Any, Any]]  # every changed knob: (baseline's value, chosen value)
    crowded: str = ""  # why the chosen configuration still waits for data, when its processes fill the cores

    def line(self) -> str:
        """One line: "the baseline spent 61% of a step waiting for data; the chosen configuration 4% ..."."""
        base, chosen = bottleneck_shares(self.baseline), bottleneck_shares(self.chosen)
        text = (
            f"step anatomy: the baseline spent {self.baseline.data_wait_share:.0%} of a step waiting for data; the "
            f"chosen configuration {self.chosen.data_wait_share:.0%}. The baseline is bound by its "
            f"{self.baseline_binds} ({base[self.baseline_binds]:.0%} of a step), the chosen configuration by its "
            f"{self.chosen_binds} ({chosen[self.chosen_binds]:.0%})"
        )
        if self.moved_by:
            moves = ", ".join(f"{k} {_show(self.changes[k][0])}->{_show(self.changes[k][1])}" for k in self.moved_by)
            text = f"{text}; moved by {moves}"
        elif self.changes:
            text = f"{text}; no changed knob acts on the {self.baseline_binds}"
        else:
            text = f"{text}; the same configuration"
        return f"{text}. {self.crowded}" if self.crowded else text


#: The chosen configuration's data wait, as a share of its step, from which the diagnosis says why it still waits.
STILL_WAITING = 0.2


def crowded_cores(chosen: StepAnatomy, config: Mapping[str, Any], cores: int | None, nodes: int = 1) -> str:
    """Why the chosen configuration still waits for data (>= :data:`STILL_WAITING` of a step) when its ranks and
    their DataLoader workers are at least as many processes as a node has cores: loading then competes with the
    ranks for the same cores, and more workers cannot feed them faster. Empty otherwise."""
    workers, ranks = int(config.get("num_workers") or 0), max(1, int(config.get("world_size") or 1) // nodes)
    if cores is None or chosen.data_wait_share < STILL_WAITING or ranks * (1 + workers) < cores:
        return ""
    return (
        f"It still waits {chosen.data_wait_share:.0%} of a step with {ranks} rank{'s' * (ranks > 1)} and "
        f"{ranks * workers} DataLoader worker{'s' * (ranks * workers != 1)} on {cores} cores{' a node' * (nodes > 1)}: "
        "loading and training share every core, so more workers cannot feed it faster here; more cores or cheaper "
        "loading would"
    )


def diagnose(
    baseline: StepAnatomy | None,
    chosen: StepAnatomy | None,
    baseline_config: Mapping[str, Any],
    chosen_config: Mapping[str, Any],
    cores: int | None = None,
    nodes: int = 1,
) -> Diagnosis | None:
    """The study's diagnosis; None when either configuration has no step anatomy. ``cores``: a node's CPU cores
    (the study's machine), ``nodes`` a trial's nodes."""
    if baseline is None or chosen is None:
        return None
    changes = {
        k: (baseline_config.get(k), chosen_config.get(k))
        for k in KNOB_BOTTLENECKS
        if baseline_config.get(k) != chosen_config.get(k)
    }
    binds = binding(baseline)
    moved = tuple(k for k in changes if binds in KNOB_BOTTLENECKS[k])
    crowded = crowded_cores(chosen, chosen_config, cores, nodes)
    return Diagnosis(baseline, chosen, binds, binding(chosen), moved, changes, crowded)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def study_diagnosis(study: Any, baseline: Any, chosen: Any) -> Diagnosis | None:
    """The diagnosis of a study's choice: ``baseline`` and ``chosen`` are its groups (:class:`Group`; None:
    not measured)."""
    if baseline is None or chosen is None:
        return None
    facts = study.user_attrs.get("autotune") or {}
    cores = (facts.get("machine") or {}).get("cpus")
    nodes = int(((facts.get("spec") or {}).get("launcher") or {}).get("nodes") or 1)
    return diagnose(group_anatomy(study, baseline.trials), group_anatomy(study, chosen.trials), baseline.config,
                    chosen.config, cores=cores if isinstance(cores, int) else None, nodes=nodes)
