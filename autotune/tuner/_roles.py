"""What a stored trial is to the tuner: its role (baseline, search, confirm), which states are finished,
and whether it counts toward the budget."""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

ROLE_BASELINE, ROLE_SEARCH, ROLE_CONFIRM = "baseline", "search", "confirm"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
INTERRUPTED = "interrupted"


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished baseline/search trials count; trials failed because their tuner died are retried instead."""
    if trial.user_attrs.get("role", ROLE_SEARCH) == ROLE_CONFIRM:
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and trial.user_attrs.get("outcome") not in (None, INTERRUPTED)
