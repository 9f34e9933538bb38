"""Replaying recorded or known trials through the real :class:`~autotune.tuner.Tuner`.

The seam is ``Tuner(run_trial=...)``: where a live study launches a trial and monitors it, a replay takes
the trial's measurements from a landscape (a function of the configuration) and hands them to the
monitor's callbacks window by window, as the monitor does. Everything else — the study, the sampler,
the pruner, the baseline, confirmation, telling, choosing — is the live study's code. Benchmarks
(benchmarks/search_efficiency.py) and tests of the defaults use it, as ``autotune.tuner.replay_runner``
and ``autotune.tuner.recorded_runner``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import LaunchError
from autotune.search_space import TrialConfig
from autotune.trial_runner import Launcher, Outcome, RunHandle, TrialPlan, TrialResult, Window, WindowJudge
from autotune.tuner._replay_drift import Drift, Machine, drifting_windows

__all__ = [
    "Drift", "Landscape", "Measured", "NoLaunch", "RecordedRunner", "ReplayEntrant", "ReplayRunner",
    "recorded_runner", "replay_runner",
]


@dataclass(frozen=True)
class Measured:
    """What a configuration measures in the landscape.

    ``throughput_samples_s`` is its steady throughput; ``peak_memory_mb`` its memory at the first measured
    window, growing by ``memory_growth_mb`` per window after that; ``outcome`` a failure to end with
    (crashed, timeout, hang) after ``fail_after_windows`` windows; ``overhead_s`` the seconds of a trial
    not spent training (launch, import, teardown).
    """

    throughput_samples_s: float
    peak_memory_mb: float = 100.0
    loss: float = 1.0
    memory_growth_mb: float = 0.0
    outcome: Outcome = Outcome.COMPLETE
    fail_after_windows: int = 0
    overhead_s: float = 2.0
    settled: bool | None = None  # whether its warm-up settled (None: not modelled)


Landscape = Callable[[TrialConfig, int], Measured]  # (config, how many times it was measured before)


class NoLaunch(Launcher):
    """The launcher of a replay: nothing is ever launched."""

    name = "replay"

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        raise LaunchError("a replayed study launches nothing; give Tuner(run_trial=replay_runner(...))")


class ReplayEntrant:
    """A configuration in a replayed confirmation race (autotune/tuner/_race.py): each block is one reading of
    the landscape (``landscape(config, times measured before)``), as long as the plan's ``pace_steps`` take at
    that throughput."""

    def __init__(self, landscape: Landscape, plan: TrialPlan, trial_dir: Path, seen: dict[str, int],
                 machine: Machine | None = None) -> None:
        self.landscape, self.plan, self.trial_dir, self.seen = landscape, plan, trial_dir, seen
        self.machine = machine  # a drifting machine: each block one reading of it, on its clock
        self.windows: list[Window] = []
        self.wall_s = 0.0

    def start(self, timeout_s: float) -> None:
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        self.plan.write(self.trial_dir)
        self.wall_s = 2.0
        if self.machine is not None:
            self.machine.now += self.wall_s

    def block(self, timeout_s: float) -> Window:
        config, steps = self.plan.config, self.plan.pace_steps or 1
        key = config.model_dump_json()
        m = self.landscape(config, self.seen.get(key, 0))
        self.seen[key] = self.seen.get(key, 0) + 1
        if m.outcome is not Outcome.COMPLETE:
            raise RuntimeError(f"replayed {m.outcome.value}")
        speed = (m.throughput_samples_s if self.machine is None
                 else self.machine.block_reading(m.throughput_samples_s, steps * config.global_batch))
        took = steps * config.global_batch / speed if speed > 0 else 1.0
        self.wall_s += took
        if self.machine is not None:
            self.machine.now += took
        step = self.plan.limits.warmup_steps + steps * (len(self.windows) + 1)
        window = Window(step=step, samples=step * config.global_batch, elapsed_s=self.wall_s,
                        window_throughput_samples_s=speed, throughput_samples_s=speed, loss=m.loss,
                        peak_memory_mb=m.peak_memory_mb, time_to_first_step_s=1.0, settled=True)
        self.windows.append(window)
        return window

    def finish(self, timeout_s: float) -> dict[str, object] | None:
        return None  # a landscape has no held-out loss

    def close(self) -> None:
        pass


class _Replayer:
    """A ``run_trial`` whose trial is replayed, not launched: the trial's folder and plan are written as a live
    trial's are, :meth:`replay` hands its windows to the window judge (:func:`judged`), and its result is
    written to result.json."""

    def __call__(
        self,
        plan: TrialPlan,
        trial_dir: Path,
        launcher: Launcher,
        *,
        max_memory_mb: float | None = None,
        on_window: Callable[[Window], bool] | None = None,
        on_tick: Callable[[float, list[Window]], None] | None = None,
        **_: Any,
    ) -> TrialResult:
        trial_dir.mkdir(parents=True, exist_ok=True)
        plan.write(trial_dir)
        result = self.replay(plan, trial_dir, WindowJudge(on_window, max_memory_mb), on_tick)
        (trial_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
        return result

    def replay(self, plan: TrialPlan, trial_dir: Path, judge: WindowJudge,
               on_tick: Callable[[float, list[Window]], None] | None) -> TrialResult:
        raise NotImplementedError


class ReplayRunner(_Replayer):
    """A ``run_trial`` for :class:`~autotune.tuner.Tuner` that measures trials in ``landscape``.

    The windows are those of the study file's trial section (one every ``trial.window()`` steps after the
    warm-up, to ``max_steps``, or to ``trial.samples``); each goes to the window judge as the monitor hands
    it over (pruned; a peak over ``max_memory_mb`` ends the trial as oom). ``paced`` opens a confirmation
    race's entrant, which reads the landscape once per block (:class:`ReplayEntrant`).

    With ``drift`` the machine's speed moves with the replay's clock (:class:`Drift`): each window is a reading
    of it, taken at the time the window runs, and so are a paced run's blocks; the landscape's ``Measured`` is
    the configuration's speed on the machine at its nominal speed. ``paired=False`` keeps the search's anchor
    out (autotune/tuner/_anchor.py): the search judged and fitted on unpaired readings, to compare with.
    """

    def __init__(self, landscape: Landscape, drift: Drift | None = None, *, paired: bool = True) -> None:
        self.landscape = landscape
        self.paired = paired  # False: no anchor through the search, as before paired pruning (a benchmark's before)
        self.seen: dict[str, int] = {}  # how many times each configuration was read
        self.machine = Machine(drift) if drift is not None else None

    @property
    def now(self) -> float:
        """The replay's clock (seconds; 0 without ``drift``)."""
        return self.machine.now if self.machine is not None else 0.0

    def paced(self, plan: TrialPlan, trial_dir: Path) -> ReplayEntrant:
        return ReplayEntrant(self.landscape, plan, trial_dir, self.seen, self.machine)

    def replay(self, plan: TrialPlan, trial_dir: Path, judge: WindowJudge,
               on_tick: Callable[[float, list[Window]], None] | None) -> TrialResult:
        config, limits = plan.config, plan.limits
        key = config.model_dump_json()
        m = self.landscape(config, self.seen.get(key, 0))
        self.seen[key] = self.seen.get(key, 0) + 1
        max_steps = limits.trial_steps(config.global_batch)
        step_s = config.global_batch / m.throughput_samples_s if m.throughput_samples_s > 0 else 1.0
        machine = self.machine if m.throughput_samples_s > 0 else None
        began = machine.now if machine is not None else 0.0
        planned = (drifting_windows(plan, m, _window_steps(plan, m, max_steps), machine) if machine is not None
                   else self._windows(plan, m, max_steps, step_s))
        windows, ended = judged(planned, judge, on_tick)
        outcome, reason = ended or (
            (m.outcome, f"replayed {m.outcome.value} after {len(windows)} windows")
            if m.outcome is not Outcome.COMPLETE
            else (Outcome.COMPLETE, f"finished {max_steps} steps")
        )
        result = TrialResult(outcome=outcome, reason=reason, trial_dir=str(trial_dir))
        result.take_windows(windows)
        result.settled = m.settled
        if machine is not None:  # the clock moves by what ran: to the window it ended at, then the teardown
            steps = [limits.warmup_steps] + [w.step for w in windows]
            result.training_s = sum((w.step - s) * config.global_batch / w.window_throughput_samples_s
                                    for s, w in zip(steps, windows, strict=False))
            result.wall_s = (windows[-1].elapsed_s if windows else m.overhead_s / 2) + m.overhead_s / 2
            machine.now = began + result.wall_s
            return result
        if windows:
            result.training_s = (windows[-1].step - limits.warmup_steps) * step_s
        result.wall_s = m.overhead_s + (windows[-1].step if windows else limits.warmup_steps) * step_s
        return result

    @staticmethod
    def _windows(plan: TrialPlan, m: Measured, max_steps: int, step_s: float) -> list[Window]:
        """The windows the trial would report, up to a failure's (``fail_after_windows``)."""
        config = plan.config
        steps = _window_steps(plan, m, max_steps)
        return [
            Window(
                step=step,
                samples=step * config.global_batch,
                elapsed_s=m.overhead_s / 2 + step * step_s,
                window_throughput_samples_s=m.throughput_samples_s,
                throughput_samples_s=m.throughput_samples_s,
                loss=m.loss,
                peak_memory_mb=m.peak_memory_mb + m.memory_growth_mb * i,
                time_to_first_step_s=m.overhead_s / 2,
            )
            for i, step in enumerate(steps)
        ]


