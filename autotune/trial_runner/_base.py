"""The launcher abstraction: how a trial's ranks are started and stopped.

A new launcher (Kubernetes, say) is one new file implementing :class:`Launcher` and :class:`RunHandle`.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from pathlib import Path

import psutil

from autotune.trial_runner._plan import TrialPlan


class RunHandle(abc.ABC):
    """A started trial. The monitor polls it, reads its processes, and ends it.

    All methods are called from the thread that launched the run.
    """

    @abc.abstractmethod
    def poll(self) -> int | None:
        """The run's exit status once every rank has exited, else None. Never blocks."""

    @abc.abstractmethod
    def processes(self) -> list[psutil.Process]:
        """Every live process of this run on this machine (launcher, ranks, DataLoader workers).

        Used to know what to kill (:meth:`terminate` calls it); the monitor does not poll it (it polls
        :meth:`rank_processes`). Processes seen once are remembered by the handle, so an orphaned
        DataLoader worker is still found later.
        """

    @abc.abstractmethod
    def rank_processes(self) -> dict[int, list[psutil.Process]]:
        """The live processes of each local rank: the rank itself first, then its descendants.

        Called by the monitor every poll interval when there is a memory budget, to measure each rank's
        memory (rank + DataLoader workers) against it.
        """

    @abc.abstractmethod
    def terminate(self, grace_s: float) -> None:
        """End the run: SIGTERM to every process (and process group), ``grace_s`` to leave, then SIGKILL.

        Returns when nothing of the run is left. Safe to call more than once and after a normal exit
        (then it only sweeps stragglers).
        """

    def held(self) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
        """The cores (numbers) and GPUs (as CUDA_VISIBLE_DEVICES names them) of this machine the run holds,
        for measuring what else used them (``machine_load``); None when the run is not on this machine or
        the launcher does not know (then the load is not measured)."""
        return None

    def exit_summary(self) -> str:
        """A short human account of how the launcher saw the ranks end (e.g. 'rank 1 killed by SIGSEGV')."""
        return ""

    def diagnose(self) -> str:
        """Called when the monitor is about to end a run that stopped making progress (hang, timeout), before
        ``terminate``: a cause the launcher knows and the ranks cannot report, e.g. a node that is gone
        (``node NAME: ...``), which makes the trial crashed rather than hung. '' when it knows none."""
        return ""


class Launcher(abc.ABC):
    """Starts trials. One instance serves a whole study.

    ``launch`` is called once per trial, after the tuner has written the plan to ``trial_dir/config.json``;
    it must return quickly (the monitor does the waiting) and must start the run so that:

    - every rank runs ``python -m autotune.trial_runner.worker TRIAL_DIR`` with RANK, WORLD_SIZE,
      LOCAL_RANK, LOCAL_WORLD_SIZE and a torch.distributed rendezvous set up;
    - stdout/stderr of the launcher itself go to files in ``trial_dir`` (ranks write their own logs);
    - the run can be ended by :meth:`RunHandle.terminate` without leaving any process behind, and it
      ends by itself if the tuner process dies (even by SIGKILL).

    ``close`` is called once when the study is done (release pools or allocations). A launcher may not
    change the plan; it may refuse it with :class:`~autotune.errors.LaunchError` (e.g. world size larger
    than the allocation).
    """

    name: str = "launcher"

    @abc.abstractmethod
    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        """Start the trial described by ``plan`` and return its handle."""

    def prepare(self, plan: TrialPlan) -> None:  # noqa: B027 - optional hook
        """Called once before the study's first trial, with the plan of a typical one (the baseline's): start
        what later launches reuse, so its cost is not paid inside the first trial. Errors are raised by the
        launch that needs it, not here."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release anything held across trials."""

    #: Whether runs of this launcher can be paced: alive together, one measured at a time, the others frozen
    #: between their blocks (a confirmation race). Only launchers whose runs live on this machine can.
    paces: bool = False

    @contextlib.contextmanager
    def sharing(self, plan: TrialPlan) -> Iterator[None]:
        """Inside it, the runs launched hold one lease together (a race's runs, only one of which runs at a
        time) instead of each waiting for the others' cores. Launchers that lease nothing do nothing."""
        yield
