"""Telling and scoring: a trial's result stored on it and told to Optuna, and the pruning hooks.

The stored attributes are docs/storage.md's. A single-objective study reports every window to Optuna's
pruner; a multi-objective one asks autotune's own rule (:class:`autotune.pruners.DominancePruner`)
whether the running trial can still reach the front of the finished ones.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.compat import optuna_private
from autotune.errors import AutotuneError, LaunchError
from autotune.objectives import (
    GOODPUT,
    NOT_SCORED,
    constraint_values,
    goodput_attrs,
    is_reference,
    noise_scale_attr,
    noise_scale_of,
    objective_values,
    running_value,
    time_to_loss_attrs,
    window_extras,
)
from autotune.pruners import DominancePruner
from autotune.spec import StudySpec
from autotune.trial_result import Outcome, TrialResult, Window
from autotune.trial_runner import traced
from autotune.tuner._outage import raise_lost_stop, stop_taken, stop_waiting, whole
from autotune.tuner._recovery import Interrupted, ask, retry
from autotune.tuner._roles import INTERRUPTED
from autotune.tuner._storage import unless_down
from autotune.tuner._writes import set_user_attrs

# (study, trial number, trial folder): files as artifacts; returns the system attributes naming them, to write
Attach = Callable[[optuna.Study, int, str], dict[str, Any]]


def tell(spec: StudySpec, study: optuna.Study, trial: optuna.Trial, result: TrialResult, attach: Attach,
         paired: dict[str, Any] | None = None) -> None:
    """Store the result on the trial (docs/storage.md; with ``paired``, its ratio to the search's anchor) and finish
    it with the right state. A run that failed on a full disk is no verdict on its configuration: it is recorded
    as interrupted (retried on resume) and the run stops with one line (:class:`DiskFull`)."""
    _stop_if_disk_full(study, trial, result)
    attrs = {**result_attrs(spec, result), **time_to_loss_attrs(result, spec), **(paired or {})}
    study_noise = _study_noise(spec, study)  # goodput: for a trial that measured no noise scale of its own
    attrs.update(goodput_attrs(result, spec, study_noise))
    # The verdict first, so that the constraints go in the attributes' transaction.
    outcome = result.outcome
    values: list[float] | None = None
    state = TrialState.FAIL
    if outcome is Outcome.PRUNED:
        state = TrialState.PRUNED
    elif outcome in (Outcome.COMPLETE, Outcome.OOM, Outcome.DIVERGED):
        values = objective_values(result, spec.objectives, study_noise)
        if values is None and outcome is not Outcome.COMPLETE:
            values = [_worst_value(study, o) for o in spec.objectives]
        elif values is None and attrs.get(GOODPUT, 0.0) is None and result.throughput_samples_s is not None:
            attrs["reason"] = f"{result.reason}; {NOT_SCORED}"
        if values is not None:
            state = TrialState.COMPLETE
    # A pruned trial's constraints are as measured so far: a sampler that models pruned trials (gp) needs the
    # same constraints on every trial it fits.
    constraints = (
        constraint_values(result, spec.constraints.max_memory_mb) if state != TrialState.FAIL else None
    )
    with traced("artifacts", trial=trial.number):
        artifacts = attach(study, trial.number, result.trial_dir)
    with traced("attrs", trial=trial.number):
        set_user_attrs(trial, attrs, constraints, artifacts)  # one transaction, the artifacts' metadata in it
    if state == TrialState.COMPLETE:
        study.tell(trial, values)
    else:
        study.tell(trial, state=state)


def result_attrs(spec: StudySpec, result: TrialResult) -> dict[str, Any]:
    """What a trial's user attributes hold of its result (docs/storage.md), less time-to-loss's."""
    return {
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
        "machine_load": result.machine_load,
        "busy": result.busy,
        "gpu_other_processes": result.gpu_other_processes,
        "steps": result.steps,
        "samples": result.samples,
        "warmup_steps_used": result.warmup_steps_used,
        "settled": result.settled,
        "throughput_spread": _clean(result.throughput_spread),
        "step_anatomy": asdict(result.step_anatomy) if result.step_anatomy is not None else None,
        "step_anatomy_mean": asdict(result.step_anatomy_mean) if result.step_anatomy_mean is not None else None,
        "gradient_noise_scale": noise_scale_attr(result),
        "windows": [
            [w.step, _clean(w.throughput_samples_s), _clean(w.peak_memory_mb), _clean(w.loss), *extra]
            for w, extra in zip(result.windows, window_extras(result.windows, spec), strict=True)
        ],
        "trial_dir": result.trial_dir,
        "error_lines": result.error_lines[-15:],
    }


#: A trial folder's device with less free space than this, under a trial that did not end well: a full disk.
MIN_FREE_BYTES = 1 << 20


class DiskFull(AutotuneError):
    """A trial's folder ran out of space while it ran; the run stops (exit status 1)."""


def _stop_if_disk_full(study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
    full = out_of_space(result)
    if full is not None:
        tell_interrupted(study, trial, f"not finished: {full}; it is retried on resume")
        raise DiskFull(f"{full}; free space there and rerun: the trial is retried, finished trials are kept")


def out_of_space(result: TrialResult) -> str | None:
    """What a full disk cost ``result``, in words naming the folder, when its run did not end well and its
    folder's device has (almost) no space left; else None."""
    if result.outcome in (Outcome.COMPLETE, Outcome.PRUNED) or not result.trial_dir:
        return None
    folder = Path(result.trial_dir)
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    if stat.f_bavail * stat.f_frsize >= MIN_FREE_BYTES:
        return None
    mount = folder
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return (f"no space left on the device of {mount}: the trial's files (metrics, logs, result) in {folder} could "
            "not be written")


def _worst_value(study: optuna.Study, objective: Any) -> float:
    """A value for an infeasible trial that measured nothing: no better than anything measured."""
    if objective.direction == "maximize":
        return 0.0
    seen = [
        v for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (v := t.user_attrs.get(objective.key)) is not None
    ]
    return float(max(seen) * 2 if seen else 1e9)


def tell_interrupted(
    study: optuna.Study, trial: optuna.Trial, reason: str = "stopped by Ctrl-C or SIGTERM; it is retried on resume",
) -> bool:
    """Fail a trial this tuner stopped (not the configuration's fault) and queue it again. The run is stopping:
    an unreachable storage is not waited for (:func:`~autotune.tuner._outage.stop_waiting`). False when the trial
    could not be recorded: it stays RUNNING until the next run fails it (its tuner gone) and queues it again."""
    stop_waiting()
    try:
        trial.set_user_attr("outcome", INTERRUPTED)
        trial.set_user_attr("reason", reason)
        study.tell(trial, state=TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return True  # already finished: recorded before (run_guarded, the race), or failed as stale elsewhere
    except Exception:
        return False
    with contextlib.suppress(Exception):
        retry(study, study.get_trials(deepcopy=False)[trial.number])
    return True


class Untold:
    """A run's trials from Optuna's ask until they are told, so that Ctrl-C or SIGTERM records them wherever it
    lands: while the next trial is claimed and configured, while one launches or trains, while its result is
    told, while a race's entrants start one after another (not only inside the launch, which
    :func:`run_guarded` covers)."""

    def __init__(self) -> None:
        self._trials: dict[int, tuple[optuna.Study, optuna.Trial]] = {}

    def own(self, study: optuna.Study, trial: optuna.Trial) -> optuna.Trial:
        self._trials[trial.number] = (study, trial)
        return trial

    def ask(self, study: optuna.Study) -> optuna.Trial:
        """Optuna's next trial, taken as this run's in one piece: a stop between the two left it RUNNING. First a
        checkpoint: a stop swallowed while the last trial was told stops the run here."""
        raise_lost_stop()
        with whole():
            return self.own(study, ask(study))

    def told(self, trial: optuna.Trial) -> None:
        self._trials.pop(trial.number, None)

    def stopped(self, stop: BaseException) -> Interrupted:
        """Record every trial not yet told as interrupted (a search trial queued again with its configuration;
        one already recorded, by :func:`run_guarded` or the race, is left as it is), so that none is left
        RUNNING; then the :class:`Interrupted` to raise, saying whether a trial was stopped."""
        stop_taken()  # in hand: no checkpoint raises it again while the stopped trials are recorded
        stopped = sorted(self._trials)
        recorded = [tell_interrupted(*self._trials.pop(number)) for number in stopped]
        return Interrupted(stop.exit_code if isinstance(stop, Interrupted) else 130, trial_stopped=bool(stopped),
                           recorded=all(recorded))


def pruning_hook(
    spec: StudySpec, study: optuna.Study, trial: optuna.Trial, *, prune: bool
) -> Callable[[Window], bool] | None:
    """The monitor's window callback. Every trial of a single-objective study reports its windows (the
    baseline's are the first comparison of the ``best`` pruner); only search trials (``prune``) are ever
    pruned."""
    objectives = spec.objectives
    if len(objectives) == 1:
        objective = objectives[0]
        prune = prune and spec.pruner.name != "none"
        # time_to_loss: the estimate from the windows so far; goodput: with the noise scale so far
        config = trial.user_attrs.get("config")
        value_of = running_value(objective, config=config, study_noise=_study_noise(spec, study))

        def single(window: Window) -> bool:
            decided: list[bool] = []

            def report() -> None:
                try:
                    trial.report(value_of(window), report_step(spec, window))
                except optuna.exceptions.UpdateFinishedTrialError:
                    # another worker failed it as stale meanwhile and runs it again: this run stops here, and
                    # its tell says so (tell_unless_stale) instead of ending the worker with a traceback
                    decided.append(True)
                    return
                decided.append(prune and bool(trial.should_prune()))

            with traced("report", trial=trial.number):
                # While the storage is away the trial runs on under its limits, unreported (its windows are
                # stored with its result); its pruning resumes with the storage.
                unless_down(optuna_private.storage_of(study), report)
            return bool(decided and decided[0])

        return single
    if spec.pruner.name == "none" or not prune:
        return None
    startup = spec.pruner.n_startup_trials
    rule = DominancePruner(
        [o.direction or "maximize" for o in objectives], n_startup_trials=3 if startup is None else startup
    )
    samples = spec.trial.samples is not None  # compare at equal samples seen: step x global batch

    def at(t: FrozenTrial, step: Any) -> int:
        return int(step) * int(t.user_attrs.get("config", {}).get("global_batch", 1)) if samples else int(step)

    finished = [
        [(at(t, w[0]), values) for w in t.user_attrs.get("windows", []) if (values := window_values(w, spec))]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if is_reference(t)
    ]

    config, study_noise = trial.user_attrs.get("config"), _study_noise(spec, study)
    values_of = [running_value(o, config=config, study_noise=study_noise) for o in objectives]

    def multi(window: Window) -> bool:
        values = [value_of(window) for value_of in values_of]
        return rule.should_prune(report_step(spec, window), values, finished)

    return multi


def report_step(spec: StudySpec, window: Window) -> int:
    """The step a window's value is reported at: its optimizer step, or with ``trial.samples`` set the
    samples seen, so trials of different global batches compare at equal samples."""
    return window.samples if spec.trial.samples is not None else window.step


def _study_noise(spec: StudySpec, study: optuna.Study) -> float | None:
    """The study's gradient noise scale (the median of its complete trials' own) when it is scored on goodput."""
    return noise_scale_of(study) if any(o.metric == "goodput" for o in spec.objectives) else None


def _clean(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def window_values(window: Sequence[Any], spec: StudySpec) -> list[float] | None:
    """A stored window's objective values, or None when one was not measured (it then cannot compare)."""
    index = {"throughput_samples_s": 1, "peak_memory_mb": 2, "loss": 3, "time_to_loss_s": 4}
    if any(o.key not in index or index[o.key] >= len(window) for o in spec.objectives):
        return None  # not stored per window (eval_loss; time_to_loss of an older trial): not compared
    values = [window[index[o.key]] for o in spec.objectives]
    return None if any(v is None for v in values) else [float(v) for v in values]


def run_guarded(study: optuna.Study, trial: optuna.Trial, launch: Callable[[], TrialResult]) -> TrialResult:
    """``launch()``'s result; when it does not return one, the trial is finished with why before the exception
    goes on: interrupted by Ctrl-C/SIGTERM (:class:`Interrupted`, 130 for Ctrl-C), interrupted and retried on
    resume when autotune could not start it (:class:`LaunchError`: its folder, the launcher; no verdict on the
    configuration), failed when autotune itself failed."""
    try:
        return launch()
    except (KeyboardInterrupt, Interrupted) as stop:
        tell_interrupted(study, trial)
        if isinstance(stop, Interrupted):
            raise
        raise Interrupted(130) from None
    except LaunchError as e:
        tell_interrupted(study, trial, f"not started: {e}; it is retried on resume")
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            trial.set_user_attr("outcome", Outcome.CRASHED.value)
            trial.set_user_attr("reason", "autotune failed while running this trial")
            study.tell(trial, state=TrialState.FAIL)
        raise


def tell_unless_stale(
    tell: Callable[[optuna.Study, optuna.Trial, TrialResult], None], study: optuna.Study, trial: optuna.Trial,
    result: TrialResult,
) -> bool:
    """Tell the result; False when another worker had failed this trial as stale meanwhile (our heartbeat lapsed,
    e.g. a frozen machine) and queued it again: the study keeps that retry, this run's result stays in its
    folder."""
    try:
        tell(study, trial, result)
    except optuna.exceptions.UpdateFinishedTrialError:
        warnings.warn(
            f"trial {trial.number} was failed as stale by another worker while it ran; its result is kept "
            f"in {result.trial_dir} only, the study re-runs it",
            stacklevel=3,
        )
        return False
    return True
