"""The tuning loop: baseline first, then sampler-suggested trials, pruning, confirmation and resume.

The loop (:class:`Tuner`), the decisions (Optuna's sampler and pruner, or autotune's own
multi-objective rule) and the execution (a :class:`~autotune.trial_runner.Launcher`) are three objects
passed to each other. Everything is stored in the Optuna study (docs/storage.md), so a study can be
resumed, read by dashboards, or shared by several tuners.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import signal
import socket
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import optuna
import psutil
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import FrozenTrial, TrialState

from autotune import broken_workload
from autotune.errors import LaunchError
from autotune.objectives import (
    Choice,
    DominancePruner,
    Group,
    choose,
    config_key,
    constraint_values,
    is_reference,
    objective_values,
    pareto_front,
)
from autotune.objectives import measured_groups as _measured_groups
from autotune.objectives._time_to_loss import running_value, time_to_loss_attrs, window_extras
from autotune.search_space import SearchSpace, TrialConfig
from autotune.spec import StudySpec
from autotune.study import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, open_study, study_lock
from autotune.trial_runner import (
    Launcher,
    Outcome,
    TrialResult,
    Window,
    make_launcher,
    plan_for,
    run_trial,
)

ROLE_BASELINE, ROLE_SEARCH, ROLE_CONFIRM = "baseline", "search", "confirm"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
INTERRUPTED = "interrupted"
WAIT_FOR_OTHERS_S = 1.0  # a worker whose budget is taken by running trials elsewhere re-checks this often


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: the running trial was stopped and recorded; ``exit_code`` is 130 or 143."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


class Observer:
    """Hooks for progress displays. Every method is optional; all are called from the tuner's thread."""

    def study_opened(self, study: optuna.Study, target: int | None, done: int) -> None:
        """The study is loaded; ``done`` of ``target`` search trials are already finished (None: no limit)."""

    def trial_started(self, number: int, role: str, config: TrialConfig, index: int, target: int | None) -> None:
        """A trial is about to launch (``index`` counts this run's search trials, 1-based)."""

    def trial_progress(self, elapsed_s: float, windows: list[Window]) -> None:
        """Called about ten times a second while a trial runs."""

    def trial_finished(self, number: int, role: str, config: TrialConfig, result: TrialResult) -> None:
        """A trial ended and was stored."""

    def confirming(self, runs: int) -> None:
        """The confirmation phase starts: ``runs`` re-runs of the top configurations (and the baseline)."""

    def finished(self, summary: TuneSummary) -> None:
        """The run is over."""


@dataclass
class TuneSummary:
    """The state of a study: the chosen configuration (:func:`autotune.objectives.choose`), how it was
    measured, and the trial counts. ``default_is_best``: the baseline (the default configuration) is the
    choice, because nothing beat it by more than the measured spread."""

    study: optuna.Study
    best_config: TrialConfig | None
    best_trial: int | None
    best: Group | None
    baseline: Group | None
    speedup: float | None
    confirmed: bool
    counts: dict[str, int] = field(default_factory=dict)
    pareto_trials: list[int] = field(default_factory=list)
    default_is_best: bool = False

    @property
    def metric(self) -> str:
        return "throughput_samples_s"


def _worker_identity() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": psutil.Process().create_time()}


