"""The final table of `autotune run`: the study's result (:class:`~autotune.tuner.TuneSummary`) against
the baseline, with the compile payback, the time-to-loss reasoning and the loss noise floor."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli._style import fmt
from autotune.objectives import TimeToLossRow, compile_payback, complete_trials, explain_choice, loss_noise_floor
from autotune.search_space import BatchSplit, TrialConfig, mesh_label


def print_summary(console: Console, summary: object, spec: Any = None) -> None:
    """The final table of `autotune run`: the chosen configuration against the baseline."""
    from autotune.tuner import TuneSummary

    assert isinstance(summary, TuneSummary)
    best, base = summary.best, summary.baseline
    if best is None or summary.best_config is None:
        if summary.counts.get("complete"):
            console.print("[red]no feasible configuration: every completed trial broke a constraint[/] "
                          "(see `autotune status`)")
        else:
            source = escape(getattr(spec, "source", "STUDY.yaml"))
            console.print("[red]no trial completed: nothing to recommend[/] (see `autotune status`; "
                          f"`autotune trial {source}` runs one trial and shows its error)", soft_wrap=True)
        return
    table = Table(title="autotune: chosen configuration", title_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("best", justify="right")
    spread = _noise(best)
    metric = _first_metric(summary, spec)
    if metric == "time_to_loss_s":  # the score first, then the throughput behind it
        table.add_row(
            "time to target loss (s, median)", fmt(base.median if base else None, ".3g") + _noise(base),
            f"{best.median:.3g}{spread}",
        )
        table.add_row(
            "throughput (samples/s, median)", fmt(_group_attr(summary.study, base, "throughput_samples_s"), ",.0f"),
            fmt(_group_attr(summary.study, best, "throughput_samples_s"), ",.0f"),
        )
        table.add_row(
            "samples to target loss", fmt(_group_attr(summary.study, base, "time_to_loss_samples"), ",.0f"),
            fmt(_group_attr(summary.study, best, "time_to_loss_samples"), ",.0f"),
        )
    else:
        table.add_row(
            "throughput (samples/s, median)",
            fmt(base.median if base else None, ",.0f") + _noise(base),
            f"{best.median:,.0f}{spread}",
        )
    table.add_row("warm-up settled (steps)", settled_cell(summary.study, base), settled_cell(summary.study, best))
    table.add_row(
        "peak memory (MB)", fmt(base.peak_memory_mb if base else None, ",.0f"), fmt(best.peak_memory_mb, ",.0f")
    )
    table.add_row("loss", fmt(base.loss if base else None, ".4g"), fmt(best.loss, ".4g"))
    best_eval = _group_attr(summary.study, best, "eval_loss")
    if best_eval is not None:  # the workload has an eval_dataset
        table.add_row("held-out loss (eval_dataset)", fmt(_group_attr(summary.study, base, "eval_loss"), ".4g"),
                      fmt(best_eval, ".4g"))
    base_cfg = TrialConfig.model_validate(base.config) if base else None
    undecided = set(_not_decided(spec))
    for knob, value in summary.best_config.knobs().items():
        before = getattr(base_cfg, knob) if base_cfg else None
        mark = "" if before == value else " *"
        if knob in undecided:
            mark = " (not decided by this study)"
        table.add_row(f"  {knob}", "-" if base_cfg is None else str(before), f"{value}{mark}")
    for name, value in summary.best_config.hyperparameters.items():  # the hyperparameters: section
        before = base_cfg.hyperparameters.get(name) if base_cfg else None
        table.add_row(f"  hp.{name}", "-" if base_cfg is None else _hp_value(before),
                      _hp_value(value) + ("" if before == value else " *"))
    for name in sorted({*summary.best_config.env, *(base_cfg.env if base_cfg else {})}):  # the env: section
        before_env = base_cfg.env.get(name, "(unset)") if base_cfg else "-"
        after_env = summary.best_config.env.get(name, "(unset)")
        table.add_row(f"  env.{name}", before_env, after_env + ("" if before_env == after_env else " *"))
    lr_mark = " (not decided by this study)" if "lr_scaling" in undecided else ""
    table.add_row("  lr", fmt(base_cfg.lr if base_cfg else None, ".3g"), f"{summary.best_config.lr:.3g}{lr_mark}")
    console.print(table)
    if summary.global_batch_held:
        line = held_line(summary.best_config, summary.global_batch_held)
        console.print(escape(line), highlight=False, soft_wrap=True)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.counts.items()))
    console.print(f"[dim]trials: {counts}; best is trial #{summary.best_trial}"
                  f"{_confirmed_by(summary)}[/]")
    _notes(console, summary)
    if metric == "time_to_loss_s":
        explanation = explain_choice(_time_to_loss_rows(summary.study), best.config_key)
        if explanation:
            console.print(explanation)
    _verdict(console, summary)


def _verdict(console: Console, summary: Any) -> None:
    """The loss noise floor, the speed-up over the baseline (or that the defaults are best), the noise's lines."""
    best, base = summary.best, summary.baseline
    floor = _loss_floor_line(summary.study, best, base)
    if floor:
        console.print(f"[dim]{floor}[/]")
    if summary.confirming_elsewhere:  # its verdict comes from the run confirming it, not from this one
        console.print(escape(f"{summary.confirming_elsewhere} is confirming the best configurations now: this choice "
                             "is not confirmed yet; `autotune best` shows the confirmed one once that run ends"),
                      highlight=False, soft_wrap=True)
    elif summary.default_is_best:
        console.print("[bold]the default configuration is the best measured[/]: nothing beat the baseline by more "
                      "than the measured spread; keep your defaults")
    elif summary.speedup is not None:
        console.print(f"[bold green]speedup: {summary.speedup:.2f}x[/]{_speedup_interval(summary)} the baseline's "
                      f"throughput ({best.median:,.0f} vs {base.median if base else 0:,.0f} samples/s)")
    for line in [*noise_lines(summary), *filter(None, [anatomy_line(summary)])]:
        console.print(escape(line), highlight=False, soft_wrap=True)


