"""The monitor: tails a trial's metrics, enforces its limits, and turns how it ended into a TrialResult."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import LaunchError
from autotune.spec import TrialLimits
from autotune.trial_result import Outcome, RecordError, TrialResult, Window
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._exit import classify_exit, rank_hosts
from autotune.trial_runner._judge import WindowCallback, WindowJudge
from autotune.trial_runner._load import LoadMeter
from autotune.trial_runner._memory import tree_memory_mb
from autotune.trial_runner._noise import noise_source, trial_noise_scale
from autotune.trial_runner._plan import (
    APPLIED_FILE,
    HEARTBEAT_FILE,
    LEFT_BY_A_RUN,
    METRICS_FILE,
    TrialPlan,
)
from autotune.trial_runner._rank import remove_scratch
from autotune.trial_runner._records import AppliedRecord, DoneRecord, parse_window_line, read_record
from autotune.trial_runner._trace import traced

# Called every poll with (seconds since launch, windows so far) — for progress displays.
TickCallback = Callable[[float, list[Window]], None]


HOST_MEMORY_EVERY = 10  # without a host memory budget, host memory is sampled every this many polls
END_POLLS = 10  # after the last window, the run's end is looked for this many times per poll


class MetricsTail:
    """Reads complete new window records from a growing metrics.jsonl; a line that is not a window record
    raises RecordError (naming the line and the field), never a silent drop. A last line without its newline
    is still being written: it is read once it is complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._lines = 0

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
            self._lines += 1
            windows.append(parse_window_line(line, f"{self.path.name} line {self._lines}"))
        return windows


@dataclass
class Verdict:
    """Why the monitor stopped a run (None outcome: the run ended by itself)."""

    outcome: Outcome | None = None
    reason: str = ""
    observed_peak_mb: float = 0.0  # host memory of the largest rank tree (PSS), as the monitor saw it
    windows: list[Window] = field(default_factory=list)


class Monitor:
    """Watches one run until it ends or must be ended.

    Each poll it reads new windows (handing each to ``on_window``; True means prune), checks the
    wall-clock cap (``max_seconds``: timeout), silence after the first step (``hang_seconds``: hang, seen
    through the heartbeat file every rank touches after each step), and memory against ``max_memory_mb``
    (oom). The budget is checked on the number ``peak_memory_mb`` reports: with ``device_memory`` (CUDA)
    the windows' device memory (``max_memory_allocated``, the largest rank); otherwise the host memory of
    each rank's process tree (rank + DataLoader workers), summed as PSS so copy-on-write pages the
    workers share with their rank count once. Host memory is measured either way (``observed_peak_mb``,
    every poll with a budget on the host, else every ``HOST_MEMORY_EVERY`` polls). ``clock`` is injectable.
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
        device_memory: bool = False,
        load: LoadMeter | None = None,
    ) -> None:
        self.handle = handle
        self.load = load  # sampled every poll: the run's own CPU time, for machine_load
        self.device_memory = device_memory
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
        """(rank, MB) of the rank whose process tree holds the most memory now (PSS, see tree_memory_mb)."""
        worst = (-1, 0.0)
        for rank, procs in self.handle.rank_processes().items():
            total = tree_memory_mb(procs)
            if total > worst[1]:
                worst = (rank, total)
        return worst

    def watch(self) -> Verdict:
        """Until the run ends or must be ended; a window record that does not parse ends it as crashed."""
        verdict = Verdict()
        try:
            return self._watch(verdict)
        except RecordError as e:
            verdict.outcome, verdict.reason = Outcome.CRASHED, f"rank 0's window record does not parse: {e}"
            return verdict

    def _watch(self, verdict: Verdict) -> Verdict:
        start = self.clock()
        initial_beat = self._heartbeat_mtime()
        last_beat, last_beat_at = initial_beat, start
        started = False
        polls = 0
        host_budget = None if self.device_memory else self.max_memory_mb
        judge = WindowJudge(self.on_window, self.max_memory_mb, window_memory=self.device_memory,
                            memory_name="device memory", memory_detail=" (max_memory_allocated, the largest rank)")
        while True:
            now = self.clock()
            polls += 1
            ended = judge.each(self.tail.read(), verdict.windows)
            if ended is None and self.handle.poll() is not None:
                # the windows written just before the exit are judged as any other: which poll saw them must not
                # decide whether the last one is reported (it was not when the trial ended between two polls)
                verdict.outcome, verdict.reason = judge.each(self.tail.read(), verdict.windows) or (None, "")
                return verdict
            if ended is not None:
                verdict.outcome, verdict.reason = ended
                return verdict
            if self.load is not None:
                self.load.sample_handle(self.handle, polls)
            beat = self._heartbeat_mtime()
            if beat != last_beat:
                last_beat, last_beat_at = beat, now
                started = True
            if host_budget is not None or polls % HOST_MEMORY_EVERY == 1:
                rank, mb = self._memory()
                verdict.observed_peak_mb = max(verdict.observed_peak_mb, mb)
                if host_budget is not None and mb > host_budget:
                    verdict.outcome = Outcome.OOM
                    verdict.reason = f"rank {rank} used {mb:.0f} MB, over the budget of {host_budget:.0f} MB"
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
            self._wait(final=bool(verdict.windows) and verdict.windows[-1].step >= self.limits.max_steps)

    def _wait(self, *, final: bool) -> None:
        """Sleep until the next poll. After the last window the run is about to end (evaluation, exit): its
        end is then looked for END_POLLS times as often, so the next trial need not wait up to a whole poll
        for it; everything else keeps the poll's pace."""
        if not final:
            self.sleep(self.poll_s)
            return
        for _ in range(END_POLLS):
            self.sleep(self.poll_s / END_POLLS)
            if self.handle.poll() is not None:
                return


