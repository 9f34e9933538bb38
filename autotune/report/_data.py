"""The data of every report view: pure functions of an Optuna study (and the StudySpec where needed).

Each function returns a NamedTuple that a figure in ``_figures.py`` draws and a test checks; nothing
here imports plotly. The input is what docs/storage.md says a study stores.
"""

from __future__ import annotations

import datetime
import math
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from autotune.knobs import KNOBS
from autotune.objectives import choose
from autotune.report._records import (
    METRIC_UNITS,
    TrialRecord,
    metric_names,
    objective_directions,
    searched_knobs,
    trial_records,
)
from autotune.spec import StudySpec

__all__ = [
    "BatchData",
    "BatchPoint",
    "BatchSeries",
    "Curve",
    "FeasibilityData",
    "FeasibilityRow",
    "Headline",
    "HistoryData",
    "HistoryPoint",
    "ImportanceData",
    "IntermediateData",
    "Measured",
    "ParallelAxis",
    "ParallelData",
    "ParallelLine",
    "ParetoData",
    "ParetoPoint",
    "ReportData",
    "TableColumn",
    "TimelineBar",
    "TrialsTable",
    "feasibility_data",
    "headline_data",
    "history_data",
    "importance_data",
    "intermediate_data",
    "memory_budget",
    "memory_vs_batch_data",
    "parallel_data",
    "pareto_data",
    "report_data",
    "throughput_vs_batch_data",
    "timeline_data",
    "trials_table_data",
]

OUTCOME_ORDER = ("complete", "pruned", "oom", "diverged", "crashed", "timeout", "hang", "interrupted", "running")


def _outcome_rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


# --------------------------------------------------------------------------------------------- headline
class Measured(NamedTuple):
    """One side of the headline: the best configuration or the baseline, as measured."""

    trials: tuple[int, ...]  # the trials whose runs these numbers come from
    config: Mapping[str, Any]
    throughput_samples_s: float | None  # the median over ``trials`` when confirmed
    peak_memory_mb: float | None
    loss: float | None
    spread: float | None  # (max - min) / median of the confirmation runs; None for one run


class Headline(NamedTuple):
    """Best against baseline, and how the study's trials ended."""

    study_name: str
    source: Literal["confirmation", "trials"]  # where best/baseline come from
    best: Measured | None
    baseline: Measured | None
    speedup: float | None  # best throughput / baseline throughput
    n_trials: int
    outcomes: dict[str, int]  # outcome -> number of trials, in OUTCOME_ORDER
    n_feasible: int
    note: str | None  # e.g. why the confirmation attribute was not used


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _group(raw: Any, metric: str, throughput_of: Mapping[int, float]) -> Measured | None:
    """A confirmation Group as measured; ``median`` is of ``metric`` (throughput unless the study said
    otherwise), so throughput is then the median of the group's trials' own throughput."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("trials"), list):
        return None
    trials = tuple(int(t) for t in raw["trials"])
    config = raw.get("config")
    median = _float(raw.get("median"))
    if metric == "throughput_samples_s":
        throughput = median
    else:
        known = [throughput_of[t] for t in trials if t in throughput_of]
        throughput = statistics.median(known) if known else None
    return Measured(
        trials=trials,
        config=dict(config) if isinstance(config, Mapping) else {},
        throughput_samples_s=throughput,
        peak_memory_mb=median if metric == "peak_memory_mb" else _float(raw.get("peak_memory_mb")),
        loss=median if metric == "loss" else _float(raw.get("loss")),
        spread=_float(raw.get("spread")) if len(trials) > 1 else None,
    )


def _from_confirmation(
    raw: Any, records: Sequence[TrialRecord]
) -> tuple[Measured, Measured | None, float | None] | str:
    """(best, baseline, speedup) from ``autotune_confirmation``, or why it cannot be used."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("groups"), list):
        return "the autotune_confirmation attribute is malformed (no groups); using single trials"
    metric = str(raw.get("metric") or "throughput_samples_s")
    throughput_of = {r.number: r.throughput_samples_s for r in records if r.throughput_samples_s is not None}
    groups = raw["groups"]
    best = next((g for g in groups if isinstance(g, Mapping) and g.get("config_key") == raw.get("best_config_key")),
                None)
    if best is None:
        best = next((g for g in groups if isinstance(g, Mapping) and raw.get("best_trial") in g.get("trials", [])),
                    None)
    best_side = _group(best, metric, throughput_of)
    if best_side is None:
        return "the autotune_confirmation attribute names no best group; using single trials"
    baseline = _group(raw.get("baseline"), metric, throughput_of)
    # The stored speed-up is of the confirmed metric; the headline's is of throughput.
    speedup = _float(raw.get("speedup")) if metric == "throughput_samples_s" else None
    if speedup is None and baseline is not None:
        speedup = _ratio(best_side.throughput_samples_s, baseline.throughput_samples_s)
    return best_side, baseline, speedup


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def _single(records: Sequence[TrialRecord]) -> Measured | None:
    """One measurement from one or more runs of the same configuration (median throughput)."""
    if not records:
        return None
    throughputs = [r.throughput_samples_s for r in records if r.throughput_samples_s is not None]
    memories = [r.peak_memory_mb for r in records if r.peak_memory_mb is not None]
    losses = [r.loss for r in records if r.loss is not None]
    median = statistics.median(throughputs) if throughputs else None
    spread = (max(throughputs) - min(throughputs)) / median if len(throughputs) > 1 and median else None
    return Measured(
        trials=tuple(r.number for r in records),
        config=records[0].config,
        throughput_samples_s=median,
        peak_memory_mb=max(memories) if memories else None,
        loss=statistics.median(losses) if losses else None,
        spread=spread,
    )


