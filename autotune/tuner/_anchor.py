"""The search's anchor: the baseline configuration kept alive as a paced run, measured in one short block after
each search trial, so that every search trial is judged and fitted by its ratio to readings taken at the same time
(autotune/objectives/_margin.py says what is stored; the pruner and the default sampler read it).

The anchor starts before the first search trial, once the baseline trial has measured the configuration (its
speed sets the block's steps: ``confirm.block_s`` at that speed, as a race's blocks). It is frozen (SIGSTOP, as a
race's entrants are: autotune/trial_runner/_pace.py) while a trial runs, so the two never measure each other (it
holds the machine's cores, a live launcher's lease, only while it starts and during its blocks), and
thawed for one block (half a race's, :data:`ANCHOR_BLOCK`) right after each trial ends, before the trial is
told: that block is the trial's reading after and the next trial's reading before. Its cost is its start (a
launch and a warm-up, once) and one block a trial, recorded as the study attribute ``autotune_anchor``
(``seconds``). It ends with the search, before the confirmation.

The anchor runs where a race can (a launcher whose runs live on this machine and pace, or a replay that offers
``paced``), on the CPU (a frozen run keeps its device memory: on a GPU the anchor would share it with every
trial), for a single throughput objective pruned by ``best``, ``median`` or ``percentile``. Anywhere else nothing
changes: trials are judged and fitted on their own readings.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import optuna

from autotune.objectives import Paired
from autotune.search_space import TrialConfig
from autotune.spec import StudySpec
from autotune.trial_result import Outcome, TrialResult
from autotune.trial_runner import Launcher, PacedRun, TrialPlan, plan_for
from autotune.trial_runner import run_trial as live_run_trial
from autotune.tuner._confirmation import _baseline_group
from autotune.tuner._entrants import Entrant, EntrantFailed, OpenEntrant, block_steps, block_timeout
from autotune.tuner._observer import Observer
from autotune.tuner._results import measured_groups
from autotune.tuner._roles import ROLE_BASELINE, ROLE_SEARCH

THROUGHPUT = "throughput_samples_s"
PAIRED_PRUNERS = ("best", "median", "percentile")
#: The anchor's block, as a share of a race's (``confirm.block_s``): 0.25 s at the defaults. On the 2-core VM one
#: 0.25 s block of the quickstart's MLP scattered 11-15%, one of 0.5 s 9.4-12.5% (benchmarks/README.md, the
#: confirmation race): half the cost a trial for a fifth more noise, which the pruner's margin takes in.
ANCHOR_BLOCK = 0.5
#: One anchor block's relative deviation until three blocks measured it: about what a 0.25 s block of the
#: quickstart's MLP scattered on the 2-core VM (11-15% a block, drift included), so the first paired judgements
#: prune only what is 25% or more behind.
PRIOR_BLOCK_NOISE = 0.1
#: A block this far below the anchor's recent ones was disturbed (the confirmation race's rule: a fifth or more).
DISTURBED = 0.2


def can_pair(spec: StudySpec) -> bool:
    """Whether the study's search is paired with an anchor: one throughput objective, a noise-aware pruner."""
    return (len(spec.objectives) == 1 and spec.objectives[0].key == THROUGHPUT
            and spec.pruner.name in PAIRED_PRUNERS)