def _notes(console: Console, summary: Any) -> None:
    """The configurations not launched (predicted over the memory budget) and a compiled choice's payback."""
    from autotune.tuner import not_launched

    skipped = not_launched(summary.study)
    if skipped:  # predicted over constraints.max_memory_mb before launch (tuner/_memory.py)
        configs = {t.number: t.user_attrs.get("config") or {} for t in summary.study.get_trials(deepcopy=False)}
        meshes = Counter(mesh_label(configs[n]) for n in skipped)
        which = "" if set(meshes) == {"pp1.dp1.tp1"} else "; meshes " + ", ".join(
            f"{label}" + (f" x{count}" if count > 1 else "") for label, count in meshes.items())
        console.print(f"{len(skipped)} configuration{'s' if len(skipped) != 1 else ''} not launched: predicted over "
                      f"the memory budget (trials {', '.join(f'#{n}' for n in skipped)}){which}", highlight=False)
    if summary.best_config.compile != "off":
        rows = complete_trials(summary.study)
        chosen = next((r for r in rows if r["number"] == summary.best_trial), None)
        payback = compile_payback(chosen, rows) if chosen else None
        if payback is not None:
            console.print(escape(payback.describe()))


def held_line(config: TrialConfig, held: tuple[int, ...]) -> str:
    """What a held global batch (constraints.global_batch) meant for the study, and the best's split."""
    values = ", ".join(str(g) for g in held)
    split = BatchSplit(config.batch_size, config.grad_accum, config.world_size)
    return (f"global batch held at {values} (constraints.global_batch): only its splits were tried, each at the "
            f"workload's base_lr (lr {config.lr:.3g}; lr_scaling not applied); the best splits {config.global_batch} "
            f"as {split.label} (batch_size x grad_accum x world_size)"
            + (f" on the mesh {mesh_label(config.knobs())} (pp x dp x tp: {config.data_parallel} data-parallel "
               "replicas)" if config.data_parallel != config.world_size else ""))


