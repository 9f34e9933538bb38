"""The observer API: hooks a progress display (the CLI's live view) gets from the tuner."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

from autotune.search_space import TrialConfig
from autotune.trial_result import TrialResult, Window

if TYPE_CHECKING:
    from autotune.tuner._results import TuneSummary


class Observer:
    """Hooks for progress displays. Every method is optional; all are called from the tuner's thread."""

    def study_opened(self, study: optuna.Study, target: int | None, done: int) -> None:
        """The study is loaded; ``done`` of ``target`` search trials are already finished (None: no limit)."""

    def warm_started(self, line: str) -> None:
        """A new study queued earlier studies' best configurations after its baseline; ``line`` says from
        where (or why none was used)."""

    def note(self, line: str) -> None:
        """A change in how the study searches or confirms (the GP's hand-over to TPE, a pruned configuration
        re-measured), said once as it happens."""

    def trial_started(self, number: int, role: str, config: TrialConfig, index: int, target: int | None) -> None:
        """A trial is about to launch (``index`` counts this run's search trials, 1-based)."""

    def trial_progress(self, elapsed_s: float, windows: list[Window]) -> None:
        """Called about ten times a second while a trial runs."""

    def trial_finished(self, number: int, role: str, config: TrialConfig, result: TrialResult) -> None:
        """A trial ended and was stored."""

    def confirming(self, runs: int) -> None:
        """The confirmation phase starts: ``runs`` re-runs of the top configurations (and the baseline)."""

    def racing(self, line: str) -> None:
        """The confirmation race's standing after a round (``race round 5: #4 leads, 1.62x ± 9% over the
        baseline``), or an entrant dropped or failed."""

    def finished(self, summary: TuneSummary) -> None:
        """The run is over."""