def _alive(worker: dict[str, Any]) -> bool:
    try:
        proc = psutil.Process(int(worker["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return "start" not in worker or abs(proc.create_time() - float(worker["start"])) < 1.0
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False


def _orphaned(trial: FrozenTrial) -> bool:
    """A running trial no tuner has recorded itself on, for longer than the heartbeat grace period."""
    if trial.datetime_start is None:
        return False
    return (datetime.datetime.now() - trial.datetime_start).total_seconds() > GRACE_PERIOD_S


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished baseline/search trials count; trials failed because their tuner died are retried instead."""
    if trial.user_attrs.get("role", ROLE_SEARCH) == ROLE_CONFIRM:
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and trial.user_attrs.get("outcome") not in (None, INTERRUPTED)


class Tuner:
    """Runs (or resumes) a study to its budget, then confirms the best configurations.

    Args:
        spec: the validated study file.
        launcher: how trials start; by default the one the study file names.
        storage_url: overrides the study file's storage.
        observer: progress hooks (the CLI's live view).
        clock: the time the budget's ``timeout_s`` is measured with.
        run_trial: how one trial is run, given the same arguments as
            :func:`autotune.trial_runner.run_trial`; a seam for replaying recorded trials (benchmarks,
            tests), where a result comes from a landscape instead of a launch. Everything else is the
            live study's code path.
    """

    def __init__(
        self,
        spec: StudySpec,
        *,
        launcher: Launcher | None = None,
        storage_url: str | None = None,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.monotonic,
        run_trial: Callable[..., TrialResult] = run_trial,
    ) -> None:
        self.spec = spec
        self._run_trial = run_trial
        self.space: SearchSpace = spec.space()
        self.launcher = launcher
        self.storage_url = storage_url
        self.observer = observer or Observer()
        self.clock = clock
        self.identity = _worker_identity()
        self._artifact_store: Any = None

    # -- public ---------------------------------------------------------------------------------------
    def open(self) -> optuna.Study:
        return open_study(self.spec, self.space, self.storage_url)

    def run(self, n_trials: int | None = None, timeout_s: float | None = None) -> TuneSummary:
        """Run until the study holds ``n_trials`` finished trials (baseline included; default: the study
        file's budget, where null is no limit) or ``timeout_s`` passed, then confirm.

        The confirmation runs are inside ``timeout_s``: the search stops early enough to leave them the time
        they are expected to take (the median trial's wall time each, at most half of ``timeout_s``), and a
        confirmation run that would end past ``timeout_s`` is not started. With neither limit the search
        runs until Ctrl-C. Raises :class:`Interrupted` on Ctrl-C/SIGTERM after recording the stopped trial.
        """
        target = n_trials or self.spec.budget.n_trials
        timeout_s = timeout_s if timeout_s is not None else self.spec.budget.timeout_s
        study = self.open()
        self.recover(study)
        with study_lock(self.url, study.study_name):  # workers started together queue one baseline
            self.ensure_baseline(study)
        launcher = self.launcher or make_launcher(self.spec)
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with _signals_as_interrupts():
            try:
                done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
                self.observer.study_opened(study, target, done)
                index = 0
                while target is None or done < target:
                    if deadline is not None and self.clock() + self._confirm_reserve_s(study, timeout_s) > deadline:
                        break
                    try:
                        trial = self.claim(study, target)
                        if trial is None:
                            # The rest of the budget runs in other workers: wait, in case one dies and its
                            # trial comes back to the queue.
                            time.sleep(WAIT_FOR_OTHERS_S)
                    except KeyboardInterrupt:
                        raise Interrupted(130) from None  # no trial of ours runs: nothing to record
                    if trial is not None:
                        index += 1
                        self.run_one(study, launcher, index=index, target=target, trial=trial)
                        broken_workload.check(study, self.spec.source)  # the same crash each time: stop
                    done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
                # One worker confirms; the others leave it the study (their summary is not confirmed yet).
                with study_lock(self.url, f"{study.study_name}:confirm", wait=False) as mine:
                    if mine:
                        self.confirm(study, launcher, deadline=deadline)
            finally:
                if self.launcher is None:
                    launcher.close()
        summary = summarize(study, self.spec)
        self.observer.finished(summary)
        return summary

    @property
    def url(self) -> str:
        return self.storage_url or self.spec.storage_url()

    def _confirm_reserve_s(self, study: optuna.Study, timeout_s: float | None) -> float:
        """The time the confirmation runs are expected to take: the median finished trial's wall time per
        run, at most half of ``timeout_s`` (0 before any trial finished)."""
        confirm = self.spec.confirm
        if confirm.top_k == 0 or timeout_s is None:
            return 0.0
        walls = _wall_times(study)
        if not walls:
            return 0.0
        runs = (confirm.top_k + 1) * confirm.repeats  # the top configurations and the baseline
        return min(runs * statistics.median(walls), timeout_s / 2)

    def claim(self, study: optuna.Study, target: int | None) -> optuna.Trial | None:
        """The next trial, unless ``target`` is taken by trials that count and trials running anywhere.

        Counting and asking happen under the study lock, so workers sharing a study never run more than
        ``target`` trials between them (a dead worker's trial is failed, queued again, and run by another).
        """
        self.recover(study)
        with study_lock(self.url, study.study_name):
            taken = sum(
                counts_toward_budget(t)
                or (t.state == TrialState.RUNNING and t.user_attrs.get("role") != ROLE_CONFIRM)
                for t in study.get_trials(deepcopy=False)
            )
            return _ask(study) if target is None or taken < target else None

    # -- recovery and baseline ------------------------------------------------------------------------
    def recover(self, study: optuna.Study) -> list[int]:
        """Fail trials left RUNNING by a dead tuner and queue them again. Returns their numbers.

        A tuner on this host that no longer exists is seen at once (its pid); tuners elsewhere are
        found by their heartbeat going stale (Optuna's RDB heartbeat, ``GRACE_PERIOD_S``).
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental API notice
            optuna.storages.fail_stale_trials(study)
        storage = study._storage
        recovered = []
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker = trial.user_attrs.get("worker")
            if isinstance(worker, dict):
                if worker.get("host") != self.identity["host"] or _alive(worker):
                    continue
                reason = f"its tuner (pid {worker.get('pid')}) died; retried"
            elif _orphaned(trial):
                # Its tuner died between asking for it and recording itself on it (milliseconds): no one can
                # ever finish it, and as a running trial it would hold a place in the budget for good.
                reason = "its tuner died before the trial started"
            else:
                continue
            try:
                storage.set_trial_user_attr(trial._trial_id, "outcome", INTERRUPTED)
                storage.set_trial_user_attr(trial._trial_id, "reason", reason)
                if not storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
            recovered.append(trial.number)
            if "config" in trial.user_attrs:  # else it had not started: the budget gets a new trial instead
                self._retry(study, trial)
        return recovered

    def _retry(self, study: optuna.Study, trial: FrozenTrial) -> None:
        attrs = {k: v for k, v in trial.user_attrs.items() if k in ("role", "config", "confirms")}
        attrs["retry_of"] = trial.number
        study.enqueue_trial(trial.params, user_attrs=attrs, skip_if_exists=False)

    def ensure_baseline(self, study: optuna.Study) -> None:
        """Queue the workload's default configuration as the first trial, once per study."""
        if any(t.user_attrs.get("role") == ROLE_BASELINE for t in study.get_trials(deepcopy=False)):
            return
        config = self.space.default_config(self.spec.baseline)
        study.enqueue_trial(
            self._admissible_params(config), user_attrs={"role": ROLE_BASELINE, "config": config.model_dump()}
        )

    def _admissible_params(self, config: TrialConfig) -> dict[str, Any]:
        """The config's values of searched knobs that lie inside the space (others cannot be Optuna params)."""
        distributions = self.space.distributions()
        params = {}
        for name, value in self.space.params_of(config).items():
            dist = distributions[name]
            with contextlib.suppress(ValueError, TypeError):
                if dist._contains(dist.to_internal_repr(value)):
                    params[name] = value
        return params

    # -- one trial ------------------------------------------------------------------------------------
    def run_one(
        self, study: optuna.Study, launcher: Launcher, *, index: int = 0, target: int | None = None,
        trial: optuna.Trial | None = None,
    ) -> TrialResult:
        trial = trial or _ask(study)
        role = str(trial.user_attrs.get("role", ROLE_SEARCH))
        if ("config" in trial.user_attrs and role != ROLE_SEARCH) or "retry_of" in trial.user_attrs:
            config = TrialConfig.model_validate(trial.user_attrs["config"])
            self._record_params(trial, config)
        else:
            config = self.space.suggest(trial)
        key = config_key(config.model_dump())
        for name, value in (
            ("role", role),
            ("config", config.model_dump()),
            ("config_key", key),
            ("worker", self.identity),
        ):
            trial.set_user_attr(name, value)
        trial_dir = self.spec.runs_dir() / f"trial-{trial.number:04d}"
        self.observer.trial_started(trial.number, role, config, index, target)
        on_window = self._pruning(study, trial, prune=role == ROLE_SEARCH)
        beat = _Heartbeat(study, trial, self.clock)

        def on_tick(elapsed: float, windows: list[Window]) -> None:
            beat()
            self.observer.trial_progress(elapsed, windows)

        try:
            # Heartbeats from a thread too: a launch may wait (for a core lease) longer than the grace period.
            with get_heartbeat_thread(trial._trial_id, study._storage):
                result = self._run_trial(
                    plan_for(self.spec, config),
                    trial_dir,
                    launcher,
                    max_memory_mb=self.spec.constraints.max_memory_mb,
                    on_window=on_window,
                    on_tick=on_tick,
                )
        except (KeyboardInterrupt, Interrupted) as stop:
            self._tell_interrupted(study, trial)
            if isinstance(stop, Interrupted):
                raise
            raise Interrupted(130) from None
        except LaunchError as e:
            # autotune could not start it (its folder, the launcher): no verdict on the configuration, which
            # is retried when the study is resumed; the run stops with the one-line error.
            self._tell_interrupted(study, trial, f"not started: {e}; it is retried on resume")
            raise
        except BaseException:
            with contextlib.suppress(Exception):
                trial.set_user_attr("outcome", Outcome.CRASHED.value)
                trial.set_user_attr("reason", "autotune failed while running this trial")
                study.tell(trial, state=TrialState.FAIL)
            raise
        try:
            self.tell(study, trial, result)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker failed this trial as stale (our heartbeat lapsed, e.g. a frozen machine) and
            # queued it again; the study keeps that retry, this run's result stays in its folder.
            warnings.warn(
                f"trial {trial.number} was failed as stale by another worker while it ran; its result is kept "
                f"in {result.trial_dir} only, the study re-runs it",
                stacklevel=2,
            )
            return result
        self.observer.trial_finished(trial.number, role, config, result)
        return result

    def _record_params(self, trial: optuna.Trial, config: TrialConfig) -> None:
        """Ask Optuna for the enqueued params of a fixed config, so the trial carries them."""
        fixed = self._admissible_params(config)
        distributions = self.space.distributions()
        for name in fixed:
            dist = distributions[name]
            if isinstance(dist, optuna.distributions.IntDistribution):
                trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step)
            elif isinstance(dist, optuna.distributions.FloatDistribution):  # hp.<name> ranges
                trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)
            elif isinstance(dist, optuna.distributions.CategoricalDistribution):
                trial.suggest_categorical(name, list(dist.choices))

    def _pruning(self, study: optuna.Study, trial: optuna.Trial, *, prune: bool) -> Callable[[Window], bool] | None:
        """The monitor's window callback. Every trial of a single-objective study reports its windows (the
        baseline's are the first comparison of the ``best`` pruner); only search trials (``prune``) are ever
        pruned."""
        objectives = self.spec.objectives
        if len(objectives) == 1:
            objective = objectives[0]
            prune = prune and self.spec.pruner.name != "none"
            value_of = running_value(objective)  # time_to_loss: the estimate from the windows so far

            def single(window: Window) -> bool:
                trial.report(value_of(window), self._report_step(window))
                return prune and bool(trial.should_prune())

            return single
        if self.spec.pruner.name == "none" or not prune:
            return None
        startup = self.spec.pruner.n_startup_trials
        rule = DominancePruner(
            [o.direction or "maximize" for o in objectives], n_startup_trials=3 if startup is None else startup
        )
        samples = self.spec.trial.samples is not None  # compare at equal samples seen: step x global batch

        def at(t: FrozenTrial, step: Any) -> int:
            return int(step) * int(t.user_attrs.get("config", {}).get("global_batch", 1)) if samples else int(step)

        finished = [
            [(at(t, w[0]), values) for w in t.user_attrs.get("windows", []) if (values := _window_values(w, self.spec))]
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if is_reference(t)
        ]

        values_of = [running_value(o) for o in objectives]

        def multi(window: Window) -> bool:
            values = [value_of(window) for value_of in values_of]
            return rule.should_prune(self._report_step(window), values, finished)

        return multi

    def _report_step(self, window: Window) -> int:
        """The step a window's value is reported at: its optimizer step, or with ``trial.samples`` set the
        samples seen, so trials of different global batches compare at equal samples."""
        return window.samples if self.spec.trial.samples is not None else window.step

    # -- telling ----------------------------------------------------------------------------------------
    def tell(self, study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
        """Store the result on the trial (docs/storage.md) and finish it with the right state."""
        attrs: dict[str, Any] = {
            "outcome": result.outcome.value,
            "reason": result.reason,
            "throughput_samples_s": _clean(result.throughput_samples_s),
            "peak_memory_mb": _clean(result.peak_memory_mb),
            "host_memory_mb": _clean(result.host_memory_mb),
            "loss": _clean(result.loss),
            "eval_loss": _clean(result.eval_loss),
            "time_to_first_step_s": _clean(result.time_to_first_step_s),
            "wall_s": round(result.wall_s, 3),
            "training_s": round(result.training_s, 4),
            "compile_s": _clean(result.compile_s),
            "threads_per_rank": result.threads_per_rank,
            "hosts": result.hosts,
            "steps": result.steps,
            "samples": result.samples,
            "windows": [
                [w.step, _clean(w.throughput_samples_s), _clean(w.peak_memory_mb), _clean(w.loss), *extra]
                for w, extra in zip(result.windows, window_extras(result.windows, self.spec), strict=True)
            ],
            "trial_dir": result.trial_dir,
            "error_lines": result.error_lines[-15:],
        }
        attrs.update(time_to_loss_attrs(result, self.spec))
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        self._attach_artifacts(study, trial, result)
        outcome = result.outcome
        if outcome is Outcome.PRUNED:
            # Its constraints as measured so far: a sampler that models pruned trials (gp) needs the same
            # constraints on every trial it fits.
            for name, value in constraint_values(result, self.spec.constraints.max_memory_mb).items():
                trial.set_constraint(name, value)
            study.tell(trial, state=TrialState.PRUNED)
            return
        if outcome in (Outcome.COMPLETE, Outcome.OOM, Outcome.DIVERGED):
            values = objective_values(result, self.spec.objectives)
            if values is None and outcome is not Outcome.COMPLETE:
                values = [self._worst_value(study, o) for o in self.spec.objectives]
            if values is not None:
                for name, value in constraint_values(result, self.spec.constraints.max_memory_mb).items():
                    trial.set_constraint(name, value)
                study.tell(trial, values)
                return
        study.tell(trial, state=TrialState.FAIL)

    def _attach_artifacts(self, study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
        """The trial's files (config, metrics, rank logs) as Optuna artifacts, for optuna-dashboard.

        Before tell: Optuna attaches nothing to a finished trial. A failure here costs the dashboard its
        logs, never the study its trial (the files stay in the trial folder).
        """
        try:
            from autotune.report._artifacts import artifact_store_for, attach_trial_artifacts

            if self._artifact_store is None:
                self._artifact_store = artifact_store_for(self.spec)
            attach_trial_artifacts(study, trial.number, result.trial_dir, self._artifact_store)
        except Exception as e:
            warnings.warn(f"trial {trial.number}: its files were not attached as artifacts: {e}", stacklevel=2)

    def _worst_value(self, study: optuna.Study, objective: Any) -> float:
        """A value for an infeasible trial that measured nothing: no better than anything measured."""
        if objective.direction == "maximize":
            return 0.0
        seen = [
            v for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if (v := t.user_attrs.get(objective.key)) is not None
        ]
        return float(max(seen) * 2 if seen else 1e9)

    def _tell_interrupted(
        self, study: optuna.Study, trial: optuna.Trial,
        reason: str = "stopped by Ctrl-C or SIGTERM; it is retried on resume",
    ) -> None:
        with contextlib.suppress(Exception):
            trial.set_user_attr("outcome", INTERRUPTED)
            trial.set_user_attr("reason", reason)
            study.tell(trial, state=TrialState.FAIL)
            self._retry(study, study.get_trials(deepcopy=False)[trial.number])

    # -- confirmation -----------------------------------------------------------------------------------
    def confirm(self, study: optuna.Study, launcher: Launcher, *, deadline: float | None = None) -> None:
        """Re-measure the top configurations and the baseline, interleaved, until each has ``repeats``
        confirmation runs; the summary then picks the best by the median of all its measurements. A run
        expected to end past ``deadline`` (this tuner's clock) is not started."""
        spec = self.spec.confirm
        if spec.top_k == 0:
            return
        groups = measured_groups(study, self.spec)
        if not groups:
            return
        candidates = top_groups(groups, self.spec, spec.top_k)
        baseline = _baseline_group(study, groups)
        if baseline is not None and all(g.config_key != baseline.config_key for g in candidates):
            candidates.append(baseline)
        done = {g.config_key: _confirm_count(study, g.config_key) for g in candidates}
        runs = sum(max(0, spec.repeats - done[g.config_key]) for g in candidates)
        if runs == 0:
            study.set_user_attr("autotune_confirmation", _confirmation_record(study, self.spec))
            return
        self.observer.confirming(runs)
        walls = _wall_times(study)
        expected = statistics.median(walls) if walls else 0.0
        for repeat in range(spec.repeats):
            for group in candidates:
                if done[group.config_key] > repeat:
                    continue
                if deadline is not None and self.clock() + expected > deadline:
                    break
                config = TrialConfig.model_validate(group.config)
                study.enqueue_trial(
                    self._admissible_params(config),
                    user_attrs={"role": ROLE_CONFIRM, "config": group.config, "confirms": group.trials[0]},
                    skip_if_exists=False,
                )
                self.run_one(study, launcher)
        study.set_user_attr("autotune_confirmation", _confirmation_record(study, self.spec))


def _ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():
        # Optuna notes that heartbeats are meant for Study.optimize; this loop records them itself.
        warnings.simplefilter("ignore", UserWarning)
        return study.ask()


class _Heartbeat:
    """Records the running trial's heartbeat in the storage every HEARTBEAT_INTERVAL_S."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, clock: Callable[[], float]) -> None:
        self.storage = study._storage
        self.trial_id = trial._trial_id
        self.clock = clock
        self.last = -math.inf

    def __call__(self) -> None:
        now = self.clock()
        if now - self.last >= HEARTBEAT_INTERVAL_S and hasattr(self.storage, "record_heartbeat"):
            self.last = now
            with contextlib.suppress(Exception):
                self.storage.record_heartbeat(self.trial_id)


@contextlib.contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """SIGTERM raises Interrupted(143) in the main thread (SIGINT already raises KeyboardInterrupt)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(143)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ----------------------------------------------------------------------------------------- reading results
def _clean(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _window_values(window: Sequence[Any], spec: StudySpec) -> list[float] | None:
    """A stored window's objective values, or None when one was not measured (it then cannot compare)."""
    index = {"throughput_samples_s": 1, "peak_memory_mb": 2, "loss": 3, "time_to_loss_s": 4}
    if any(o.key not in index or index[o.key] >= len(window) for o in spec.objectives):
        return None  # not stored per window (eval_loss; time_to_loss of an older trial): not compared
    values = [window[index[o.key]] for o in spec.objectives]
    return None if any(v is None for v in values) else [float(v) for v in values]


def measured_groups(study: optuna.Study, spec: StudySpec) -> list[Group]:
    """Feasible complete measurements grouped by configuration (search, baseline and confirm trials)."""
    return _measured_groups(study, spec.objectives[0].key)


def _wall_times(study: optuna.Study) -> list[float]:
    """Wall times of the finished baseline and search trials that ran (the cost of a trial here)."""
    return [
        float(t.user_attrs["wall_s"])
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if t.user_attrs.get("role") != ROLE_CONFIRM and t.user_attrs.get("wall_s")
    ]


def top_groups(groups: list[Group], spec: StudySpec, k: int) -> list[Group]:
    """The best ``k`` configurations by median of the first objective (Pareto-optimal ones first when
    there are several objectives)."""
    direction = spec.objectives[0].direction or "maximize"
    reverse = direction == "maximize"
    ranked = sorted(groups, key=lambda g: g.median, reverse=reverse)
    if len(spec.objectives) > 1:
        points = [_group_point(g, spec) for g in ranked]
        front = set(pareto_front(points, [o.direction or "maximize" for o in spec.objectives]))
        ranked = [g for i, g in enumerate(ranked) if i in front] + [g for i, g in enumerate(ranked) if i not in front]
    return ranked[:k]


def _group_point(group: Group, spec: StudySpec) -> list[float]:
    out = []
    for o in spec.objectives:
        if o.key == spec.objectives[0].key:
            out.append(group.median)
        elif o.key == "peak_memory_mb":
            out.append(group.peak_memory_mb if group.peak_memory_mb is not None else math.inf)
        elif o.key == "loss":
            out.append(group.loss if group.loss is not None else math.inf)
        else:
            out.append(math.nan)
    return out


def _baseline_group(study: optuna.Study, groups: list[Group]) -> Group | None:
    keys = {
        t.user_attrs.get("config_key")
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("role") == ROLE_BASELINE
    }
    return next((g for g in groups if g.config_key in keys), None)


def _confirm_count(study: optuna.Study, key: str) -> int:
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if t.user_attrs.get("role") == ROLE_CONFIRM
        and t.user_attrs.get("config_key") == key
        and t.user_attrs.get("outcome") != INTERRUPTED
    )


def chosen(study: optuna.Study, spec: StudySpec) -> Choice:
    """The study's choice (:func:`autotune.objectives.choose`) by the study file's first objective."""
    first = spec.objectives[0]
    return choose(study, first.key, first.direction or "maximize")


def _confirmation_record(study: optuna.Study, spec: StudySpec) -> dict[str, Any]:
    choice = chosen(study, spec)
    best = choice.best
    return {
        "best_trial": best.trials[0] if best else None,
        "best_config_key": best.config_key if best else None,
        "groups": [g.to_json() for g in choice.candidates],
        "baseline": choice.baseline.to_json() if choice.baseline else None,
        "speedup": choice.speedup,
        "default_is_best": choice.default_is_best,
        "metric": spec.objectives[0].key,
    }


def summarize(study: optuna.Study, spec: StudySpec) -> TuneSummary:
    """What the study has found so far: its one choice (confirmed once confirmation runs measured it)."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        if t.state in FINISHED:
            outcome = str(t.user_attrs.get("outcome", t.state.name.lower()))
            counts[outcome] = counts.get(outcome, 0) + 1
        else:
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    choice = chosen(study, spec)
    best = choice.best
    pareto: list[int] = []
    if len(spec.objectives) > 1:
        with contextlib.suppress(Exception):
            pareto = [t.number for t in study.best_trials]
    return TuneSummary(
        study=study,
        best_config=TrialConfig.model_validate(best.config) if best else None,
        best_trial=best.trials[0] if best else None,
        best=best,
        baseline=choice.baseline,
        speedup=choice.speedup,
        confirmed=choice.confirmed,
        counts=counts,
        pareto_trials=pareto,
        default_is_best=choice.default_is_best,
    )
