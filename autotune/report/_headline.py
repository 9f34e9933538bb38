"""The headline of a report: the chosen configuration against the baseline, and the outcome counts."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import optuna
from optuna.trial import TrialState

from autotune.objectives import busy_warning, choose
from autotune.report._records import TrialRecord, finite_float, metric_names, trial_records
from autotune.search_space import SPLIT_KNOBS, BatchSplit
from autotune.spec import stored_global_batches

OUTCOME_ORDER = ("complete", "pruned", "oom", "diverged", "crashed", "timeout", "hang", "interrupted", "running")


def _outcome_rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


class Measured(NamedTuple):
    """One side of the headline: the best configuration or the baseline, as measured."""

    trials: tuple[int, ...]  # the trials whose runs these numbers come from
    config: Mapping[str, Any]
    throughput_samples_s: float | None  # the median over ``trials`` when confirmed
    peak_memory_mb: float | None
    loss: float | None
    spread: float | None  # (max - min) / median of the confirmation runs; None for one run
    half_width: float | None = None  # relative half-width of the median's ~95% interval (None: unknown)


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
    statement: str | None = None  # "best by X% (± Y%) over #N" or "tied within noise with ..." (choose())
    speedup_half_width: float | None = None  # relative: the speed-up is speedup x (1 ± this)
    busy: str | None = None  # the one-line warning naming the trials measured on a busy machine
    race: str | None = None  # how a confirmation race ran ("12 rounds of ~0.5 s blocks, stopped: decided")
    advice: str | None = None  # a race that left its leaders tied: what more rounds would take
    held: str | None = None  # constraints.global_batch: the global batch held and how best and baseline split it




def _group(raw: Any, metric: str, throughput_of: Mapping[int, float]) -> Measured | None:
    """A confirmation Group as measured; ``median`` is of ``metric`` (throughput unless the study said
    otherwise), so throughput is then the median of the group's trials' own throughput."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("trials"), list):
        return None
    trials = tuple(int(t) for t in raw["trials"])
    config = raw.get("config")
    median = finite_float(raw.get("median"))
    if metric == "throughput_samples_s":
        throughput = median
    else:
        known = [throughput_of[t] for t in trials if t in throughput_of]
        throughput = statistics.median(known) if known else None
    return Measured(
        trials=trials,
        config=dict(config) if isinstance(config, Mapping) else {},
        throughput_samples_s=throughput,
        peak_memory_mb=median if metric == "peak_memory_mb" else finite_float(raw.get("peak_memory_mb")),
        loss=median if metric == "loss" else finite_float(raw.get("loss")),
        spread=finite_float(raw.get("spread")) if len(trials) > 1 else None,
        half_width=finite_float(raw.get("half_width")),
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
    speedup = finite_float(raw.get("speedup")) if metric == "throughput_samples_s" else None
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


def _race_line(study: optuna.Study) -> str | None:
    race = study.user_attrs.get("autotune_race")
    if not isinstance(race, Mapping) or not race.get("rounds"):
        return None
    return (f"a race against the baseline: {len(race['rounds'])} rounds of ~{race.get('block_s', 0):g} s blocks, "
            f"{len(race.get('entrants', {}))} configurations alive together, the speed-ups read within each "
            f"round; stopped: {race.get('stopped', 'running')}")


def headline_data(study: optuna.Study) -> Headline:
    """Best against baseline (:func:`_headline`), and the held global batch's line when the study held one."""
    headline = _headline(study)
    return headline._replace(held=held_line(study, headline.best, headline.baseline))


def held_line(study: optuna.Study, best: Measured | None, baseline: Measured | None) -> str | None:
    """``global batch held at 256: the best splits it as 64x2x2, the baseline as 256x1x1 (batch_size x grad_accum x
    world_size), every trial at the same learning rate``; None when the stored study file held none."""
    stored = study.user_attrs.get("autotune")
    held = stored_global_batches(stored.get("spec") if isinstance(stored, Mapping) else None)
    if not held:
        return None
    sides = [f"the {name} splits it as {_split(side.config)}" for name, side in (("best", best), ("baseline", baseline))
             if side is not None and _split(side.config)]
    return (f"global batch held at {', '.join(map(str, held))} (constraints.global_batch)"
            + (": " + ", ".join(sides) + " (batch_size x grad_accum x world_size)" if sides else "")
            + "; every trial at the workload's base_lr (lr_scaling not applied)")


def _split(config: Mapping[str, Any]) -> str | None:
    values = [config.get(name) for name in SPLIT_KNOBS]
    if not all(isinstance(v, int) for v in values):
        return None
    return BatchSplit(*(int(v) for v in values if v is not None)).label


def _headline(study: optuna.Study) -> Headline:
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
                        speedup, len(records), ordered, n_feasible, None, statement=choice.statement(),
                        speedup_half_width=choice.speedup_half_width, busy=busy_warning(study),
                        race=_race_line(study), advice=choice.advice)
    note = None
    raw = study.user_attrs.get("autotune_confirmation")
    if raw is not None:
        confirmed = _from_confirmation(raw, records)
        if not isinstance(confirmed, str):
            best, baseline, speedup = confirmed
            return Headline(study.study_name, "confirmation", best, baseline, speedup, len(records), ordered,
                            n_feasible, None, busy=busy_warning(study))
        note = confirmed
    best_trial = best_record(study, records)
    baselines = [r for r in records if r.role == "baseline"]
    done = [r for r in baselines if r.state == TrialState.COMPLETE]
    best_side = _single([best_trial]) if best_trial else None
    baseline_side = _single(done or baselines)
    speedup = _ratio(best_side.throughput_samples_s if best_side else None,
                     baseline_side.throughput_samples_s if baseline_side else None)
    return Headline(study.study_name, "trials", best_side, baseline_side, speedup, len(records), ordered, n_feasible,
                    note, busy=busy_warning(study))