def anatomy_line(summary: Any) -> str | None:
    """Where the baseline's and the chosen configuration's steps went, and which knobs moved it (None: a
    configuration without step anatomy)."""
    from autotune.objectives import study_diagnosis

    diagnosis = study_diagnosis(summary.study, summary.baseline, summary.best)
    return diagnosis.line() if diagnosis is not None else None


def _noise(group: Any) -> str:
    """`` (n=3, ± 4%, spread 9%)``: how often a configuration was measured and how noisy it was."""
    if group is None:
        return ""
    parts = [f"n={len(group.values)}"]
    if group.half_width is not None:
        parts.append(f"± {group.half_width:.0%}")
    if len(group.values) > 1:
        parts.append(f"spread {group.spread:.0%}")
    return f" ({', '.join(parts)})"


def _confirmed_by(summary: Any) -> str:
    if summary.confirming_elsewhere:
        return " (not confirmed yet: another run is confirming)"
    if not summary.confirmed:
        return ""
    return " (confirmed by a race)" if summary.study.user_attrs.get("autotune_race") else " (confirmed by re-runs)"


def _speedup_interval(summary: Any) -> str:
    width = summary.speedup_half_width
    return "" if not width or summary.speedup is None else f" (± {summary.speedup * width:.2f}x)"


def _disturbed(race: dict[str, Any]) -> str:
    """How many of the race's block readings its fit left out as disturbed (autotune/objectives/_race.py)."""
    from autotune.objectives import fit

    gone = len(fit(race["rounds"]).left_out)
    if not gone:
        return ""
    return (f"; {gone} block reading{'s' if gone > 1 else ''} left out as disturbed (far slower than "
            "the rest of the round: something else held the machine)")


def noise_lines(summary: Any) -> list[str]:
    """What the measurements' noise says about the choice, a line each: the winner against the runner-up
    (``best by ...``/``tied within noise with ...``), the baseline's left-out first trial, the trials
    measured on a busy machine; and how the study searched, where it changed: the trials TPE proposed past
    the GP's hand-over. `autotune run` and `autotune status` print them."""
    from autotune.objectives import FIRST_TRIAL_FAR_OFF, busy_warning

    lines = []
    if summary.statement and summary.best is not None:
        record = summary.study.user_attrs.get("autotune_confirmation") or {}
        stopped = record.get("separable") is False  # the record's separable is true whenever separated is
        race = summary.study.user_attrs.get("autotune_race")
        lines.append(f"trial #{summary.best_trial}: {summary.statement}"
                     + ("; more re-runs, up to confirm.max_repeats, could not have separated them"
                        if stopped and not race else ""))
        if isinstance(race, dict) and race.get("rounds"):
            lines.append(f"confirmed by a race: {len(race['rounds'])} rounds of ~{race.get('block_s', 0):g} s blocks "
                         f"({float(race.get('round_s') or 0):.1f} s a round), the speed-ups read within each round; "
                         f"stopped: {race.get('stopped', 'running')}{_disturbed(race)}")
            memory = race.get("memory") or {}
            if memory.get("mode", "race") != "race":  # the entrants did not all fit the device alive together
                lines.append(str(memory.get("why")))
    exhausted = summary.study.user_attrs.get("autotune_space_exhausted")  # tuner/_exhausted.py
    if isinstance(exhausted, dict) and exhausted.get("line"):
        lines.append(str(exhausted["line"]))
    if summary.advice:
        lines.append(summary.advice)
    if summary.left_out:
        numbers = ", ".join(f"#{n}" for n in summary.left_out)
        lines.append(f"trial {numbers} (the baseline's first run) read more than {FIRST_TRIAL_FAR_OFF:.0%} below its "
                     "re-runs: re-measured, not averaged in")
    warning = busy_warning(summary.study)
    if warning:
        lines.append(warning)
    if summary.best is not None and _settled_of(summary.study, summary.best) == [False] * len(summary.best.trials):
        lines.append(f"trial #{summary.best_trial}: low confidence — its warm-up never settled within a trial "
                     "(settled: false on every run); raise trial.max_steps or trial.settle_tolerance")
    by_tpe = [t.number for t in summary.study.get_trials(deepcopy=False) if t.user_attrs.get("sampler") == "tpe"]
    if by_tpe:
        lines.append(f"trials #{by_tpe[0]}-#{by_tpe[-1]} ({len(by_tpe)}) were proposed by TPE: the GP's ask grows with "
                     "every trial, and past its trial limit the default sampler hands over (docs/reference/sampler.md)")
    return lines


