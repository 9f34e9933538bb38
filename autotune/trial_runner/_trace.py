"""Spans of a study's critical path, written only when ``AUTOTUNE_TRACE`` names a file.

benchmarks/overhead.py (``--study``) sets it for one ``autotune run`` and reads back where the time between
trials goes: the tuner's claim (the sampler's fit), its storage writes and artifacts, the launch, the
monitor, the teardown, and each rank's start and training span. A line is one JSON object
``{"span", "start", "end", "pid", ...}`` (epoch seconds, so the tuner's and the ranks' clocks compare),
appended with one ``write`` to a file opened with ``O_APPEND``: the processes of a study share it.
Without the variable nothing is written and a span costs one environment lookup.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

TRACE_ENV = "AUTOTUNE_TRACE"  # a path; the trial environment passes AUTOTUNE_* on to the ranks


def trace_event(name: str, start: float, end: float | None = None, **fields: Any) -> None:
    """Record one span (``end`` None: an instant) when tracing is on; never raises."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    record = {"span": name, "start": start, "end": start if end is None else end, "pid": os.getpid(), **fields}
    with contextlib.suppress(OSError, TypeError, ValueError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)


@contextlib.contextmanager
def traced(name: str, **fields: Any) -> Iterator[None]:
    """Record the span of the ``with`` block (also when it raises)."""
    if not os.environ.get(TRACE_ENV):
        yield
        return
    start = time.time()
    try:
        yield
    finally:
        trace_event(name, start, time.time(), **fields)
