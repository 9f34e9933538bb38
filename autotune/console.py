"""Rich renderings shared by the CLI commands: trial progress and results."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.search_space import TrialConfig
from autotune.spec import TrialLimits
from autotune.trial_runner import TickCallback, TrialResult, Window

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


def print_trial_result(console: Console, config: TrialConfig, result: TrialResult) -> None:
    style = OUTCOME_STYLE.get(result.outcome.value, "white")
    console.print(f"[bold {style}]{result.outcome.value}[/]  {result.reason}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("config", config.short())
    table.add_row("throughput", fmt(result.throughput_samples_s, ",.1f", " samples/s"))
    table.add_row("peak memory", fmt(result.peak_memory_mb, ",.0f", " MB"))
    table.add_row("loss", fmt(result.loss, ".4g"))
    table.add_row("steps", f"{result.steps} ({result.samples:,} samples)")
    table.add_row("time to first step", fmt(result.time_to_first_step_s, ".2f", " s"))
    table.add_row("wall time", fmt(result.wall_s, ".2f", " s"))
    table.add_row("trial folder", result.trial_dir)
    console.print(table)
    if result.error_lines:
        console.print("[dim]last error lines:[/]")
        for line in result.error_lines[-8:]:
            console.print(f"  {line}", markup=False, highlight=False)
