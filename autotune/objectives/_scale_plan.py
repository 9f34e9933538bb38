"""A study's trials read as a plan for another scale: the best configurations at N nodes x G ranks per node.

Every complete, feasible throughput measurement of the study is a reading of the scale model
(:class:`autotune.scale.ScaleModel`): its trial's nodes (the study's ``launcher.nodes``), world size,
per-rank batch, grad_accum and step time (global batch over samples/s). The readings are grouped into
*families*, the configurations that differ only in batch_size, grad_accum and world_size; each family
with enough distinct scales gets its own model, and its best per-rank batch and accumulation at the scale
asked (among those it measured: a larger per-rank batch than any measured may not fit in memory).
When no family has enough scales on its own, all readings are fitted together (``pooled``: the other
knobs' effect then widens the interval). With a gradient noise scale stored on the trials
(``gradient_noise_scale``) the ranking is by goodput rather than throughput.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.errors import UsageError
from autotune.objectives._choice import measured_groups
from autotune.objectives._confirmation import Group
from autotune.scale import (
    BatchPlan,
    Reach,
    ScaleError,
    ScaleModel,
    StepReading,
    SyncGrowth,
    check_enough,
    plan_scale,
    reach,
)
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec

__all__ = [
    "NOISE_SCALE_ATTR",
    "ScaleOption",
    "ScalePlan",
    "held_global_batch",
    "noise_scale_of",
    "scale_plan",
    "scale_plans",
    "study_readings",
    "study_scale_plan",
]

THROUGHPUT = "throughput_samples_s"
NOISE_SCALE_ATTR = "gradient_noise_scale"  # a trial's measured B_noise (samples): a number or {"value": ...}
SCALE_KNOBS = ("batch_size", "grad_accum", "world_size")
DERIVED = ("global_batch", "lr")


@dataclass(frozen=True)
class ScaleOption:
    """One family's best way to run at the scale: its fastest measured configuration with the planned
    batch_size, grad_accum and world_size (``config``; its lr follows the new global batch by the study's
    lr_scaling), the prediction (``plan``), how far it reaches, and what the fit assumed."""

    config: TrialConfig
    plan: BatchPlan
    reach: Reach
    readings: int
    assumptions: tuple[str, ...] = ()
    pooled: bool = False


@dataclass(frozen=True)
class ScalePlan:
    """The best configurations at ``nodes x ranks_per_node``, best first (``options``)."""

    nodes: int
    ranks_per_node: int
    options: tuple[ScaleOption, ...]
    noise_scale: float | None = None
    skipped: tuple[str, ...] = field(default=())  # families that could not be fitted, and why

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node


def _family(config: Mapping[str, Any]) -> str:
    rest = {k: v for k, v in config.items() if k not in SCALE_KNOBS + DERIVED}
    return repr(sorted(rest.items(), key=lambda kv: kv[0]))


def _readings(groups: Sequence[Group], nodes_per_trial: int) -> list[StepReading]:
    out = []
    for g in groups:
        c = g.config
        for value in g.values:
            if value > 0:
                step = int(c["global_batch"]) / float(value)
                out.append(
                    StepReading(nodes_per_trial, int(c["world_size"]), int(c["batch_size"]), int(c["grad_accum"]), step)
                )
    return out


def study_readings(study: optuna.Study, nodes_per_trial: int = 1) -> list[StepReading]:
    """Every complete, feasible throughput measurement of the study as a reading of the scale model (its
    trials ran on ``nodes_per_trial`` nodes each)."""
    return _readings(measured_groups(study, THROUGHPUT), nodes_per_trial)


def noise_scale_of(study: optuna.Study) -> float | None:
    """The median gradient noise scale stored on the study's complete trials (None: none measured)."""
    values = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raw = t.user_attrs.get(NOISE_SCALE_ATTR)
        value = raw.get("value") if isinstance(raw, Mapping) else raw
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            values.append(float(value))
    return statistics.median(values) if values else None


def scale_plan(
    study: optuna.Study,
    *,
    nodes: int,
    ranks_per_node: int,
    nodes_per_trial: int = 1,
    global_batch: int | None = None,
    top: int = 3,
    bootstrap: int = 100,
    growth: SyncGrowth | None = None,
) -> ScalePlan:
    """The study's best configurations at ``nodes x ranks_per_node`` (see the module docstring); raises
    :class:`autotune.scale.ScaleError` (one line naming what is needed) when no fit can predict that scale.
    ``growth``: the cluster's network profile, how the sync across nodes grows past 2 (none: it does not)."""
    return scale_plans(
        study,
        nodes=nodes,
        ranks_per_node=[ranks_per_node],
        nodes_per_trial=nodes_per_trial,
        global_batch=global_batch,
        top=top,
        bootstrap=bootstrap,
        growth=growth,
    )[0]


