"""A worker frozen in the middle of a write (SIGSTOP here; a paused VM, a swapped-out host) holds its trial's row
lock inside an open transaction. Another worker failing that trial as stale must not wait on that lock forever:
the server ends the frozen session once it has sat in its transaction for the heartbeat grace period
(autotune/tuner/_storage.py, ``idle_in_transaction_s``), and the lock goes with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.tuner._storage import GRACE_ENV, make_storage

GRACE_S = 3

FROZEN = """
import os, signal, sys
from sqlalchemy import text
from autotune.tuner._storage import make_storage

storage = make_storage(sys.argv[1])
with storage._backend._backend.engine.connect() as conn:  # autotune's own engine (Optuna's cache over the RDB)
    conn.execute(text("SELECT * FROM trials WHERE trial_id = :t FOR UPDATE"), {"t": int(sys.argv[2])})
    print("locked", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen inside the transaction, its lock held
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the trial is asked for outside Study.optimize
def test_a_worker_frozen_mid_write_does_not_hold_its_trials_lock_past_the_grace_period(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GRACE_ENV, str(GRACE_S))
    storage = make_storage(postgres_url)
    study = optuna.create_study(storage=storage, study_name=f"frozen-{os.getpid()}")
    trial_id = study.ask()._trial_id
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN, postgres_url, str(trial_id)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, GRACE_ENV: str(GRACE_S)})
    try:
        assert frozen.stdout is not None and frozen.stderr is not None
        assert frozen.stdout.readline().strip() == "locked", frozen.stderr.read()
        started = time.monotonic()
        # what a worker failing the trial as stale does (the RDB storage takes the trial's row FOR UPDATE)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        waited = time.monotonic() - started
    finally:
        frozen.send_signal(signal.SIGKILL)
        frozen.wait(timeout=10)
    assert storage.get_trial(trial_id).state == TrialState.FAIL
    # the frozen session was ended at the grace period (its lock with it), not held until the frozen process goes
    assert GRACE_S - 1 <= waited <= GRACE_S + 30, waited
