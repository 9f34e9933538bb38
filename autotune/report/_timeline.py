"""The timeline: when each trial started and ended, running ones included."""

from __future__ import annotations

import datetime
from typing import NamedTuple

import optuna

from autotune.report._records import trial_records


class TimelineBar(NamedTuple):
    number: int
    start: datetime.datetime
    end: datetime.datetime
    running: bool
    outcome: str
    reason: str
    role: str


def timeline_data(study: optuna.Study, now: datetime.datetime | None = None) -> list[TimelineBar]:
    """Start and end of every trial that started, whatever its state; running trials end at ``now``."""
    bars = []
    for r in trial_records(study):
        if r.start is None:
            continue
        running = r.end is None
        end = r.end or now or datetime.datetime.now()
        bars.append(TimelineBar(r.number, r.start, max(end, r.start), running, r.outcome, r.reason, r.role))
    return bars
