"""The live view of `autotune run` while the study runs: an Observer of the tuner."""

from __future__ import annotations

import math
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli._style import OUTCOME_STYLE, fmt
from autotune.search_space import TrialConfig
from autotune.trial_runner import TrialResult, Window
from autotune.tuner import Observer

# The live view is drawn when what it shows changes, a trial's progress (the monitor's every look, 10 a second) at
# most every REFRESH_S; nothing redraws it on a timer. A redraw every 0.25 s through a confirmation race, whose view
# changes once a round, cost the tuner's process CPU taken from the configuration being measured.
REFRESH_S = 0.25


class RunView(Observer):
    """The live view of `autotune run`: trial i of N, the running trial, best so far, outcome counts.

    On a terminal it is a rich Live display, drawn when it changes (REFRESH_S); elsewhere (CI, pipes) it prints
    one line per trial.
    """

    def __init__(self, console: Console, study_name: str, max_steps: int) -> None:
        from rich.live import Live

        self.console = console
        self.study_name = study_name
        self.max_steps = max_steps
        self.live_enabled = console.is_terminal
        self.live = Live(console=console, auto_refresh=False, transient=True) if self.live_enabled else None
        self.target: int | None = 0
        self.done = 0
        self.rows: list[tuple[str, ...]] = []
        self.counts: dict[str, int] = {}
        self.best: float | None = None
        self.baseline: float | None = None
        self.current = ""
        self.progress = ""
        self._drawn = -math.inf

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
            self._refresh()

    def warm_started(self, line: str) -> None:
        self.console.print(escape(line), highlight=False, soft_wrap=True)

    def note(self, line: str) -> None:
        self.console.print(escape(line), highlight=False, soft_wrap=True)

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
            if last.step_anatomy is not None:  # the slowest rank's wait for its next batch, this window
                self.progress += f"  data wait {last.step_anatomy.data_wait_share:.0%}"
        else:
            self.progress = f"starting ({elapsed_s:.0f} s)"
        self._refresh(often=True)

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

    def racing(self, line: str) -> None:
        self.current = line
        if self.live is None:
            self.console.print(escape(line), highlight=False, soft_wrap=True)
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

    def _refresh(self, *, often: bool = False) -> None:
        """Draw the view now; ``often`` (a trial's progress): not within REFRESH_S of the last drawing, the next
        progress draws what this one skipped."""
        if self.live is None:
            return
        now = time.monotonic()
        if often and now - self._drawn < REFRESH_S:
            return
        self._drawn = now
        self.live.update(self._render(), refresh=True)

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

