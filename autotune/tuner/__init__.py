"""The tuner: the loop that runs a study's trials, and the Optuna side of the study it stores them in.

``Tuner(spec).run()`` runs (or resumes) a study: the baseline, the sampler's trials with pruning, the
confirmation runs; :func:`summarize` reads the chosen configuration back (the choice is
:func:`autotune.objectives.choose`'s). ``replay_runner``/``recorded_runner`` are the seam that runs the
real tuner on a landscape instead of launches (benchmarks, tests).
"""

from autotune.tuner._artifacts import attach_trial_artifacts
from autotune.tuner._confirmation import confirmation_record, top_groups
from autotune.tuner._entrants import block_steps
from autotune.tuner._exhausted import EXHAUSTED_ATTR
from autotune.tuner._fingerprint import compare_fingerprints, describe_fingerprint, study_fingerprint
from autotune.tuner._loop import Tuner
from autotune.tuner._memory import not_launched, predict_memory
from autotune.tuner._observer import Observer
from autotune.tuner._recovery import Interrupted, gone_from_here
from autotune.tuner._replay import Drift, Landscape, Measured, NoLaunch, recorded_runner, replay_runner
from autotune.tuner._results import TuneSummary, chosen, measured_groups, summarize
from autotune.tuner._roles import FINISHED, INTERRUPTED, ROLE_BASELINE, ROLE_CONFIRM, ROLE_SEARCH, counts_toward_budget
from autotune.tuner._second_look import SECOND_LOOK
from autotune.tuner._stop_rule import STOP_AFTER, BrokenWorkload, BrokenWorkloadError, find_broken
from autotune.tuner._storage import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S, make_storage, release_storages, study_lock
from autotune.tuner._study import FINGERPRINT_ATTR, feasible, machine_facts, open_study, read_study
from autotune.tuner._telling import pruning_hook
from autotune.tuner._warm_start import WARM_START_ATTR, WarmStart, warm_start_line

__all__ = [
    "EXHAUSTED_ATTR",
    "FINGERPRINT_ATTR",
    "FINISHED",
    "GRACE_PERIOD_S",
    "HEARTBEAT_INTERVAL_S",
    "INTERRUPTED",
    "ROLE_BASELINE",
    "ROLE_CONFIRM",
    "ROLE_SEARCH",
    "SECOND_LOOK",
    "STOP_AFTER",
    "WARM_START_ATTR",
    "BrokenWorkload",
    "BrokenWorkloadError",
    "Drift",
    "Interrupted",
    "Landscape",
    "Measured",
    "NoLaunch",
    "Observer",
    "TuneSummary",
    "Tuner",
    "WarmStart",
    "attach_trial_artifacts",
    "block_steps",
    "chosen",
    "compare_fingerprints",
    "confirmation_record",
    "counts_toward_budget",
    "describe_fingerprint",
    "feasible",
    "find_broken",
    "gone_from_here",
    "machine_facts",
    "make_storage",
    "measured_groups",
    "not_launched",
    "open_study",
    "predict_memory",
    "pruning_hook",
    "read_study",
    "recorded_runner",
    "release_storages",
    "replay_runner",
    "study_fingerprint",
    "study_lock",
    "summarize",
    "top_groups",
    "warm_start_line",
]