def _window_steps(plan: TrialPlan, m: Measured, max_steps: int) -> list[int]:
    """The steps a replayed trial reports a window at, up to a failure's (``fail_after_windows``)."""
    limits = plan.limits
    steps = list(range(limits.warmup_steps + limits.window(), max_steps + 1, limits.window()))
    if not steps or steps[-1] != max_steps:
        steps.append(max_steps)
    return steps[: m.fail_after_windows] if m.outcome is not Outcome.COMPLETE else steps


def replay_runner(landscape: Landscape, drift: Drift | None = None, *, paired: bool = True) -> ReplayRunner:
    """A ``run_trial`` for :class:`~autotune.tuner.Tuner` that measures trials in ``landscape``, on a machine
    that drifts when ``drift`` says how (:class:`ReplayRunner`)."""
    return ReplayRunner(landscape, drift, paired=paired)


def judged(
    windows: list[Window], judge: WindowJudge, on_tick: Callable[[float, list[Window]], None] | None
) -> tuple[list[Window], tuple[Outcome, str] | None]:
    """Hand a replayed trial's windows to its judge in order, as the monitor does: the windows up to the one it
    ended at (that one included), and how it ended (None: it ran to its last window)."""
    seen: list[Window] = []
    for window in windows:
        seen.append(window)
        if (ended := judge(window)) is not None:
            return seen, ended
        if on_tick is not None:
            on_tick(window.elapsed_s, seen)
    return seen, None