def best_record(study: optuna.Study, records: Sequence[TrialRecord] | None = None) -> TrialRecord | None:
    """The best feasible COMPLETE trial: by the objective (one objective), else by throughput.

    With several objectives the trial of highest throughput among the feasible ones is on the Pareto
    front whenever throughput is an objective; it is what the headline's speedup is about.
    """
    records = trial_records(study) if records is None else records
    candidates = [r for r in records if r.feasible and r.values is not None]
    if not candidates:
        return None
    names = metric_names(study)
    if len(study.directions) == 1:
        sign = 1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1
        return max(candidates, key=lambda r: (sign * r.values[0] if r.values else -math.inf, -r.number))
    if "throughput_samples_s" in names:
        index = names.index("throughput_samples_s")
        return max(candidates, key=lambda r: (r.values[index] if r.values else -math.inf, -r.number))
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1
    return max(candidates, key=lambda r: (sign * r.values[0] if r.values else -math.inf, -r.number))


def headline_data(study: optuna.Study) -> Headline:
    """Best against baseline.

    An autotune study (it has the ``autotune`` attribute) shows the study's one choice,
    :func:`autotune.objectives.choose`, as the CLI summary, ``autotune best`` and ``calibrate()`` do. Any
    other study: from ``autotune_confirmation`` when present, else best is :func:`best_record` and
    baseline the median of the COMPLETE ``role: baseline`` trials (any baseline trial when none completed).
    """
    records = trial_records(study)
    outcomes = Counter(r.outcome for r in records)
    ordered = dict(sorted(outcomes.items(), key=lambda kv: (_outcome_rank(kv[0]), kv[0])))
    n_feasible = sum(1 for r in records if r.feasible)
    if isinstance(study.user_attrs.get("autotune"), Mapping):
        choice = choose(study)
        metric = metric_names(study)[0]
        throughput_of = {r.number: r.throughput_samples_s for r in records if r.throughput_samples_s is not None}
        best_side = _group(choice.best.to_json(), metric, throughput_of) if choice.best else None
        baseline_side = _group(choice.baseline.to_json(), metric, throughput_of) if choice.baseline else None
        speedup = choice.speedup
        if speedup is None and best_side is not None and baseline_side is not None:
            speedup = _ratio(best_side.throughput_samples_s, baseline_side.throughput_samples_s)
        return Headline(study.study_name, "confirmation" if choice.confirmed else "trials", best_side, baseline_side,
                        speedup, len(records), ordered, n_feasible, None)
    note = None
    raw = study.user_attrs.get("autotune_confirmation")
    if raw is not None:
        confirmed = _from_confirmation(raw, records)
        if not isinstance(confirmed, str):
            best, baseline, speedup = confirmed
            return Headline(study.study_name, "confirmation", best, baseline, speedup, len(records), ordered,
                            n_feasible, None)
        note = confirmed
    best_trial = best_record(study, records)
    baselines = [r for r in records if r.role == "baseline"]
    done = [r for r in baselines if r.state == TrialState.COMPLETE]
    best_side = _single([best_trial]) if best_trial else None
    baseline_side = _single(done or baselines)
    speedup = _ratio(best_side.throughput_samples_s if best_side else None,
                     baseline_side.throughput_samples_s if baseline_side else None)
    return Headline(study.study_name, "trials", best_side, baseline_side, speedup, len(records), ordered, n_feasible,
                    note)