def prepare_trial_folder(plan: TrialPlan, trial_dir: Path) -> TrialPlan:
    """The plan as launched now by this process (launch time, the tuner's pid, the collective timeout after
    the first step), written with an empty heartbeat into ``trial_dir``, once what an earlier run left there is
    removed (:data:`LEFT_BY_A_RUN`). A folder that cannot be written (a full disk, a file in its way) is a
    LaunchError: nothing was started."""
    plan = plan.model_copy(
        update={
            "launched_at": time.time(),
            "tuner_pid": os.getpid(),
            "step_timeout_s": min(plan.step_timeout_s, plan.limits.hang_seconds),
        }
    )
    try:
        trial_dir.mkdir(parents=True, exist_ok=True)
        for pattern in LEFT_BY_A_RUN:  # a folder used before: its windows, pids and parked count are not this run's
            for path in trial_dir.glob(pattern):
                path.unlink()
        plan.write(trial_dir)
        (trial_dir / HEARTBEAT_FILE).touch()
    except OSError as e:
        raise LaunchError(
            f"cannot write the trial folder {trial_dir}: {e.strerror or e}; free disk space or make it writable"
        ) from e
    return plan


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
    plan = prepare_trial_folder(plan, trial_dir)
    started = time.monotonic()
    with traced("launch", trial_dir=str(trial_dir)):
        handle = launcher.launch(plan, trial_dir)
    load = LoadMeter.for_handle(handle)  # from here: a lease's wait is not the trial's
    load.start()
    verdict = Verdict()
    try:
        verdict = Monitor(handle, trial_dir, plan.limits, max_memory_mb=max_memory_mb, on_window=on_window,
                          on_tick=on_tick, poll_s=poll_s, device_memory=plan.config.device == "cuda", load=load).watch()
        if verdict.outcome in (Outcome.HANG, Outcome.TIMEOUT):
            cause = handle.diagnose()
            if cause:  # a lost node, not a hang of the training
                verdict.outcome, verdict.reason = Outcome.CRASHED, f"{cause}; {verdict.reason}"
    finally:
        with traced("terminate", trial_dir=str(trial_dir)):  # the run ended (or was stopped): its processes go
            handle.terminate(grace_s)
        remove_scratch(trial_dir)
    wall = time.monotonic() - started
    # Windows written after the monitor stopped reading (rank 0 racing the kill) are ignored: the trial
    # is judged on what the monitor saw.
    done: DoneRecord | None = None
    error_lines: list[str] = []
    if verdict.outcome is not None:
        outcome, reason = verdict.outcome, verdict.reason
    else:
        outcome, reason, error_lines, done = classify_exit(trial_dir, handle)
    result = TrialResult(outcome=outcome, reason=reason, wall_s=wall, trial_dir=str(trial_dir),
                         hosts=rank_hosts(trial_dir))
    result.error_lines = error_lines
    measured = load.finish()  # the run's processes are gone and reaped
    result.machine_load, result.busy, result.gpu_other_processes = (
        measured.machine_load, measured.busy, measured.gpu_other_processes)
    _measurements(result, plan, verdict, done)
    _knob_facts(result, plan, trial_dir)
    with contextlib.suppress(OSError):
        (trial_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
    return result


def _measurements(result: TrialResult, plan: TrialPlan, verdict: Verdict, done: DoneRecord | None) -> None:
    """The numbers of a trial: its windows, rank 0's done record (a run that ended by itself), the memory."""
    windows = verdict.windows
    result.take_windows(windows)
    config = plan.config
    result.global_batch, result.base_batch_size = config.global_batch, config.base_batch_size
    result.gradient_noise_scale = trial_noise_scale(windows, noise_source(config)[0])
    if done is not None:
        result.steps, result.samples = done.steps, done.samples
        result.training_s, result.training_span_s = done.training_s, done.training_span_s
        if done.time_to_first_step_s is not None:
            result.time_to_first_step_s = done.time_to_first_step_s
        if result.loss is None and done.loss is not None:
            result.loss = done.loss
        if done.eval_loss is not None:
            result.eval_loss = done.eval_loss
    elif windows:
        result.training_s = sum(
            w_samples / w.window_throughput_samples_s
            for w, w_samples in _window_samples(windows, plan.config.global_batch, plan.limits.warmup_steps)
            if w.window_throughput_samples_s > 0
        )
    if verdict.observed_peak_mb:
        # peak_memory_mb is the number the budget checks: device memory on CUDA (the windows'), host memory
        # (PSS of the rank trees) on CPU. Host memory is its own metric on every device.
        result.host_memory_mb = round(verdict.observed_peak_mb, 2)
        if plan.config.device != "cuda":
            result.peak_memory_mb = max(result.peak_memory_mb or 0.0, result.host_memory_mb)


def _knob_facts(result: TrialResult, plan: TrialPlan, trial_dir: Path) -> None:
    """What rank 0 recorded of the knobs it applied: compile_s and the resolved threads_per_rank. A trial
    stopped by max_seconds while torch.compile still compiled says so in its reason. An applied.json that does
    not parse makes the trial crashed, the file and field named."""
    try:
        applied = read_record(trial_dir / APPLIED_FILE, AppliedRecord) or AppliedRecord()
    except RecordError as e:
        result.outcome, result.reason = Outcome.CRASHED, f"rank 0's applied record does not parse: {e}"
        return
    if applied.compile_s is not None:
        result.compile_s = applied.compile_s
    if applied.threads_per_rank is not None:
        result.threads_per_rank = applied.threads_per_rank.resolved
    mode = plan.config.compile
    if result.outcome is Outcome.TIMEOUT and mode != "off" and result.compile_s is None:
        result.reason += (
            f"; torch.compile (compile: {mode}) was still compiling the first steps: raise trial.max_seconds "
            "for compiled trials or search compile: off"
        )


def _window_samples(windows: list[Window], global_batch: int, warmup: int) -> list[tuple[Window, int]]:
    out = []
    previous_step = warmup if not windows or windows[0].warmup_steps is None else windows[0].warmup_steps
    for w in windows:
        out.append((w, (w.step - previous_step) * global_batch))
        previous_step = w.step
    return out