class RecordedRunner(_Replayer):
    """A ``run_trial`` that replays recorded trials (benchmarks/landscape.py's records): ``lookup`` gives a
    configuration's record (``outcome``, ``reason``, ``wall_s``, ``windows`` with ``step``, ``elapsed_s``,
    ``throughput_samples_s``, ``window_throughput_samples_s``, ``peak_memory_mb``, ``loss``).

    Each recorded window goes to the window judge; a pruned trial's ``wall_s`` is the launch-to-window time
    plus the trial's own teardown (its wall time after its last window). A trial the record says failed
    ends with that outcome and no windows.
    """

    def __init__(self, lookup: Callable[[TrialConfig], dict[str, Any]]) -> None:
        self.lookup = lookup

    def replay(self, plan: TrialPlan, trial_dir: Path, judge: WindowJudge,
               on_tick: Callable[[float, list[Window]], None] | None) -> TrialResult:
        record = self.lookup(plan.config)
        recorded = record.get("windows") or []
        wall = float(record.get("wall_s") or 0.0)
        teardown = max(0.0, wall - float(recorded[-1]["elapsed_s"])) if recorded else 0.0
        outcome = Outcome(record.get("outcome", "complete"))
        result = TrialResult(outcome=outcome, reason=str(record.get("reason", "")), trial_dir=str(trial_dir),
                             wall_s=wall)
        windows: list[Window] = []
        if outcome in (Outcome.COMPLETE, Outcome.PRUNED):  # a pruned record replays the windows it had
            result.outcome = Outcome.COMPLETE
            windows, ended = judged(self._windows(plan, record), judge, on_tick)
            if ended is not None:
                result.outcome, result.reason = ended
                if ended[0] is Outcome.PRUNED:
                    result.wall_s = min(wall, windows[-1].elapsed_s + teardown)
        result.take_windows(windows)
        if result.outcome is Outcome.COMPLETE and outcome is Outcome.COMPLETE and record.get("throughput_samples_s"):
            result.throughput_samples_s = float(record["throughput_samples_s"])
            result.training_s = float(record.get("training_s") or 0.0)
            for name in ("throughput_spread", "warmup_steps_used", "settled"):  # as measured, when recorded
                if record.get(name) is not None:
                    setattr(result, name, record[name])
        return result

    @staticmethod
    def _windows(plan: TrialPlan, record: dict[str, Any]) -> list[Window]:
        first_step = float(record.get("time_to_first_step_s") or 0.0)
        return [
            Window(
                step=int(w["step"]),
                samples=int(w["step"]) * plan.config.global_batch,
                elapsed_s=float(w["elapsed_s"]),
                window_throughput_samples_s=float(w.get("window_throughput_samples_s") or w["throughput_samples_s"]),
                throughput_samples_s=float(w["throughput_samples_s"]),
                loss=float(w.get("loss") or 0.0),
                peak_memory_mb=float(w.get("peak_memory_mb") or 0.0),
                time_to_first_step_s=first_step,
            )
            for w in record.get("windows") or []
        ]


def recorded_runner(lookup: Callable[[TrialConfig], dict[str, Any]]) -> RecordedRunner:
    """A ``run_trial`` that replays recorded trials (:class:`RecordedRunner`)."""
    return RecordedRunner(lookup)
