"""The live view of `autotune run` on a terminal is drawn when what it shows changes, not on a timer: a
confirmation race's view changes once a round, and a redraw in between costs the tuner's process CPU taken from
the configuration being measured."""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console

from autotune.cli._run_view import REFRESH_S, RunView
from autotune.trial_result import Window


class _NoTrials:
    def get_trials(self, deepcopy: bool = False) -> list[Any]:
        return []


def _terminal_view() -> tuple[RunView, io.StringIO, list[int]]:
    out = io.StringIO()
    view = RunView(Console(file=out, force_terminal=True, width=160), "demo", 40)
    assert view.live is not None
    drawn: list[int] = []
    refresh = view.live.refresh
    view.live.refresh = lambda: (drawn.append(1), refresh())[1]  # type: ignore[method-assign]
    return view, out, drawn


def test_the_live_view_is_drawn_when_it_changes_and_not_in_between() -> None:
    view, out, drawn = _terminal_view()
    try:
        view.study_opened(_NoTrials(), 10, 0)
        view.racing("race round 1: #4 leads, 1.50x ± 20% over the baseline")
        assert len(drawn) == 2 and "race round 1" in out.getvalue()
        size = out.tell()
        time.sleep(4 * REFRESH_S)  # a timer would have drawn it again by now (it drew 4 times a second)
        assert out.tell() == size and len(drawn) == 2
        view.racing("race round 2: #4 leads, 1.45x ± 15% over the baseline")
        assert len(drawn) == 3 and "race round 2" in out.getvalue()[size:]
    finally:
        view.stop()


def test_a_trials_progress_is_drawn_at_most_every_refresh_s() -> None:
    view, _, drawn = _terminal_view()
    window = Window(step=8, samples=64, elapsed_s=1.0, window_throughput_samples_s=80.0, throughput_samples_s=80.0,
                    loss=0.5, peak_memory_mb=100.0, time_to_first_step_s=0.5)
    try:
        view.study_opened(_NoTrials(), 10, 0)
        started = time.monotonic()
        for i in range(50):  # the monitor's looks, faster than REFRESH_S apart
            view.trial_progress(i / 10, [window])
        spent = time.monotonic() - started
        assert len(drawn) - 1 <= 1 + spent / REFRESH_S  # not 50: one drawing per REFRESH_S at most
        assert view.progress.startswith("step 8/40")  # the state is kept; the next drawing shows it
    finally:
        view.stop()
