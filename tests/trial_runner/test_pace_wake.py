"""A paced run's wake pipe: rank 0 parking at a block's end wakes the tuner's wait through it, the tuner does not
look for the end by polling, and a pipe nobody reads never holds a rank up."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from autotune.trial_runner._pace import Gate, Wake
from autotune.trial_runner._plan import GATE_FILE, PARKED_FILE, WAKE_FILE


def _park(folder: Path, blocks: int) -> bool:
    """Rank 0 of a run in another process, stopping at the gate after ``blocks`` blocks (the gate lets it on)."""
    pid = os.fork()
    if pid == 0:  # the rank: no pytest past this point
        try:
            os._exit(0 if Gate(folder, 0).wait(blocks) else 3)
        except BaseException:
            os._exit(4)
    return os.waitpid(pid, 0)[1] == 0


def test_a_rank_parking_wakes_the_tuner_through_the_pipe(tmp_path: Path) -> None:
    wake = Wake(tmp_path / WAKE_FILE)
    try:
        (tmp_path / GATE_FILE).write_text("2")
        assert not wake.wait(0)  # nothing parked yet: a wait ends by its timeout
        assert _park(tmp_path, 1)
        # The byte is in the pipe: the wait returns at once, however long it was willing to sleep (were the pipe
        # not written, this wait would end by its timeout, and return False).
        assert wake.wait(60) and wake.woken == 1
        assert (tmp_path / PARKED_FILE).read_text() == "1"
        # Read out, and with the rank's end closed the pipe is not "hung up": the next wait sleeps again instead of
        # returning at every call (which would make the tuner's wait a busy loop).
        assert not wake.wait(0.05) and wake.woken == 1 and wake.wakeups == 3
    finally:
        wake.close()
    assert not (tmp_path / WAKE_FILE).exists()
    wake.close()  # a second close does nothing


def test_a_waiting_tuner_sleeps_until_the_rank_parks(tmp_path: Path) -> None:
    wake = Wake(tmp_path / WAKE_FILE)
    (tmp_path / GATE_FILE).write_text("1")
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(wake.wait(60)))
    try:
        waiter.start()
        assert Gate(tmp_path, 0).wait(0)
        waiter.join(timeout=60)
        assert woken == [True] and wake.wakeups == 1  # one wake-up: the park, not a look every few ms
    finally:
        wake.close()


def test_a_pipe_nobody_reads_does_not_hold_a_rank_up(tmp_path: Path) -> None:
    (tmp_path / GATE_FILE).write_text("5")
    assert Gate(tmp_path, 0).wait(1)  # no pipe at all (a run started without a PacedRun)
    wake = Wake(tmp_path / WAKE_FILE)
    for blocks in range(2, 5):  # the tuner does not read (it is busy elsewhere): the bytes wait in the pipe
        assert Gate(tmp_path, 0).wait(blocks)
    assert wake.wait(0) and wake.woken == 1  # all of them read at once
    wake.close()
    (tmp_path / WAKE_FILE).mkdir()  # not a pipe (nor anything a rank can write): the parked file still says it
    assert Gate(tmp_path, 0).wait(4) and (tmp_path / PARKED_FILE).read_text() == "4"