class Anchor:
    """The baseline configuration, paced, between a study's search trials (module docstring). Every method is a
    no-op when the study is not paired, or once the anchor failed (the search goes on unpaired)."""

    def __init__(self, spec: StudySpec, open_entrant: OpenEntrant | None, observer: Observer,
                 sharing: Callable[[TrialPlan], AbstractContextManager[None]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec, self.observer, self.clock = spec, observer, clock
        self._open, self._sharing = open_entrant, sharing
        self._entrant: Entrant | None = None
        self._plan: TrialPlan | None = None
        self.readings: list[float] = []
        self.seconds = 0.0  # the anchor's own cost: its start and its blocks
        self.key: str | None = None
        self.failed: str | None = None
        self.disturbed = 0  # blocks read again: far below the anchor's last ones

    @classmethod
    def for_study(cls, spec: StudySpec, run_trial: Callable[..., TrialResult], launcher: Launcher,
                  observer: Observer, clock: Callable[[], float] = time.monotonic) -> Anchor:
        """The study's anchor: opened by the replay's ``paced`` or the live launcher's paced runs (module
        docstring), or one that does nothing."""
        if not can_pair(spec):
            return cls(spec, None, observer, clock=clock)
        paced = getattr(run_trial, "paced", None)
        if paced is not None:  # a replay (one may keep its search unpaired, to compare)
            return cls(spec, paced if getattr(run_trial, "paired", True) else None, observer, clock=clock)
        if run_trial is live_run_trial and launcher.paces:
            return cls(spec, lambda plan, folder: PacedRun(launcher, plan, folder), observer, launcher.sharing, clock)
        return cls(spec, None, observer, clock=clock)

    @property
    def pairs(self) -> bool:
        return self._open is not None and self.failed is None

    def before(self, study: optuna.Study, role: str, starting: Callable[[], None] | None = None) -> dict[str, Any]:
        """The attributes a trial is launched with: for a search trial, the anchor's latest block and its noise
        (the anchor is started first when it has not been, after ``starting``: the start takes seconds of the
        trial's time, in which the trial must already be its run's for another run that opens the study, to name
        that run at work and not take the trial for one whose tuner died before recording itself on it)."""
        if role != ROLE_SEARCH or not self.pairs:
            return {}
        if self._entrant is None:
            if starting is not None:
                starting()
            self._start(study)
        if not self.readings or not self.pairs:
            return {}
        noise = Paired.block_noise(self.readings)
        return {Paired.BEFORE: self.readings[-1], Paired.NOISE: PRIOR_BLOCK_NOISE if noise is None else noise}

    def record(self, trial: optuna.Trial, result: TrialResult) -> dict[str, Any]:
        """As a trial is told: :meth:`after`'s attributes, stored with its result (in its transaction)."""
        return self.after(trial, str(trial.user_attrs.get("role", ROLE_SEARCH)), result)

    def after(self, trial: optuna.Trial, role: str, result: TrialResult) -> dict[str, Any]:
        """The attributes a trial is told with: a search trial's anchor speed around it (a block read now, after
        it) and its ratio to it; the baseline's ratio is 1 (it is the anchor's configuration)."""
        if self._open is None:
            return {}
        speed = result.throughput_samples_s if result.throughput_samples_s and result.throughput_samples_s > 0 else None
        if role == ROLE_BASELINE and self.pairs and speed is not None and result.outcome is Outcome.COMPLETE:
            return {Paired.RATIO: 1.0, Paired.SPEED: speed}
        before = trial.user_attrs.get(Paired.BEFORE) if role == ROLE_SEARCH else None
        if not isinstance(before, (int, float)) or not result.windows:
            return {}
        anchor = Paired.around(float(before), self._read())
        return {Paired.SPEED: anchor, Paired.RATIO: speed / anchor if speed is not None else None}

    def close(self, study: optuna.Study) -> None:
        """End the anchor's run and record it (the study attribute ``autotune_anchor``). The record is best effort:
        the search may be ending on a Ctrl-C or a storage that is gone, whose error is the one to raise."""
        entrant, self._entrant, self._open = self._entrant, None, None
        if entrant is None:
            return
        if self.failed is None:
            entrant.close()
        with contextlib.suppress(Exception):
            study.set_user_attr(Paired.STUDY_ATTR, {"config_key": self.key, "blocks": self.readings,
                                                    "seconds": round(entrant.wall_s, 3), "failed": self.failed,
                                                    "tuner_s": round(self.seconds, 3), "disturbed": self.disturbed})

    def _start(self, study: optuna.Study) -> None:
        if self._open is None:
            return
        groups = measured_groups(study, self.spec)
        baseline = _baseline_group(study, groups)
        if baseline is None:
            self.failed = "the baseline was not measured"
            return
        config = TrialConfig.model_validate(baseline.config)
        if config.device != "cpu" and self._sharing is not None:  # frozen, it would hold its device memory
            self._open = None
            return
        # At least a reporting window's steps, what the pruner compares: the baseline's speed is one reading, and
        # on a busy machine (a quickstart read 278 samples/s where the race read 1,548) it made 1-step blocks.
        steps = max(block_steps(ANCHOR_BLOCK * self.spec.confirm.block_s, baseline.median, config),
                    self.spec.trial.window())
        plan = plan_for(self.spec, config, evaluate=False).model_copy(update={"pace_steps": steps})
        began = self.clock()
        self._plan = plan
        try:
            with self._leased():
                self._entrant = self._open(plan, self.spec.runs_dir() / "anchor")
                self.key = baseline.config_key
                self._entrant.start(float(self.spec.trial.max_seconds))
        except (EntrantFailed, RuntimeError, OSError) as e:
            self._fail(f"could not start: {e}")
            return
        finally:
            self.seconds += self.clock() - began
        self.observer.note(f"paired search: the baseline kept alive as the anchor, measured in one block of "
                           f"{steps} steps after each trial; trials are judged by their ratio to it")
        self._read()

    def _read(self) -> float | None:
        """One block of the anchor (None, and the anchor ended, when it fails). A block more than
        :data:`DISTURBED` below the median of the anchor's last blocks (seconds apart: the drift between two is a
        few percent) read something else holding the machine: one more block is read in its place, once."""
        reading = self._block()
        recent = self.readings[-3:]
        if reading is not None and len(recent) >= 2 and reading < (1 - DISTURBED) * statistics.median(recent):
            self.disturbed += 1
            reading = self._block()
        if reading is not None:
            self.readings.append(reading)
        return reading

    def _block(self) -> float | None:
        if self._entrant is None or self.failed is not None:
            return None
        began = self.clock()
        try:
            with self._leased():
                return self._entrant.block(block_timeout(self.spec)).window_throughput_samples_s
        except (EntrantFailed, RuntimeError, OSError) as e:
            self._fail(f"failed: {e}")
            return None
        finally:
            self.seconds += self.clock() - began

    def _leased(self) -> AbstractContextManager[None]:
        """The machine's cores held while the anchor starts or runs a block (a live launcher's lease, as a trial's;
        released while it is frozen, so that a trial, this study's or another's, can lease them)."""
        if self._sharing is None or self._plan is None:
            return contextlib.nullcontext()
        return self._sharing(self._plan)

    def _fail(self, why: str) -> None:
        self.failed = why
        self.observer.note(f"the search's anchor {why}; trials are judged on their own readings from here")
        with contextlib.suppress(Exception):
            if self._entrant is not None:
                self._entrant.close()


@contextlib.contextmanager
def anchored(spec: StudySpec, study: optuna.Study, run_trial: Callable[..., TrialResult], launcher: Launcher,
             observer: Observer) -> Iterator[Anchor]:
    """The study's anchor (:meth:`Anchor.for_study`) for the search inside, closed (its run ended, its record
    stored) as the search ends."""
    anchor = Anchor.for_study(spec, run_trial, launcher, observer)
    try:
        yield anchor
    finally:
        anchor.close(study)
