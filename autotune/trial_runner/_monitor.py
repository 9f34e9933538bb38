"""The monitor: tails a trial's metrics, enforces its limits, and turns how it ended into a TrialResult."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from autotune.errors import LaunchError
from autotune.spec import TrialLimits
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._plan import (
    DONE_FILE,
    ERRORS_DIR,
    HEARTBEAT_FILE,
    METRICS_FILE,
    TrialPlan,
)
from autotune.trial_runner._result import Outcome, TrialResult, Window

# Called with each new window; returns True when the trial should be pruned.
WindowCallback = Callable[[Window], bool]
# Called every poll with (seconds since launch, windows so far) — for progress displays.
TickCallback = Callable[[float, list[Window]], None]


class MetricsTail:
    """Reads complete new JSON lines from a growing metrics.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[Window]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        windows = []
        for line in lines:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                windows.append(Window.from_json(json.loads(line)))
        return windows


@dataclass
class Verdict:
    """Why the monitor stopped a run (None outcome: the run ended by itself)."""

    outcome: Outcome | None = None
    reason: str = ""
    observed_peak_mb: float = 0.0
    windows: list[Window] = field(default_factory=list)


class Monitor:
    """Watches one run until it ends or must be ended.

    Each poll it reads new windows (handing each to ``on_window``; True means prune), checks the
    wall-clock cap (``max_seconds``: timeout), silence after the first step (``hang_seconds``: hang, seen
    through the heartbeat file every rank touches after each step), and the memory of each rank's process
    tree (rank + DataLoader workers) against ``max_memory_mb`` (oom). ``clock`` is injectable.
    """

    def __init__(
        self,
        handle: RunHandle,
        trial_dir: Path,
        limits: TrialLimits,
        *,
        max_memory_mb: float | None = None,
        on_window: WindowCallback | None = None,
        on_tick: TickCallback | None = None,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.handle = handle
        self.trial_dir = trial_dir
        self.limits = limits
        self.max_memory_mb = max_memory_mb
        self.on_window = on_window
        self.on_tick = on_tick
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep
        self.tail = MetricsTail(trial_dir / METRICS_FILE)
        self.heartbeat = trial_dir / HEARTBEAT_FILE

    def _heartbeat_mtime(self) -> float | None:
        try:
            return os.stat(self.heartbeat).st_mtime_ns
        except OSError:
            return None

    def _memory(self) -> tuple[int, float]:
        """(rank, MB) of the rank whose process tree holds the most resident memory now."""
        worst = (-1, 0.0)
        for rank, procs in self.handle.rank_processes().items():
            total = 0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
            if total / 2**20 > worst[1]:
                worst = (rank, total / 2**20)
        return worst

    def watch(self) -> Verdict:
        verdict = Verdict()
        start = self.clock()
        initial_beat = self._heartbeat_mtime()
        last_beat, last_beat_at = initial_beat, start
        started = False
        while True:
            now = self.clock()
            for window in self.tail.read():
                verdict.windows.append(window)
                if self.on_window is not None and self.on_window(window):
                    verdict.outcome = Outcome.PRUNED
                    verdict.reason = f"pruned at step {window.step}"
                    return verdict
            if self.handle.poll() is not None:
                verdict.windows.extend(self.tail.read())
                return verdict
            beat = self._heartbeat_mtime()
            if beat != last_beat:
                last_beat, last_beat_at = beat, now
                started = True
            if self.max_memory_mb is not None:
                rank, mb = self._memory()
                verdict.observed_peak_mb = max(verdict.observed_peak_mb, mb)
                if mb > self.max_memory_mb:
                    verdict.outcome = Outcome.OOM
                    verdict.reason = f"rank {rank} used {mb:.0f} MB, over the budget of {self.max_memory_mb:.0f} MB"
                    return verdict
            elapsed = now - start
            if elapsed > self.limits.max_seconds:
                verdict.outcome = Outcome.TIMEOUT
                verdict.reason = (
                    f"over max_seconds ({self.limits.max_seconds:g} s)"
                    if started
                    else f"no training step within max_seconds ({self.limits.max_seconds:g} s)"
                )
                return verdict
            if started and now - last_beat_at > self.limits.hang_seconds:
                verdict.outcome = Outcome.HANG
                verdict.reason = f"no step finished for {now - last_beat_at:.0f} s (hang_seconds)"
                return verdict
            if self.on_tick is not None:
                self.on_tick(elapsed, verdict.windows)
            self.sleep(self.poll_s)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _log_tail(trial_dir: Path, rank: int, lines: int = 12) -> list[str]:
    try:
        text = (trial_dir / f"rank{rank}.log").read_text(errors="replace")
    except OSError:
        return []
    found = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("Extension modules:")]
    fatal = next((i for i, ln in enumerate(found) if ln.startswith("Fatal Python error")), None)
    if fatal is not None:  # a crash dump (faulthandler): the signal and the innermost frames
        return found[fatal : fatal + lines]
    return found[-lines:]