# --------------------------------------------------------------------------------------------- history
class HistoryPoint(NamedTuple):
    number: int
    value: float
    kind: Literal["feasible", "infeasible", "pruned"]
    outcome: str
    reason: str


class HistoryData(NamedTuple):
    """Objective value per trial (single objective) and the best feasible value so far."""

    metric: str
    direction: str
    points: list[HistoryPoint]
    best_so_far: list[tuple[int, float]]  # (trial number, best feasible value up to it)


def history_data(study: optuna.Study) -> HistoryData:
    """The optimization history of a single-objective study (COMPLETE and PRUNED trials with a value)."""
    if len(study.directions) != 1:
        raise ValueError("history_data needs a single-objective study; use pareto_data")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    points: list[HistoryPoint] = []
    best: list[tuple[int, float]] = []
    current: float | None = None
    for r in trial_records(study):
        if r.values is None or r.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        value = r.values[0]
        kind: Literal["feasible", "infeasible", "pruned"]
        kind = "pruned" if r.state == TrialState.PRUNED else "feasible" if r.feasible else "infeasible"
        points.append(HistoryPoint(r.number, value, kind, r.outcome, r.reason))
        if kind == "feasible":
            current = value if current is None else (max if maximize else min)(current, value)
        if current is not None:
            best.append((r.number, current))
    return HistoryData(metric_names(study)[0], objective_directions(study)[0], points, best)


# --------------------------------------------------------------------------------------------- pareto
class ParetoPoint(NamedTuple):
    number: int
    values: tuple[float, ...]
    feasible: bool
    on_front: bool
    role: str


class ParetoData(NamedTuple):
    """Every COMPLETE trial in objective space; ``on_front`` marks the feasible non-dominated ones."""

    metrics: list[str]
    directions: list[str]
    points: list[ParetoPoint]


def _dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[int]) -> bool:
    better_or_equal = all(s * x >= s * y for x, y, s in zip(a, b, signs, strict=True))
    return better_or_equal and any(s * x > s * y for x, y, s in zip(a, b, signs, strict=True))


def pareto_data(study: optuna.Study) -> ParetoData:
    """The Pareto front of a multi-objective study, over feasible COMPLETE trials."""
    directions = objective_directions(study)
    signs = [1 if d == "maximize" else -1 for d in directions]
    done = [(r, r.values) for r in trial_records(study) if r.state == TrialState.COMPLETE and r.values is not None]
    feasible = [values for r, values in done if r.feasible]
    points = []
    for r, values in done:
        on_front = bool(r.feasible) and not any(_dominates(other, values, signs) for other in feasible)
        points.append(ParetoPoint(r.number, values, bool(r.feasible), on_front, r.role))
    return ParetoData(metric_names(study), directions, points)


# --------------------------------------------------------------------------------------------- batch size
class BatchPoint(NamedTuple):
    number: int
    batch_size: int
    value: float
    outcome: str
    feasible: bool | None
    role: str


class BatchSeries(NamedTuple):
    """Trials of one AMP mode and world size."""

    amp: str
    world_size: int
    points: list[BatchPoint]

    @property
    def label(self) -> str:
        return f"amp {self.amp}, {self.world_size} rank{'s' if self.world_size != 1 else ''}"


class BatchData(NamedTuple):
    metric: str
    series: list[BatchSeries]
    budget: float | None  # the memory budget (MB) for the memory view


def _batch_data(study: optuna.Study, metric: str, budget: float | None) -> BatchData:
    groups: dict[tuple[str, int], list[BatchPoint]] = {}
    for r in trial_records(study):
        value = r.metric(metric)
        batch = r.knob("batch_size")
        if value is None or not isinstance(batch, int):
            continue
        amp = str(r.knob("amp") or KNOBS["amp"].default)
        world = r.knob("world_size")
        world = world if isinstance(world, int) else KNOBS["world_size"].default
        groups.setdefault((amp, world), []).append(BatchPoint(r.number, batch, value, r.outcome, r.feasible, r.role))
    series = [BatchSeries(amp, world, points) for (amp, world), points in sorted(groups.items())]
    return BatchData(metric, series, budget)


def throughput_vs_batch_data(study: optuna.Study) -> BatchData:
    """Measured throughput against per-rank batch size, grouped by AMP mode and world size.

    Every trial that measured a throughput is included, pruned and infeasible ones with their partial
    numbers (their ``outcome`` says so).
    """
    return _batch_data(study, "throughput_samples_s", None)


