"""The tuning loop: baseline first, then sampler-suggested trials, pruning, confirmation and resume.

The loop (:class:`Tuner`), the decisions (Optuna's sampler and pruner, or autotune's own
multi-objective rule) and the execution (a :class:`~autotune.trial_runner.Launcher`) are three objects
passed to each other. Everything is stored in the Optuna study (docs/storage.md), so a study can be
resumed, read by dashboards, or shared by several tuners. Recovery, telling, confirmation and reading
results back live in their own modules of this package; the loop calls them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import optuna
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.trial import TrialState

from autotune.compat import optuna_private
from autotune.objectives import Group, MemoryPrediction, config_key
from autotune.samplers import preload_gp
from autotune.search_space import SearchSpace, TrialConfig, study_space
from autotune.spec import StudySpec
from autotune.trial_result import TrialResult, Window
from autotune.trial_runner import Launcher, make_launcher, plan_for, run_trial, trace_event, traced
from autotune.tuner._anchor import Anchor, anchored
from autotune.tuner._artifacts import TrialArtifacts
from autotune.tuner._confirmation import confirm, confirm_reserve_s
from autotune.tuner._exhausted import REREAD, SpaceExhausted, before_ask
from autotune.tuner._memory import gate as memory_gate
from autotune.tuner._memory import predict_memory, prediction_attrs
from autotune.tuner._observer import Observer
from autotune.tuner._params import admissible_params, record_params
from autotune.tuner._race import race_confirmation
from autotune.tuner._recovery import (
    Heartbeat,
    Interrupted,
    others_at_work,
    recover,
    signals_as_interrupts,
    supersede_queued_confirmations,
    worker_identity,
)
from autotune.tuner._results import TuneSummary, summarize
from autotune.tuner._roles import ROLE_BASELINE, ROLE_CONFIRM, ROLE_SEARCH, counts_toward_budget
from autotune.tuner._second_look import SECOND_LOOK
from autotune.tuner._stop_rule import check as check_broken_workload
from autotune.tuner._storage import study_lock
from autotune.tuner._study import open_study
from autotune.tuner._telling import Untold, pruning_hook, run_guarded, tell, tell_unless_stale
from autotune.tuner._warm_start import warm_start
from autotune.tuner._writes import set_user_attrs

WAIT_FOR_OTHERS_S = 1.0  # a worker whose budget is taken by running trials elsewhere re-checks this often


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
            tests: :func:`autotune.tuner.replay_runner`), where a result comes from a landscape instead of
            a launch. Everything else is the live study's code path.
        sampler, pruner: Optuna's, instead of the study file's (a benchmark's peers, a user's own sampler);
            the baseline, the budget, confirmation and the choice stay autotune's.
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
        sampler: BaseSampler | None = None,
        pruner: BasePruner | None = None,
    ) -> None:
        self.spec = spec
        self._run_trial = run_trial
        self._sampler, self._pruner = sampler, pruner
        self.space: SearchSpace = study_space(spec)
        self.launcher = launcher
        self.storage_url = storage_url
        self.observer = observer or Observer()
        self._anchor = Anchor(spec, None, self.observer)  # the search's: run() opens one where it pairs
        self.clock = clock
        self.identity = worker_identity()
        self._artifacts = TrialArtifacts(spec)
        self._handed_over = False  # the GP's hand-over to TPE was said in this run
        self._mine = Untold()  # this run's trials, asked for and not yet told: what a Ctrl-C/SIGTERM records

    # -- public ---------------------------------------------------------------------------------------
    def open(self) -> optuna.Study:
        return open_study(self.spec, self.space, self.storage_url, sampler=self._sampler, pruner=self._pruner)

    def run(self, n_trials: int | None = None, timeout_s: float | None = None) -> TuneSummary:
        """Run until the study holds ``n_trials`` finished trials (baseline included; default: the study
        file's budget, where null is no limit) or ``timeout_s`` passed, then confirm.

        The confirmation runs are inside ``timeout_s``: the search leaves them their expected time (the median
        trial's wall each, at most half of ``timeout_s``); one that would end past it is not started. Without limits
        it runs until Ctrl-C. Ctrl-C/SIGTERM raises :class:`Interrupted` once the stopped trial is recorded.
        """
        trace_event("tuner_run", time.time())
        target = n_trials or self.spec.budget.n_trials
        timeout_s = timeout_s if timeout_s is not None else self.spec.budget.timeout_s
        launcher = self.launcher or make_launcher(self.spec)
        with signals_as_interrupts():
            try:
                study = self._start(launcher)
                deadline = None if timeout_s is None else self.clock() + timeout_s
                with anchored(self.spec, study, self._run_trial, launcher, self.observer) as self._anchor:
                    self._search(study, launcher, target, timeout_s, deadline)  # paired (tuner/_anchor.py)
                trace_event("search_end", time.time())
                # One worker confirms; the others leave it the study (their summary is not confirmed yet).
                with study_lock(self.url, f"{study.study_name}:confirm", wait=False) as mine:
                    if mine:
                        self.confirm(study, launcher, deadline=deadline)
            except (Interrupted, KeyboardInterrupt) as stop:
                raise self._mine.stopped(stop) from None
            finally:
                if self.launcher is None:
                    launcher.close()
        summary = summarize(study, self.spec, confirming_elsewhere=not mine)  # mine: the confirmation lock
        self.observer.finished(summary)
        return summary

    def _start(self, launcher: Launcher) -> optuna.Study:
        """Open the study, recover what a dead run left, queue the baseline once; the launcher's zygote and the
        GP's modules load meanwhile."""
        try:
            loader = self._prepare(launcher)
            study = self.open()
            self.recover(study)
            supersede_queued_confirmations(study, self.url)  # unless another run is confirming now
            for line in others_at_work(study, self.identity):  # a second run on one study says so
                self.observer.note(line)
            with study_lock(self.url, study.study_name):  # workers started together queue one baseline
                self.ensure_baseline(study)
            if loader is not None:
                with traced("preload_gp"):
                    loader.join(timeout=120)
            return study
        except KeyboardInterrupt:
            raise Interrupted(130, trial_stopped=False) from None  # no trial of ours runs: nothing to record

    def _search(
        self, study: optuna.Study, launcher: Launcher, target: int | None, timeout_s: float | None,
        deadline: float | None,
    ) -> None:
        """Claim and run trials until ``target`` trials count, the deadline less the reserve, or none is new."""
        done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
        self.observer.study_opened(study, target, done)
        index = 0
        while target is None or done < target:
            reserve = confirm_reserve_s(study, self.spec, timeout_s)
            if deadline is not None and self.clock() + reserve > deadline:
                break
            try:
                with traced("claim"):  # recovery, the study lock, the sampler's fit (ask)
                    trial = self.claim(study, target)
                if trial is None:  # the rest of the budget runs in other workers: wait, in case one dies
                    time.sleep(WAIT_FOR_OTHERS_S)  # and its trial comes back to the queue
            except SpaceExhausted:
                break
            except KeyboardInterrupt:
                raise Interrupted(130, trial_stopped=False) from None  # none of ours runs: nothing to record
            if trial is not None:
                index += 1
                self.run_one(study, launcher, index=index, target=target, trial=trial)
                with traced("after_trial", trial=trial.number):
                    check_broken_workload(study, self.spec.source)  # the same crash each time: stop
            done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))

    def _prepare(self, launcher: Launcher) -> threading.Thread | None:
        """Before the study is opened, side by side: the launcher starts what its launches reuse (the warm
        launcher's zygote, importing torch in its own process) and a thread of this process imports the GP
        sampler's modules and what its first fit loads (returned, to join before the first trial); neither is
        then paid inside or between trials."""
        with traced("prepare_study"):
            loader = None
            if self.spec.sampler.name == "gp":
                loader = threading.Thread(target=preload_gp, name="autotune-preload-gp", daemon=True)
                loader.start()
            launcher.prepare(plan_for(self.spec, self.space.default_config(self.spec.baseline)))
            return loader

    @property
    def url(self) -> str:
        return self.storage_url or self.spec.storage_url()

    def claim(self, study: optuna.Study, target: int | None) -> optuna.Trial | None:
        """The next trial, unless ``target`` is taken by trials that count and trials running anywhere.

        Counting and asking happen under the study lock, so workers sharing a study never run more than
        ``target`` trials between them (a dead worker's trial is failed, queued again, and run by another).
        A configuration pruned near the best is queued for a second look first; with every configuration of the
        space measured, one is queued to be read again (:func:`autotune.tuner._exhausted.before_ask`).
        """
        self.recover(study)
        with study_lock(self.url, study.study_name):
            taken = sum(
                counts_toward_budget(t)
                or (t.state == TrialState.RUNNING and t.user_attrs.get("role") != ROLE_CONFIRM)
                for t in study.get_trials(deepcopy=False)
            )
            if target is not None and taken >= target:
                return None
            before_ask(study, self.spec, self.observer)
            return self._mine.ask(study)

    # -- recovery and baseline ------------------------------------------------------------------------
    def recover(self, study: optuna.Study) -> list[int]:
        """Fail trials left RUNNING by a dead tuner and queue them again. Returns their numbers
        (:func:`autotune.tuner._recovery.recover`)."""
        return recover(study, self.identity)

    def ensure_baseline(self, study: optuna.Study) -> None:
        """Queue the workload's default configuration as the first trial, once per study, then the warm
        start's configurations (:func:`autotune.tuner._warm_start.warm_start`)."""
        if any(t.user_attrs.get("role") == ROLE_BASELINE for t in study.get_trials(deepcopy=False)):
            return
        config = self.space.default_config(self.spec.baseline)
        study.enqueue_trial(
            admissible_params(self.space, config), user_attrs={"role": ROLE_BASELINE, "config": config.model_dump()}
        )
        started = warm_start(study, self.spec, self.space, config)
        if started.line:
            self.observer.warm_started(started.line)

    # -- one trial ------------------------------------------------------------------------------------
    def run_one(
        self, study: optuna.Study, launcher: Launcher, *, index: int = 0, target: int | None = None,
        trial: optuna.Trial | None = None,
    ) -> TrialResult:
        prepared = time.time()
        trial = trial or self._mine.ask(study)
        role = str(trial.user_attrs.get("role", ROLE_SEARCH))
        config, prediction = self._configure(study, trial, role)
        trial_dir = self.spec.runs_dir() / f"trial-{trial.number:04d}"
        self.observer.trial_started(trial.number, role, config, index, target)
        with traced("memory_gate", trial=trial.number):  # predicted over the budget: told, not launched
            skipped = memory_gate(self.spec, study, trial, prediction, role, trial_dir, self.tell)
        if skipped is not None:
            self.observer.trial_finished(trial.number, role, config, skipped)
            return skipped
        on_window = pruning_hook(self.spec, study, trial, prune=role == ROLE_SEARCH)  # the monitor's window callback
        beat = Heartbeat(study, trial, self.clock)
        trace_event("prepare", prepared, time.time(), trial=trial.number)  # suggest, the config's attrs

        def on_tick(elapsed: float, windows: list[Window]) -> None:
            beat()
            self.observer.trial_progress(elapsed, windows)

        def launch() -> TrialResult:
            # Heartbeats from a thread too: a launch may wait (for a core lease) longer than the grace period.
            with optuna_private.heartbeat_thread(trial, study), traced(
                "run_trial", trial=trial.number, trial_dir=str(trial_dir)
            ):
                plan = plan_for(self.spec, config, evaluate=self.spec.evaluates(searching=role != ROLE_CONFIRM))
                return self._run_trial(plan, trial_dir, launcher, max_memory_mb=self.spec.constraints.max_memory_mb,
                                       on_window=on_window, on_tick=on_tick)

        result = run_guarded(study, trial, launch)
        with traced("tell", trial=trial.number):
            if tell_unless_stale(self.tell, study, trial, result):
                self.observer.trial_finished(trial.number, role, config, result)
        return result

    def _configure(
        self, study: optuna.Study, trial: optuna.Trial, role: str
    ) -> tuple[TrialConfig, MemoryPrediction | None]:
        """The trial's configuration, queued (the baseline, a confirmation, a retry, a second look) or suggested by
        the sampler, and its predicted memory: stored on the trial with the sampler that proposed it."""
        sampler = None  # the sampler that proposed the configuration, recorded on the trials it proposed
        if ("config" in trial.user_attrs and role != ROLE_SEARCH) or {"retry_of", SECOND_LOOK} & set(trial.user_attrs):
            config = TrialConfig.model_validate(trial.user_attrs["config"])
            record_params(self.space, trial, config)
        else:
            with traced("suggest", trial=trial.number):  # the sampler's fit and search, a commit per knob
                config = self.space.suggest(trial)
            if not {"warm_start", REREAD} & set(trial.user_attrs):  # queued (an earlier study's best, a re-read)
                sampler = self._sampler_of(study, trial.number)
        key = config_key(config.model_dump())
        prediction = predict_memory(self.spec, study, config.model_dump())
        attrs = {"role": role, "config": config.model_dump(), "config_key": key, "worker": self.identity,
                 **prediction_attrs(prediction)}
        attrs |= self._anchor.before(study, role, starting=lambda: set_user_attrs(trial, {"worker": self.identity}))
        with traced("config_attrs", trial=trial.number):
            set_user_attrs(trial, attrs if sampler is None else {**attrs, "sampler": sampler})
        return config, prediction

    def _sampler_of(self, study: optuna.Study, number: int) -> str:
        """The sampler that proposed search trial ``number``: the study file's, or ``tpe`` past the GP's
        hand-over, which the observer is told of once a run."""
        of = getattr(study.sampler, "sampler_of", None)
        name = str(of(number)) if of is not None else self.spec.sampler.name
        if name != self.spec.sampler.name and not self._handed_over:
            self._handed_over = True
            after = getattr(study.sampler, "max_trials", None)
            self.observer.note(
                f"trial #{number}: the GP's ask grows with every trial, so past {after} finished trials TPE proposes "
                "the rest of the study (docs/reference/sampler.md)"
            )
        return name

    def tell(self, study: optuna.Study, trial: optuna.Trial, result: TrialResult) -> None:
        """Store the result (docs/storage.md; its ratio to the anchor, read now), its files as artifacts; finish it."""
        tell(self.spec, study, trial, result, self._artifacts, self._anchor.record(trial, result))
        self._mine.told(trial)

    # -- confirmation -----------------------------------------------------------------------------------
    def confirm(self, study: optuna.Study, launcher: Launcher, *, deadline: float | None = None) -> None:
        """Race the top configurations against the baseline where the launcher paces its runs
        (:mod:`autotune.tuner._race`), else re-measure them and the baseline, interleaved
        (:mod:`autotune.tuner._confirmation`). Nothing expected to end past ``deadline`` is started."""
        supersede_queued_confirmations(study)  # each run below is queued and taken at once: none may be ahead

        def queue(group: Group, race: bool = False) -> None:
            config = TrialConfig.model_validate(group.config)
            attrs = {"role": ROLE_CONFIRM, "config": group.config, "confirms": group.trials[0]}
            extra = {"race": True} if race else {}
            study.enqueue_trial(admissible_params(self.space, config), user_attrs={**attrs, **extra},
                                skip_if_exists=False)

        def rerun(group: Group) -> None:
            queue(group)
            self.run_one(study, launcher)

        def enter(group: Group) -> optuna.Trial:
            queue(group, race=True)
            trial = self._mine.ask(study)
            record_params(self.space, trial, TrialConfig.model_validate(group.config))
            set_user_attrs(trial, {"config_key": config_key(group.config), "worker": self.identity})
            return trial

        if not race_confirmation(study, self.spec, self._run_trial, launcher, enter=enter, observer=self.observer,
                                 tell=lambda trial, result: self.tell(study, trial, result), clock=self.clock,
                                 deadline=deadline):
            confirm(study, self.spec, rerun, observer=self.observer, clock=self.clock, deadline=deadline)
