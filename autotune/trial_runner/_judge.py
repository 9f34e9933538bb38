"""The one judgement a trial gets after each measured window, wherever its windows come from: the monitor of a
live trial, and the replays of recorded or known trials (autotune/tuner/_replay.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from autotune.trial_result import Outcome, Window

# Called with each new window; returns True when the trial should be pruned.
WindowCallback = Callable[[Window], bool]


@dataclass(frozen=True)
class WindowJudge:
    """Pruned when ``on_window`` says so (the tuner's pruner, told the window); else out of memory when the
    window's own peak is over ``max_memory_mb`` and a window's peak is how this trial's memory is measured
    (``window_memory``: a device's ``max_memory_allocated``, or a replay's recorded peak). Host memory of a
    live trial is measured by sampling its processes instead (the monitor), not from its windows.

    ``memory_name`` and ``memory_detail`` say what the window's peak is, for the reason a user reads
    ("device memory 900 MB (max_memory_allocated, the largest rank) is over the budget of 500 MB").
    """

    on_window: WindowCallback | None = None
    max_memory_mb: float | None = None
    window_memory: bool = True
    memory_name: str = "peak memory"
    memory_detail: str = ""

    def __call__(self, window: Window) -> tuple[Outcome, str] | None:
        """How the trial ends at this window, with the reason; None when it goes on."""
        if self.on_window is not None and self.on_window(window):
            return Outcome.PRUNED, f"pruned at step {window.step}"
        budget = self.max_memory_mb
        if self.window_memory and budget is not None and window.peak_memory_mb > budget:
            peak = f"{self.memory_name} {window.peak_memory_mb:.0f} MB{self.memory_detail}"
            return Outcome.OOM, f"{peak} is over the budget of {budget:.0f} MB"
        return None

    def each(self, windows: Iterable[Window], seen: list[Window]) -> tuple[Outcome, str] | None:
        """Judge ``windows`` in order, adding each to ``seen``; how the trial ends at the first that ends it."""
        for window in windows:
            seen.append(window)
            if (ended := self(window)) is not None:
                return ended
        return None