def scale_plans(
    study: optuna.Study,
    *,
    nodes: int,
    ranks_per_node: Sequence[int],
    nodes_per_trial: int = 1,
    global_batch: int | None = None,
    top: int = 3,
    bootstrap: int = 100,
    growth: SyncGrowth | None = None,
) -> list[ScalePlan]:
    """:func:`scale_plan` at several ranks per node, each family fitted once."""
    groups = measured_groups(study, THROUGHPUT)
    if not groups:
        raise ScaleError("no trial of the study has completed with a throughput yet; run it first")
    noise = noise_scale_of(study)
    families: dict[str, list[Group]] = {}
    for g in groups:
        families.setdefault(_family(g.config), []).append(g)
    fits = [_Fitted.of(members, nodes_per_trial, bootstrap, growth) for members in families.values()]
    pooled: _Fitted | None = None
    plans = []
    for per_node in ranks_per_node:
        options, skipped = [], []
        for fitted in fits:
            option, why = fitted.option(nodes, per_node, global_batch, noise)
            if option is not None:
                options.append(option)
            elif why:
                skipped.append(why)
        if not options:  # no family alone: every reading together, the other knobs as noise
            pooled = pooled or _Fitted.of(groups, nodes_per_trial, bootstrap, growth, pooled=True)
            option, why = pooled.option(nodes, per_node, global_batch, noise)
            if option is None:
                raise ScaleError(why)
            options.append(option)
        options.sort(key=lambda o: -o.plan.score)
        plans.append(ScalePlan(nodes, per_node, tuple(options[:top]), noise, tuple(skipped)))
    return plans


@dataclass(frozen=True)
class _Fitted:
    """One family's model (or all readings', pooled), or why it cannot be fitted."""

    members: Sequence[Group]
    readings: int
    model: ScaleModel | None
    why: str
    pooled: bool = False

    @classmethod
    def of(cls, members: Sequence[Group], nodes_per_trial: int, bootstrap: int, growth: SyncGrowth | None = None,
           pooled: bool = False) -> _Fitted:
        readings = _readings(members, nodes_per_trial)
        try:
            check_enough(readings)
            model = ScaleModel.fit(readings, bootstrap=bootstrap, growth=growth)
            return cls(members, len(readings), model, "", pooled)
        except ScaleError as e:
            return cls(members, len(readings), None, str(e), pooled)

    def option(
        self, nodes: int, ranks_per_node: int, global_batch: int | None, noise: float | None
    ) -> tuple[ScaleOption | None, str]:
        """The best plan at the scale, or None and why there is none."""
        model, members = self.model, self.members
        if model is None:
            return None, self.why
        try:
            lack = model.needs(nodes, nodes * ranks_per_node)
            if lack is not None:
                raise ScaleError(f"predicting {nodes} x {ranks_per_node} needs {lack}")
            base = int(members[0].config["base_batch_size"])
            plans = plan_scale(
                model,
                nodes,
                ranks_per_node,
                [int(g.config["batch_size"]) for g in members],
                [int(g.config["grad_accum"]) for g in members],
                noise=noise,
                base_batch=base if noise is not None else None,
                global_batch=global_batch,
            )
        except ScaleError as e:
            return None, str(e)
        template = max(members, key=lambda g: g.median).config  # the family's fastest measured configuration
        for best in plans:
            knobs = {k: v for k, v in template.items() if k not in DERIVED}
            knobs.update(batch_size=best.batch_size, grad_accum=best.grad_accum, world_size=nodes * ranks_per_node)
            try:
                config = TrialConfig.create(**knobs)
            except ValueError:  # knobs that cannot go together (static_graph with grad_accum above 1)
                continue
            where = reach(model, nodes, ranks_per_node)
            return ScaleOption(config, best, where, self.readings, tuple(model.assumptions()), self.pooled), ""
        return None, "no planned split is a valid configuration"


def held_global_batch(spec: StudySpec) -> int | None:
    """The global batch the study holds (``constraints.global_batch`` as one integer), else None."""
    held = getattr(spec.constraints, "global_batch", None)
    return held if isinstance(held, int) and not isinstance(held, bool) else None


def study_scale_plan(
    study: optuna.Study, spec: StudySpec, *, nodes: int, ranks_per_node: int, top: int = 3, bootstrap: int = 100,
    growth: SyncGrowth | None = None,
) -> ScalePlan:
    """:func:`scale_plan` for a study of ``spec``: its trials ran on ``launcher.nodes`` nodes each, and a
    global batch it holds is held at the new scale too. Raises :class:`UsageError` (exit 2) naming the study
    file and what is needed when the trials cannot predict that scale."""
    if nodes < 1 or ranks_per_node < 1:
        raise UsageError(f"a scale needs at least 1 node and 1 rank per node (got {nodes} x {ranks_per_node})")
    try:
        return scale_plan(
            study,
            nodes=nodes,
            ranks_per_node=ranks_per_node,
            nodes_per_trial=spec.launcher.nodes,
            global_batch=held_global_batch(spec),
            top=top,
            bootstrap=bootstrap,
            growth=growth,
        )
    except ScaleError as e:
        raise UsageError(f"{spec.source}: {e}") from None