def memory_budget(study: optuna.Study, spec: StudySpec | None = None) -> float | None:
    """``constraints.max_memory_mb``: from the spec, else from the study file stored in the study."""
    if spec is not None:
        return spec.constraints.max_memory_mb
    stored = study.user_attrs.get("autotune")
    if isinstance(stored, Mapping):
        constraints = (stored.get("spec") or {}).get("constraints") or {}
        return _float(constraints.get("max_memory_mb"))
    return None


def memory_vs_batch_data(study: optuna.Study, spec: StudySpec | None = None) -> BatchData:
    """Peak memory against per-rank batch size, grouped like throughput, with the memory budget."""
    return _batch_data(study, "peak_memory_mb", memory_budget(study, spec))


# --------------------------------------------------------------------------------------------- importance
class ImportanceData(NamedTuple):
    """Parameter importances per objective (fractions summing to 1), or a note saying why there are none."""

    importances: list[tuple[str, dict[str, float]]]  # (metric, {param: importance})
    note: str | None


def importance_data(study: optuna.Study) -> ImportanceData:
    """optuna.importance over COMPLETE trials; needs at least 2 of them and 1 searched parameter."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = {name for t in complete for name in t.params}
    if len(complete) < 2:
        return ImportanceData([], f"parameter importances need at least 2 complete trials (this study has "
                                  f"{len(complete)})")
    if not params:
        return ImportanceData([], "parameter importances need a searched parameter; every knob is fixed")
    out: list[tuple[str, dict[str, float]]] = []
    single = len(study.directions) == 1
    cautions: list[str] = []
    for index, (metric, direction) in enumerate(zip(metric_names(study), objective_directions(study), strict=True)):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                target = None if single else _objective(index, direction)
                values = optuna.importance.get_param_importances(study, target=target)
        except (ValueError, RuntimeError, ZeroDivisionError) as e:
            return ImportanceData(out, f"parameter importances could not be computed: {e}")
        out.append((metric, dict(values)))
        # PED-ANOVA's caveats (few trials in a regime) belong beside the figure, not on the terminal. Its
        # warning that it rates LOW target values is answered by _objective, which negates maximized ones.
        for w in caught:
            text = str(w.message).strip()
            if "low `target` values" not in text and text not in cautions:
                cautions.append(text)
    return ImportanceData(out, "; ".join(cautions) if cautions else None)


def _objective(index: int, direction: str) -> Callable[[FrozenTrial], float]:
    """The objective as a value to minimize: optuna.importance's default evaluator (PED-ANOVA) rates
    parameters by how they reach LOW target values, so a maximized objective is negated."""
    sign = -1.0 if direction == "maximize" else 1.0

    def target(trial: FrozenTrial) -> float:
        return sign * trial.values[index]

    return target


# --------------------------------------------------------------------------------------------- parallel
class ParallelAxis(NamedTuple):
    name: str
    categories: tuple[str, ...] | None  # categorical axis: labels bottom to top
    low: float  # numeric axis: the range shown (log10 of it when ``log``)
    high: float
    log: bool

    def position(self, value: Any) -> float | None:
        """Where a value sits on the axis, 0 (bottom) to 1 (top); None for a missing value."""
        if value is None:
            return None
        if self.categories is not None:
            label = _label(value)
            if label not in self.categories:
                return None
            n = len(self.categories)
            return self.categories.index(label) / (n - 1) if n > 1 else 0.5
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        x = math.log10(value) if self.log else float(value)
        return (x - self.low) / (self.high - self.low) if self.high > self.low else 0.5


class ParallelLine(NamedTuple):
    number: int
    outcome: str
    raw: tuple[Any, ...]  # one value per axis
    positions: tuple[float | None, ...]
    color: float | None  # the first objective's measured metric


class ParallelData(NamedTuple):
    """Searched knobs and measured objective metrics of every trial that measured something."""

    axes: list[ParallelAxis]
    lines: list[ParallelLine]
    color_metric: str


def _label(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _axis(name: str, values: Sequence[Any], distribution: BaseDistribution | None = None) -> ParallelAxis:
    """An axis spanning the knob's search range (its Optuna distribution), else the values seen."""
    if isinstance(distribution, CategoricalDistribution):
        return ParallelAxis(name, tuple(_label(c) for c in distribution.choices), 0.0, 1.0, False)
    if isinstance(distribution, (IntDistribution, FloatDistribution)):
        low, high = distribution.low, distribution.high
        seen = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        low, high = min([low, *seen]), max([high, *seen])  # a baseline may lie outside the range
        if distribution.log and low > 0:
            return ParallelAxis(name, None, math.log10(low), math.log10(high), True)
        return ParallelAxis(name, None, float(low), float(high), False)
    present = [v for v in values if v is not None]
    numeric = [v for v in present if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not present or len(numeric) != len(present):
        labels = sorted({_label(v) for v in present})
        return ParallelAxis(name, tuple(labels), 0.0, 1.0, False)
    low, high = min(numeric), max(numeric)
    if low > 0 and high / low >= 16:
        return ParallelAxis(name, None, math.log10(low), math.log10(high), True)
    return ParallelAxis(name, None, float(low), float(high), False)


def parallel_data(study: optuna.Study) -> ParallelData:
    """One line per trial across the searched knobs and the objectives' measured metrics."""
    trials = study.get_trials(deepcopy=False)
    distributions: dict[str, BaseDistribution] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            distributions.setdefault(name, dist)
    all_records = trial_records(study)
    records = [r for r in all_records if any(r.metric(m) is not None for m in metric_names(study))]
    knobs = searched_knobs(all_records)
    metrics = [m for m in metric_names(study) if m in METRIC_UNITS]
    rows = [tuple([r.knob(k) for k in knobs] + [r.metric(m) for m in metrics]) for r in records]
    axes = [_axis(name, [row[i] for row in rows], distributions.get(name)) for i, name in enumerate(knobs)]
    axes += [_axis(name, [row[len(knobs) + i] for row in rows]) for i, name in enumerate(metrics)]
    color_metric = metrics[0] if metrics else ""
    lines = [
        ParallelLine(r.number, r.outcome, row, tuple(axis.position(v) for axis, v in zip(axes, row, strict=True)),
                     r.metric(color_metric) if color_metric else None)
        for r, row in zip(records, rows, strict=True)
    ]
    return ParallelData(axes, lines, color_metric)


# --------------------------------------------------------------------------------------------- intermediate
class Curve(NamedTuple):
    number: int
    outcome: str
    reason: str
    points: tuple[tuple[int, float], ...]  # (step, value)


class IntermediateData(NamedTuple):
    """What the pruner saw per trial: Optuna intermediate values, else the stored reporting windows."""

    metric: str
    source: Literal["intermediate values", "windows"]
    curves: list[Curve]


def intermediate_data(study: optuna.Study) -> IntermediateData:
    """Per-trial curves. Single-objective studies report intermediate values; multi-objective ones do
    not (Optuna's pruners cannot use them), so their windows' throughput is shown instead."""
    records = trial_records(study)
    if any(r.intermediate for r in records):
        curves = [Curve(r.number, r.outcome, r.reason, r.intermediate) for r in records if r.intermediate]
        return IntermediateData(metric_names(study)[0], "intermediate values", curves)
    curves = [
        Curve(r.number, r.outcome, r.reason,
              tuple((w.step, w.throughput_samples_s) for w in r.windows if w.throughput_samples_s is not None))
        for r in records
        if r.windows
    ]
    return IntermediateData("throughput_samples_s", "windows", [c for c in curves if c.points])


# --------------------------------------------------------------------------------------------- timeline
class TimelineBar(NamedTuple):
    number: int
    start: datetime.datetime
    end: datetime.datetime
    running: bool
    outcome: str
    reason: str
    role: str


def timeline_data(study: optuna.Study, now: datetime.datetime | None = None) -> list[TimelineBar]:
    """Start and end of every trial that started, whatever its state; running trials end at ``now``."""
    bars = []
    for r in trial_records(study):
        if r.start is None:
            continue
        running = r.end is None
        end = r.end or now or datetime.datetime.now()
        bars.append(TimelineBar(r.number, r.start, max(end, r.start), running, r.outcome, r.reason, r.role))
    return bars


# --------------------------------------------------------------------------------------------- feasibility
class FeasibilityRow(NamedTuple):
    number: int
    outcome: str
    constraints: dict[str, float]  # name -> value; feasible when <= 0
    feasible: bool
    peak_memory_mb: float | None


class FeasibilityData(NamedTuple):
    """The constraints of every COMPLETE trial (``memory``, ``diverged``), which optuna-dashboard hides."""

    names: list[str]
    rows: list[FeasibilityRow]
    budget: float | None


def feasibility_data(study: optuna.Study, spec: StudySpec | None = None) -> FeasibilityData:
    """Constraint values per COMPLETE trial; ``memory`` and ``diverged`` first, any others after."""
    rows = []
    names: list[str] = []
    for r in trial_records(study):
        if r.state != TrialState.COMPLETE:
            continue
        for name in r.constraints:
            if name not in names:
                names.append(name)
        rows.append(FeasibilityRow(r.number, r.outcome, dict(r.constraints), bool(r.feasible), r.peak_memory_mb))
    known = [n for n in ("memory", "diverged") if n in names]
    return FeasibilityData(known + [n for n in names if n not in known], rows, memory_budget(study, spec))


# --------------------------------------------------------------------------------------------- table
class TableColumn(NamedTuple):
    key: str
    label: str
    numeric: bool


class TrialsTable(NamedTuple):
    """Every trial, one row each: pruned, failed, infeasible and running ones included."""

    columns: list[TableColumn]
    rows: list[tuple[Any, ...]]  # raw values in column order; None for missing


_METRIC_COLUMNS = [
    TableColumn("throughput_samples_s", "throughput (samples/s)", True),
    TableColumn("peak_memory_mb", "peak memory (MB)", True),
    TableColumn("loss", "loss", True),
    TableColumn("time_to_first_step_s", "first step (s)", True),
    TableColumn("threads_resolved", "threads (ran with)", True),
    TableColumn("compile_s", "compile (s)", True),
    TableColumn("wall_s", "wall (s)", True),
    TableColumn("steps", "steps", True),
]


def trials_table_data(study: optuna.Study) -> TrialsTable:
    """Number, role, outcome, feasibility, reason, the knobs that are searched or differ, metrics."""
    records = trial_records(study)
    searched = set(searched_knobs(records))
    knobs = [
        k for k in KNOBS
        if k in searched or len({_label(r.knob(k)) for r in records if r.knob(k) is not None}) > 1
    ]
    knobs += sorted(k for k in searched if k.startswith("env."))  # searched env: variables
    # threads and compile time only where trials recorded them (studies from before those knobs did not)
    metric_columns = [
        c for c in _METRIC_COLUMNS
        if c.key not in ("threads_resolved", "compile_s") or any(getattr(r, c.key) is not None for r in records)
    ]
    columns = [
        TableColumn("number", "#", True),
        TableColumn("role", "role", False),
        TableColumn("outcome", "outcome", False),
        TableColumn("feasible", "feasible", False),
        TableColumn("reason", "reason", False),
        *[TableColumn(k, k, k in KNOBS and KNOBS[k].type is int and not KNOBS[k].words) for k in knobs],
        TableColumn("global_batch", "global batch", True),
        *metric_columns,
    ]
    rows = []
    for r in records:
        feasible = None if r.feasible is None else ("yes" if r.feasible else "no")
        cells: list[Any] = [r.number, r.role, r.outcome, feasible, r.reason]
        cells += [r.knob(k) for k in knobs]
        cells.append(r.config.get("global_batch"))
        cells += [getattr(r, c.key) for c in metric_columns]
        rows.append(tuple(cells))
    return TrialsTable(columns, rows)


# --------------------------------------------------------------------------------------------- all of it
class ReportData(NamedTuple):
    """Everything the report shows, computed once."""

    study_name: str
    metrics: list[str]
    directions: list[str]
    headline: Headline
    history: HistoryData | None  # single objective
    pareto: ParetoData | None  # several objectives
    throughput: BatchData
    memory: BatchData
    importance: ImportanceData
    parallel: ParallelData
    intermediate: IntermediateData
    timeline: list[TimelineBar]
    feasibility: FeasibilityData
    table: TrialsTable
    generated: datetime.datetime


def report_data(study: optuna.Study, spec: StudySpec | None = None, now: datetime.datetime | None = None) -> ReportData:
    """Every view's data for ``study``; ``spec`` supplies the memory budget (else the stored study file)."""
    now = now or datetime.datetime.now()
    single = len(study.directions) == 1
    return ReportData(
        study_name=study.study_name,
        metrics=metric_names(study),
        directions=objective_directions(study),
        headline=headline_data(study),
        history=history_data(study) if single else None,
        pareto=None if single else pareto_data(study),
        throughput=throughput_vs_batch_data(study),
        memory=memory_vs_batch_data(study, spec),
        importance=importance_data(study),
        parallel=parallel_data(study),
        intermediate=intermediate_data(study),
        timeline=timeline_data(study, now),
        feasibility=feasibility_data(study, spec),
        table=trials_table_data(study),
        generated=now,
    )