def classify_exit(trial_dir: Path, handle: RunHandle) -> tuple[Outcome, str, list[str], dict[str, Any] | None]:
    """How a run that ended by itself went: (outcome, reason, error lines, done.json or None)."""
    done = _read_json(trial_dir / DONE_FILE)
    errors = []
    for path in sorted((trial_dir / ERRORS_DIR).glob("rank*.json")):
        record = _read_json(path)
        if isinstance(record, dict):
            errors.append(record)
    errors.sort(key=lambda r: r.get("time", 0.0))
    if isinstance(done, dict) and not errors:
        outcome = Outcome(done.get("outcome", "complete"))
        return outcome, str(done.get("reason", "")), [], done
    exit_summary = handle.exit_summary()
    oom = [e for e in errors if e.get("kind") == "oom"]
    if oom:
        e = oom[0]
        return Outcome.OOM, f"rank {e['rank']}: out of memory", e.get("lines", []), done
    first = exit_summary.split(";")[0]
    crash_signal = "killed by" in first and not first.endswith(("SIGTERM", "SIGINT", "SIGHUP"))
    if crash_signal:  # SIGSEGV and the like: the cause, whatever the other ranks recorded afterwards
        rank = int(first.split("rank ", 1)[1].split()[0])
        return Outcome.CRASHED, first, _log_tail(trial_dir, rank), done
    primary = [e for e in errors if e.get("kind") not in ("peer", "timeout")]
    if primary:
        e = primary[0]
        return Outcome.CRASHED, f"rank {e['rank']}: {e['type']}: {e['message']}", e.get("lines", []), done
    timeouts = [e for e in errors if e.get("kind") == "timeout"]
    if timeouts:
        e = timeouts[0]
        return Outcome.HANG, f"rank {e['rank']}: a collective timed out", e.get("lines", []), done
    if errors:
        e = errors[0]
        return Outcome.CRASHED, f"rank {e['rank']}: {e['type']}: {e['message']}", e.get("lines", []), done
    if isinstance(done, dict):
        return Outcome(done.get("outcome", "complete")), str(done.get("reason", "")), [], done
    reason = exit_summary or "the run ended without a result"
    lines: list[str] = []
    with contextlib.suppress(OSError):
        lines = (trial_dir / "launcher.err").read_text(errors="replace").splitlines()[-12:]
    return Outcome.CRASHED, reason, lines, done


def run_trial(
    plan: TrialPlan,
    trial_dir: Path,
    launcher: Launcher,
    *,
    max_memory_mb: float | None = None,
    on_window: WindowCallback | None = None,
    on_tick: TickCallback | None = None,
    grace_s: float = 3.0,
    poll_s: float = 0.1,
) -> TrialResult:
    """Run one trial to its end and return what happened. Nothing the trial started outlives this call.

    Writes config.json first, then launches, monitors, and always ends the run (also on Ctrl-C, which
    is re-raised after the processes are gone). The result is also written to result.json. A folder that
    cannot be written (a full disk, a file in its way) is a LaunchError: nothing was started.
    """
    plan = plan.model_copy(
        update={
            "launched_at": time.time(),
            "tuner_pid": os.getpid(),
            "step_timeout_s": min(plan.step_timeout_s, plan.limits.hang_seconds),
        }
    )
    try:
        trial_dir.mkdir(parents=True, exist_ok=True)
        plan.write(trial_dir)
        (trial_dir / HEARTBEAT_FILE).touch()
    except OSError as e:
        raise LaunchError(
            f"cannot write the trial folder {trial_dir}: {e.strerror or e}; free disk space or make it writable"
        ) from e
    started = time.monotonic()
    handle = launcher.launch(plan, trial_dir)
    verdict = Verdict()
    try:
        verdict = Monitor(
            handle,
            trial_dir,
            plan.limits,
            max_memory_mb=max_memory_mb,
            on_window=on_window,
            on_tick=on_tick,
            poll_s=poll_s,
        ).watch()
    finally:
        handle.terminate(grace_s)
    wall = time.monotonic() - started
    windows = verdict.windows
    # Windows written after the monitor stopped reading (rank 0 racing the kill) are ignored: the trial
    # is judged on what the monitor saw.
    done: dict[str, Any] | None = None
    error_lines: list[str] = []
    if verdict.outcome is not None:
        outcome, reason = verdict.outcome, verdict.reason
    else:
        outcome, reason, error_lines, done = classify_exit(trial_dir, handle)
    result = TrialResult(outcome=outcome, reason=reason, wall_s=wall, trial_dir=str(trial_dir))
    result.error_lines = error_lines
    result.windows = windows
    if windows:
        last = windows[-1]
        result.throughput_samples_s = last.throughput_samples_s
        result.loss = last.loss
        result.peak_memory_mb = max(w.peak_memory_mb for w in windows)
        result.steps = last.step
        result.samples = last.samples
        result.time_to_first_step_s = last.time_to_first_step_s
    if done:
        result.steps = int(done.get("steps", result.steps))
        result.samples = int(done.get("samples", result.samples))
        result.training_s = float(done.get("training_s") or 0.0)
        result.training_span_s = float(done.get("training_span_s") or 0.0)
        if done.get("time_to_first_step_s") is not None:
            result.time_to_first_step_s = float(done["time_to_first_step_s"])
        if result.loss is None and done.get("loss") is not None:
            result.loss = float(done["loss"])
    elif windows:
        result.training_s = sum(
            w_samples / w.window_throughput_samples_s
            for w, w_samples in _window_samples(windows, plan.config.global_batch, plan.limits.warmup_steps)
            if w.window_throughput_samples_s > 0
        )
    if verdict.observed_peak_mb:
        result.peak_memory_mb = max(result.peak_memory_mb or 0.0, round(verdict.observed_peak_mb, 2))
    with contextlib.suppress(OSError):
        (trial_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
    return result


def _window_samples(windows: list[Window], global_batch: int, warmup: int) -> list[tuple[Window, int]]:
    out = []
    previous_step = warmup
    for w in windows:
        out.append((w, (w.step - previous_step) * global_batch))
        previous_step = w.step
    return out
