"""Reading a stored study back: `autotune best` and `autotune status`."""

from __future__ import annotations

import time
from typing import Any

from optuna.trial import TrialState
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli._run_summary import noise_lines
from autotune.cli._style import OUTCOME_STYLE, fmt
from autotune.errors import UsageError
from autotune.objectives import Pooled, compile_payback, complete_trials, half_width, reading_noise
from autotune.search_space import BatchSplit, mesh_label
from autotune.spec import StudySpec
from autotune.tuner import (
    FINGERPRINT_ATTR,
    TuneSummary,
    describe_fingerprint,
    gone_from_here,
    read_study,
    summarize,
    warm_start_line,
)
from autotune.workload_check import load_spec


def load_summary(study_file: str, storage: str | None = None) -> tuple[StudySpec, TuneSummary]:
    overrides = [f"storage={storage}"] if storage else []
    spec = load_spec(study_file, overrides=overrides, check_workload=False)
    study = read_study(spec)  # reading a finished study imports no workload
    return spec, summarize(study, spec)


def best_payload(study_file: str, storage: str | None = None) -> dict[str, Any]:
    """The best configuration as a plain mapping: knobs, derived values, and how it was measured."""
    spec, summary = load_summary(study_file, storage)
    if summary.best_config is None or summary.best is None:
        raise UsageError(f"{spec.source}: no trial of study {spec.name!r} has completed yet; run it first")
    config = summary.best_config
    return {
        "study": spec.name,
        "trial": summary.best_trial,
        "confirmed": summary.confirmed,
        "config": config.knobs(),
        "hyperparameters": config.model_dump(mode="json")["hyperparameters"],
        "derived": {
            "global_batch": config.global_batch, "lr": config.lr, "device": config.device,
            "global_batch_held": bool(summary.global_batch_held),  # constraints.global_batch
            "split": BatchSplit(config.batch_size, config.grad_accum, config.world_size).label,  # bs x accum x ranks
            "data_parallel": config.data_parallel, "mesh": mesh_label(config.knobs()),  # pp x dp x tp
        },
        "metrics": {
            spec.objectives[0].key + "_median": summary.best.median,  # the chosen metric (time_to_loss_s...)
            "spread": summary.best.spread,
            "measurements": len(summary.best.values),
            "peak_memory_mb": summary.best.peak_memory_mb,
            "loss": summary.best.loss,
        },
        "speedup_vs_baseline": summary.speedup,
        "speedup_half_width": summary.speedup_half_width,
        "statement": summary.statement,
        "advice": summary.advice,
        "confirmation": _race_facts(summary),
        "default_is_best": summary.default_is_best,
        "env": dict(config.env),
        **_knob_measurements(summary),
        "step_anatomy": _step_anatomy(summary),
        **_noise_facts(summary),
    }


def _noise_facts(summary: TuneSummary) -> dict[str, Any]:
    """The best trial's gradient noise scale (None: not measured) and, scored on goodput, its efficiency."""
    if summary.best_trial is None:
        return {}
    attrs = summary.study.get_trials(deepcopy=False)[summary.best_trial].user_attrs
    keys = ("statistical_efficiency", "goodput_noise_scale", "goodput_noise_from")
    return {"gradient_noise_scale": attrs.get("gradient_noise_scale"), **{k: attrs[k] for k in keys if k in attrs}}


def _step_anatomy(summary: TuneSummary) -> dict[str, Any] | None:
    """Where a step went, the baseline's and the chosen configuration's (each part's median over their trials,
    the slowest rank), the bottleneck that binds each, and the diagnosis in one line."""
    from dataclasses import asdict

    from autotune.objectives import study_diagnosis

    diagnosis = study_diagnosis(summary.study, summary.baseline, summary.best)
    if diagnosis is None:
        return None
    return {
        "baseline": asdict(diagnosis.baseline),
        "chosen": asdict(diagnosis.chosen),
        "baseline_binds": diagnosis.baseline_binds,
        "chosen_binds": diagnosis.chosen_binds,
        "moved_by": list(diagnosis.moved_by),
        "diagnosis": diagnosis.line(),
    }


def _race_facts(summary: TuneSummary) -> dict[str, Any] | None:
    """How the choice was confirmed, when by a race: its rounds, entrants, block and why it stopped."""
    race = summary.study.user_attrs.get("autotune_race")
    if not isinstance(race, dict):
        return None
    return {"method": "race", "rounds": len(race.get("rounds", [])), "entrants": len(race.get("entrants", {})),
            "block_s": race.get("block_s"), "round_s": race.get("round_s"), "stopped": race.get("stopped")}


def _knob_measurements(summary: TuneSummary) -> dict[str, Any]:
    """What the best trial measured of its knobs: the threads it ran with (auto resolved), its compile_s,
    and when that compile time is won back."""
    trials = complete_trials(summary.study)
    best = next((t for t in trials if t["number"] == summary.best_trial), None)
    if best is None:
        return {}
    payback = compile_payback(best, trials)
    return {
        "threads_per_rank_resolved": best.get("threads_per_rank"),
        "compile_s": best.get("compile_s"),
        "compile_payback": None if payback is None else {
            "steps": payback.steps, "minutes": payback.minutes, "against_trial": payback.against_trial,
            "same_config": payback.same_config, "text": payback.describe(),
        },
    }