def _settled_of(study: Any, group: Any) -> list[bool | None]:
    """``settled`` of each of a group's trials (None: not recorded)."""
    numbers = set(group.trials)
    return [t.user_attrs.get("settled") for t in study.get_trials(deepcopy=False) if t.number in numbers]


def settled_cell(study: Any, group: Any) -> str:
    """``yes (12)``: the group's warm-up settled (in a median of 12 steps); ``no: low confidence`` when no
    measurement of it settled; ``-`` when not recorded."""
    if group is None:
        return "-"
    flags = _settled_of(study, group)
    steps = _group_attr(study, group, "warmup_steps_used")
    used = f" ({steps:.0f})" if steps is not None else ""
    if any(f is True for f in flags):
        return f"yes{used}"
    if flags and all(f is False for f in flags):
        return f"[yellow]no: low confidence[/]{used}"
    return "-"


def _first_metric(summary: Any, spec: Any) -> str:
    """The stored name of the study's first objective (``throughput_samples_s``, ``time_to_loss_s``...)."""
    if spec is not None:
        return str(spec.objectives[0].key)
    with contextlib.suppress(Exception):
        names = summary.study.metric_names
        if names:
            return str(names[0])
    return "throughput_samples_s"


def _group_attr(study: Any, group: Any, name: str) -> float | None:
    """The median of a user attribute over a group's trials (None when no trial has it)."""
    if group is None:
        return None
    import statistics

    trials = study.get_trials(deepcopy=False)
    values = [
        v for n in group.trials
        if n < len(trials) and isinstance(v := trials[n].user_attrs.get(name), (int, float))
    ]
    return statistics.median(values) if values else None


def _time_to_loss_rows(study: Any) -> list[Any]:
    """Every feasible complete or pruned trial with a time to loss, as explain_choice reads them."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("outcome") not in ("complete", "pruned") or a.get("time_to_loss_s") is None or "config" not in a:
            continue
        if not all(v <= 0 for v in t.constraints.values()):
            continue
        losses = tuple((int(w[0]), float(w[3])) for w in a.get("windows", []) if w[3] is not None)
        rows.append(TimeToLossRow(
            trial=t.number, config_key=str(a.get("config_key", "")), outcome=str(a["outcome"]),
            global_batch=int(a["config"]["global_batch"]),
            throughput_samples_s=float(a.get("throughput_samples_s") or 0),
            seconds=float(a["time_to_loss_s"]), status=str(a.get("time_to_loss_status")), losses=losses,
        ))
    return rows


def _loss_floor_line(study: Any, best: Any, base: Any) -> str | None:
    """The loss noise floor (the loss spread of repeats of one configuration) and whether the chosen
    configuration's loss differs from the baseline's by more than it; None without repeats."""
    losses: dict[str, list[float]] = {}
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("outcome") == "complete" and isinstance(a.get("loss"), (int, float)) and a.get("config_key"):
            losses.setdefault(str(a["config_key"]), []).append(float(a["loss"]))
    floor = loss_noise_floor(list(losses.values()))
    if floor is None:
        return None
    repeated = sum(len(v) >= 2 for v in losses.values())
    line = (f"loss noise floor {floor:.3g}: the median loss spread of {repeated} configuration(s) measured more "
            "than once; loss differences below it are noise")
    if base is not None and best.loss is not None and base.loss is not None and best.config_key != base.config_key:
        gap = abs(best.loss - base.loss)
        line += f" (chosen vs baseline: {gap:.3g}, {'within' if gap <= floor else 'beyond'} it)"
    return line


def _hp_value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _not_decided(spec: Any) -> list[str]:
    """Searched knobs the study's objectives cannot see (autotune.workload_check.knobs_not_decided)."""
    if spec is None:
        return []
    from autotune.workload_check import knobs_not_decided

    return knobs_not_decided(spec)
