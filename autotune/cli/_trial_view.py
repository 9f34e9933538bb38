"""One trial on the console (`autotune trial`): a progress bar over its steps, then how it went."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.cli._style import OUTCOME_STYLE, fmt
from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_result import StepAnatomy
from autotune.trial_runner import TickCallback, TrialResult, Window, noise_source


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
            wait = f", data wait {last.step_anatomy.data_wait_share:.0%}" if last.step_anatomy is not None else ""
            progress.update(task, completed=last.step, status=f"{last.throughput_samples_s:,.0f} samples/s{wait}")

    with progress:
        yield tick


def print_trial_result(console: Console, config: TrialConfig, result: TrialResult, debug: bool = False) -> None:
    """How one trial went. A failed one shows the workload's exception and the user's file:line first;
    autotune's own frames only with ``debug``."""
    style = OUTCOME_STYLE.get(result.outcome.value, "white")
    console.print(f"[bold {style}]{result.outcome.value}[/]  {escape(result.reason)}", soft_wrap=True)
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
    if result.step_anatomy is not None:
        table.add_row("step anatomy", anatomy_cell(result.step_anatomy))
    table.add_row("gradient noise scale", noise_cell(config, result))
    table.add_row("threads per rank", f"{fmt(result.threads_per_rank, 'd')} ({config.threads_per_rank})")
    if config.compile != "off":
        table.add_row("compile", fmt(result.compile_s, ".2f", " s") + " (in the warm-up, not in throughput)")
    table.add_row("wall time", fmt(result.wall_s, ".2f", " s"))
    table.add_row("trial folder", result.trial_dir)
    console.print(table)
    if result.error_lines and not shown:
        console.print("[dim]last error lines:[/]")
        for line in result.error_lines[-8:]:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def noise_cell(config: TrialConfig, result: TrialResult) -> str:
    """``B_noise 37.5 samples (28.5-49.2; ddp: batch 32 against 64)``, or why there is none."""
    noise = result.gradient_noise_scale
    if noise is None:
        source, why = noise_source(config)
        return why if source is None else "not measured (no window)"
    where = f"{noise.source}: batch {noise.batch_small} against {noise.batch_big}"
    if noise.value is None:
        return f"not resolved by the gradient norms ({where})"
    interval = "unbounded" if noise.low is None or noise.high is None else f"{noise.low:.3g}-{noise.high:.3g}"
    return f"{noise.value:.3g} samples ({interval}; {where})"


def anatomy_cell(a: StepAnatomy) -> str:
    """``12.1 ms a step: 61% data wait, 30% forward/backward, ...`` (the slowest rank, median over windows)."""
    step = a.step_s
    if step <= 0:
        return "-"
    parts = [("data wait", a.data_wait_s), ("forward/backward", a.forward_backward_s),
             ("exposed sync", a.sync_exposed_s), ("optimizer", a.optimizer_s), ("other", a.other_s)]
    shown = ", ".join(f"{value / step:.0%} {name}" for name, value in parts if value is not None)
    return f"{step * 1000:.1f} ms a step (slowest rank): {shown}"


def _print_workload_error(console: Console, lines: list[str], debug: bool, trial_dir: str = "") -> bool:
    """The recorded traceback, the workload's part first: exception, user's file:line, the frames outside
    autotune. Returns False when the lines hold no traceback (they are then printed as they are).

    Every line is soft-wrapped: Rich never breaks it at the console's width (80 columns where the output is
    no terminal), so a FILE:LINE stays whole for an editor or grep to read; a terminal wraps it on screen."""
    from autotune.tracebacks import parse_lines, recorded_where

    parsed = parse_lines(lines) if lines else None
    if parsed is None:
        return False
    console.print(f"[bold]{escape(parsed.exception)}[/]", highlight=False, soft_wrap=True)
    if parsed.user is not None:
        console.print(f"  at {escape(parsed.user.where())}", highlight=False, soft_wrap=True)
        if parsed.user.source:
            console.print(f"    {parsed.user.source}", markup=False, highlight=False, soft_wrap=True)
    elif where := recorded_where(trial_dir):  # the user's frame lies deeper than the lines kept
        console.print(f"  at {escape(where)}", highlight=False, soft_wrap=True)
    if debug:
        console.print("[dim]traceback (as the rank recorded it):[/]")
        for line in parsed.all_lines:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    else:
        if parsed.user_lines:
            console.print("[dim]traceback outside autotune:[/]")
            for line in parsed.user_lines[-10:]:
                console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        console.print("[dim](autotune's own frames are hidden; --debug shows them)[/]")
    return True