def print_status(console: Console, study_file: str, storage: str | None = None) -> None:
    spec, summary = load_summary(study_file, storage)
    study = summary.study
    trials = study.get_trials(deepcopy=False)
    target = spec.budget.n_trials
    budget = f"budget {target}" if target is not None else "no trial limit"
    console.print(f"[bold]{spec.name}[/]  {len(trials)} trials stored ({budget})")
    fingerprint = study.user_attrs.get(FINGERPRINT_ATTR)
    for line in describe_fingerprint(fingerprint) if isinstance(fingerprint, dict) else []:
        console.print(escape(line), highlight=False, soft_wrap=True)
    if warm_start_line(study):
        console.print(escape(str(warm_start_line(study))), highlight=False, soft_wrap=True)
    console.print("  ".join(f"[{OUTCOME_STYLE.get(k, 'white')}]{k}[/]: {v}" for k, v in sorted(summary.counts.items()))
                  or "no trial yet")
    running = [t for t in trials if t.state == TrialState.RUNNING]
    now = time.time()
    for t in running:
        started = t.datetime_start.timestamp() if t.datetime_start else now
        worker = t.user_attrs.get("worker", {})
        gone = ("; that run is gone: the next `autotune run` records it as interrupted and runs it again"
                if gone_from_here(worker) else "")
        console.print(escape(f"running: #{t.number} for {now - started:.0f} s on {worker.get('host', '?')} "
                             f"(pid {worker.get('pid', '?')}{gone})"), highlight=False, soft_wrap=True)
    # A trial's windows share its run's luck: whole runs of one configuration scatter several times more than
    # one run's windows say (benchmarks/trial_scatter.py). Once the study has re-measured a configuration, a
    # trial's ± is that of a configuration measured once (objectives' half_width with the pooled deviation of
    # whole readings: a race entrant's paced blocks are another measurement, as for the pruner's margin).
    pooled = reading_noise(study.get_trials(deepcopy=False), "throughput_samples_s")
    table = Table(box=None, header_style="dim")
    for name in ("#", "role", "outcome", "samples/s", "±", "MB", "loss", "load"):
        table.add_column(name, no_wrap=True)  # short figures; the reason takes what is left of the line
    table.add_column("reason", min_width=24)
    shown = trials[-15:]
    for t in shown:
        a = t.user_attrs
        outcome = str(a.get("outcome", t.state.name.lower()))
        table.add_row(str(t.number), str(a.get("role", "")), f"[{OUTCOME_STYLE.get(outcome, 'white')}]{outcome}[/]",
                      fmt(a.get("throughput_samples_s"), ",.0f"), _spread(a, pooled),
                      fmt(a.get("peak_memory_mb"), ",.0f"),
                      fmt(a.get("loss"), ".4g"), _load(a), escape(str(a.get("reason", ""))[:60]))
    # Never cut a line at the edge: a reason is read whole (wrapped in its column), also in a pipe or a log.
    console.print(table, crop=False)
    legend = [text for flag, text in (
        (any(t.user_attrs.get("settled") is False for t in shown), "? warm-up never settled: a low-confidence figure"),
        (any(t.user_attrs.get("busy") for t in shown), "! busy: other processes used its cores"),
    ) if flag]
    if legend:
        console.print("[yellow]" + "   ".join(legend) + "[/]", highlight=False, soft_wrap=True)
    if summary.best is not None and summary.best_config is not None:
        width = summary.speedup_half_width
        interval = f" (± {summary.speedup * width:.2f}x)" if summary.speedup and width else ""
        speed = f", {summary.speedup:.2f}x baseline{interval}" if summary.speedup else ""
        if summary.default_is_best:
            speed = ", the default configuration (nothing beat it)"
        value = (f"{summary.best.median:.3g} s to loss {spec.objectives[0].target:g}"
                 if spec.objectives[0].metric == "time_to_loss" else f"{summary.best.median:,.0f} samples/s")
        console.print(f"best so far: trial #{summary.best_trial} {value}{speed} "
                      f"({summary.best_config.short()})")
    for line in noise_lines(summary):  # the winner against the runner-up, a left-out first trial, busy trials
        console.print(escape(line), highlight=False, soft_wrap=True)


def _spread(attrs: dict[str, Any], pooled: Pooled | None = None) -> str:
    """The trial's ± as ``4%``: its window interval (throughput_spread), and once the study has a pooled
    run-to-run deviation, the interval of one measurement (never narrower than the windows'); marked ``?`` when
    the trial's warm-up never settled (a low-confidence number)."""
    spread = attrs.get("throughput_spread")
    value = attrs.get("throughput_samples_s")
    if pooled is not None and isinstance(value, (int, float)):
        spread = half_width([float(value)], [spread], pooled)
    text = f"{spread:.0%}" if isinstance(spread, (int, float)) else "-"
    return f"[yellow]{text}?[/]" if attrs.get("settled") is False else text


def _load(attrs: dict[str, Any]) -> str:
    """machine_load as a percentage, marked ``!`` when the trial was measured on a busy machine."""
    load = attrs.get("machine_load")
    if not isinstance(load, (int, float)):
        return "-"
    return f"[yellow]{load:.0%}![/]" if attrs.get("busy") else f"{load:.0%}"
