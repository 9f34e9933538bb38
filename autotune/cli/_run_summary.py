"""Rich renderings shared by the CLI commands: trial progress and results."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import TickCallback, TrialResult, Window
from autotune.tuner import Observer

OUTCOME_STYLE = {
    "complete": "green",
    "pruned": "yellow",
    "oom": "red",
    "diverged": "magenta",
    "crashed": "red",
    "timeout": "red",
    "hang": "red",
}


def fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


@contextlib.contextmanager
def trial_progress(console: Console, limits: TrialLimits, enabled: bool = True) -> Iterator[TickCallback | None]:
    """A progress bar over a trial's steps (the time to the first step shows as 'starting')."""
    if not enabled or not console.is_terminal:
        yield None
        return
    progress = Progress(
        TextColumn("[bold]trial[/]"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("trial", total=limits.max_steps, status="starting")

    def tick(elapsed: float, windows: list[Window]) -> None:
        if windows:
            last = windows[-1]
            progress.update(task, completed=last.step, status=f"{last.throughput_samples_s:,.0f} samples/s")

    with progress:
        yield tick


def print_trial_result(console: Console, config: TrialConfig, result: TrialResult, debug: bool = False) -> None:
    """How one trial went. A failed one shows the workload's exception and the user's file:line first;
    autotune's own frames only with ``debug``."""
    style = OUTCOME_STYLE.get(result.outcome.value, "white")
    console.print(f"[bold {style}]{result.outcome.value}[/]  {escape(result.reason)}")
    shown = _print_workload_error(console, result.error_lines, debug, result.trial_dir)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("config", config.short())
    table.add_row("throughput", fmt(result.throughput_samples_s, ",.1f", " samples/s"))
    table.add_row("peak memory", fmt(result.peak_memory_mb, ",.0f", " MB"))
    table.add_row("loss", fmt(result.loss, ".4g"))
    if result.eval_loss is not None:
        table.add_row("held-out loss", fmt(result.eval_loss, ".4g"))
    table.add_row("steps", f"{result.steps} ({result.samples:,} samples)")
    table.add_row("time to first step", fmt(result.time_to_first_step_s, ".2f", " s"))
    table.add_row("threads per rank", f"{fmt(result.threads_per_rank, 'd')} ({config.threads_per_rank})")
    if config.compile != "off":
        table.add_row("compile", fmt(result.compile_s, ".2f", " s") + " (in the warm-up, not in throughput)")
    table.add_row("wall time", fmt(result.wall_s, ".2f", " s"))
    table.add_row("trial folder", result.trial_dir)
    console.print(table)
    if result.error_lines and not shown:
        console.print("[dim]last error lines:[/]")
        for line in result.error_lines[-8:]:
            console.print(f"  {line}", markup=False, highlight=False)


def _print_workload_error(console: Console, lines: list[str], debug: bool, trial_dir: str = "") -> bool:
    """The recorded traceback, the workload's part first: exception, user's file:line, the frames outside
    autotune. Returns False when the lines hold no traceback (they are then printed as they are)."""
    from autotune.tracebacks import parse_lines, recorded_where

    parsed = parse_lines(lines) if lines else None
    if parsed is None:
        return False
    console.print(f"[bold]{escape(parsed.exception)}[/]", highlight=False)
    if parsed.user is not None:
        console.print(f"  at {escape(parsed.user.where())}", highlight=False)
        if parsed.user.source:
            console.print(f"    {parsed.user.source}", markup=False, highlight=False)
    elif where := recorded_where(trial_dir):  # the user's frame lies deeper than the lines kept
        console.print(f"  at {escape(where)}", highlight=False)
    if debug:
        console.print("[dim]traceback (as the rank recorded it):[/]")
        for line in parsed.all_lines:
            console.print(f"  {line}", markup=False, highlight=False)
    else:
        if parsed.user_lines:
            console.print("[dim]traceback outside autotune:[/]")
            for line in parsed.user_lines[-10:]:
                console.print(f"  {line}", markup=False, highlight=False)
        console.print("[dim](autotune's own frames are hidden; --debug shows them)[/]")
    return True


# ------------------------------------------------------------------------------------------- tuning view
class RunView(Observer):
    """The live view of `autotune run`: trial i of N, the running trial, best so far, outcome counts.

    On a terminal it is a rich Live display; elsewhere (CI, pipes) it prints one line per trial.
    """

    def __init__(self, console: Console, study_name: str, max_steps: int) -> None:
        from rich.live import Live

        self.console = console
        self.study_name = study_name
        self.max_steps = max_steps
        self.live_enabled = console.is_terminal
        self.live = Live(console=console, refresh_per_second=4, transient=True) if self.live_enabled else None
        self.target: int | None = 0
        self.done = 0
        self.rows: list[tuple[str, ...]] = []
        self.counts: dict[str, int] = {}
        self.best: float | None = None
        self.baseline: float | None = None
        self.current = ""
        self.progress = ""

    # Observer hooks ---------------------------------------------------------------------------------
    def study_opened(self, study: Any, target: int | None, done: int) -> None:
        self.target, self.done = target, done
        for t in study.get_trials(deepcopy=False):
            attrs = t.user_attrs
            if "outcome" in attrs:
                self._count(attrs["outcome"])
                self._note_value(attrs.get("role", "search"), attrs.get("outcome"), attrs.get("throughput_samples_s"))
        if done:
            of = f" of {target}" if target is not None else ""
            self.console.print(f"resuming study [bold]{self.study_name}[/]: {done}{of} trials done")
        if self.live is not None:
            self.live.start()
            self.live.update(self._render())

    def trial_started(self, number: int, role: str, config: TrialConfig, index: int, target: int | None) -> None:
        label = {"baseline": "baseline", "confirm": "confirm"}.get(role, f"trial {self._of()}")
        self.current = f"#{number} {label}: {config.short()}"
        self.progress = "starting"
        self._refresh()

    def trial_progress(self, elapsed_s: float, windows: list[Window]) -> None:
        if windows:
            last = windows[-1]
            self.progress = (
                f"step {last.step}/{self.max_steps}  {last.throughput_samples_s:,.0f} samples/s  "
                f"loss {last.loss:.4g}  {elapsed_s:.0f} s"
            )
        else:
            self.progress = f"starting ({elapsed_s:.0f} s)"
        self._refresh()

    def trial_finished(self, number: int, role: str, config: TrialConfig, result: TrialResult) -> None:
        if role != "confirm":
            self.done += 1
        outcome = result.outcome.value
        self._count(outcome)
        self._note_value(role, outcome, result.throughput_samples_s)
        ratio = (
            f"{result.throughput_samples_s / self.baseline:.2f}x"
            if result.throughput_samples_s and self.baseline
            else "-"
        )
        row = (
            str(number), role, outcome, fmt(result.throughput_samples_s, ",.0f"), ratio,
            fmt(result.peak_memory_mb, ",.0f"), fmt(result.loss, ".4g"), config.short(),
        )
        self.rows.append(row)
        self.current, self.progress = "", ""
        if self.live is None:
            style = OUTCOME_STYLE.get(outcome, "white")
            self.console.print(
                f"#{number:<3} {role:<8} [{style}]{outcome:<9}[/] {row[3]:>10} samples/s {ratio:>6}  "
                f"{row[5]:>6} MB  {config.short()}{'' if outcome == 'complete' else f'  ({escape(result.reason)})'}",
                highlight=False,
                soft_wrap=True,
            )
        self._refresh()

    def confirming(self, runs: int) -> None:
        self.current = f"confirming the best configurations: {runs} re-runs"
        if self.live is None:
            self.console.print(self.current)
        self._refresh()

    def finished(self, summary: Any) -> None:
        self.stop()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    # rendering --------------------------------------------------------------------------------------
    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def _note_value(self, role: str, outcome: object, value: object) -> None:
        if outcome != "complete" or not isinstance(value, (int, float)):
            return
        if role == "baseline" and self.baseline is None:
            self.baseline = float(value)
        if self.best is None or value > self.best:
            self.best = float(value)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())

    def _of(self) -> str:
        """``3 of 20``, or ``3`` when the budget has no trial limit."""
        if self.target is None:
            return str(self.done + 1)
        return f"{min(self.done + 1, self.target)} of {self.target}"

    def _render(self) -> Table:
        grid = Table.grid(padding=(0, 1))
        best = fmt(self.best, ",.0f", " samples/s")
        if self.best and self.baseline:
            best += f" ({self.best / self.baseline:.2f}x baseline)"
        counts = "  ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))
        grid.add_row(f"[bold]{self.study_name}[/]  trial {self._of()}")
        grid.add_row(f"best so far: {best}")
        grid.add_row(f"[dim]{counts or 'no trial finished yet'}[/]")
        if self.current:
            grid.add_row(f"[cyan]{self.current}[/]")
            grid.add_row(f"  {self.progress}")
        table = Table(box=None, header_style="dim")
        for name in ("#", "role", "outcome", "samples/s", "vs base", "MB", "loss", "config"):
            table.add_column(name, justify="right" if name in ("samples/s", "vs base", "MB", "loss") else "left")
        for row in self.rows[-10:]:
            table.add_row(*row[:2], f"[{OUTCOME_STYLE.get(row[2], 'white')}]{row[2]}[/]", *row[3:])
        grid.add_row(table)
        return grid


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
    spread = f", spread {best.spread:.0%}" if len(best.values) > 1 else ""
    metric = _first_metric(summary, spec)
    if metric == "time_to_loss_s":  # the score first, then the throughput behind it
        table.add_row(
            "time to target loss (s, median)", fmt(base.median if base else None, ".3g"),
            f"{best.median:.3g} (n={len(best.values)}{spread})",
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
            fmt(base.median if base else None, ",.0f"),
            f"{best.median:,.0f} (n={len(best.values)}{spread})",
        )
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
    counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.counts.items()))
    console.print(f"[dim]trials: {counts}; best is trial #{summary.best_trial}"
                  f"{' (confirmed by re-runs)' if summary.confirmed else ''}[/]")
    if summary.best_config.compile != "off":
        from autotune.objectives._compile_payback import compile_payback, complete_trials

        rows = complete_trials(summary.study)
        chosen = next((r for r in rows if r["number"] == summary.best_trial), None)
        payback = compile_payback(chosen, rows) if chosen else None
        if payback is not None:
            console.print(escape(payback.describe()))
    if metric == "time_to_loss_s":
        from autotune.objectives._time_to_loss import explain_choice

        explanation = explain_choice(_time_to_loss_rows(summary.study), best.config_key)
        if explanation:
            console.print(explanation)
    floor = _loss_floor_line(summary.study, best, base)
    if floor:
        console.print(f"[dim]{floor}[/]")
    if summary.default_is_best:
        console.print("[bold]the default configuration is the best measured[/]: nothing beat the baseline by more "
                      "than the measured spread; keep your defaults")
    elif summary.speedup is not None:
        console.print(f"[bold green]speedup: {summary.speedup:.2f}x[/] the baseline's throughput "
                      f"({best.median:,.0f} vs {base.median if base else 0:,.0f} samples/s)")


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
    from autotune.objectives._time_to_loss import TimeToLossRow

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
    from autotune.objectives._time_to_loss import loss_noise_floor

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
