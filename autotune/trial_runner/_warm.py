"""The warm local launcher: ranks forked from an interpreter that already imported torch.

A cold torchrun trial spends 3.5 s (one rank) to 6 s (four ranks) before its first step, most of it
importing torch and torch._dynamo in every rank. This launcher keeps one warm process (the zygote, see
``_zygote.py``) per study and forks each trial from it, keeping the contract of the launcher base class:
the same worker program, torch.distributed's env:// rendezvous, a process session per trial, and
nothing left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import psutil

from autotune.errors import LaunchError
from autotune.trial_runner._base import RunHandle
from autotune.trial_runner._lease import LeaseBoard
from autotune.trial_runner._local import (
    MachineLauncher,
    ProcessTreeHandle,
    launched,
    trial_environment,
)
from autotune.trial_runner._plan import LAUNCHER_ERR_FILE as ERR_FILE
from autotune.trial_runner._plan import LAUNCHER_EXIT_FILE as EXIT_FILE
from autotune.trial_runner._plan import TrialPlan
from autotune.trial_runner._process import die_with_tuner

READY_TIMEOUT_S = 120.0
REPLY_TIMEOUT_S = 30.0


class _Leader:
    """A trial's leader process, which is the zygote's child, not ours: a Popen look-alike for it."""

    def __init__(self, pid: int, trial_dir: Path) -> None:
        self.pid = pid
        self.trial_dir = trial_dir
        self.returncode: int | None = None
        try:
            self._proc: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._proc = None

    def _running(self) -> bool:
        if self._proc is None:
            return False
        try:
            return self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._running():
            return None
        try:
            self.returncode = int((self.trial_dir / EXIT_FILE).read_text().strip())
        except (OSError, ValueError):
            self.returncode = -signal.SIGKILL  # gone without a word: killed
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"leader {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code

    def kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(psutil.Error):
                self._proc.kill()


class WarmLauncher(MachineLauncher):
    """Forks each trial from a warm zygote. The default local launcher (``launcher.kind: local``)."""

    name = "local"

    def __init__(
        self, env: dict[str, str] | None = None, leases: LeaseBoard | None = None, lease_timeout_s: float | None = None
    ) -> None:
        super().__init__(env, leases, lease_timeout_s)
        self._zygote: subprocess.Popen[bytes] | None = None
        self._zygote_env: tuple[tuple[str, str], ...] = ()
        self._ready = False  # the zygote said it imported what ranks need

    @staticmethod
    def _env_key(plan: TrialPlan) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(plan.config.env.items()))

    def _start(self, plan: TrialPlan) -> subprocess.Popen[bytes]:
        """The zygote for ``plan``'s environment, started if need be, once it is ready to fork."""
        zygote = self._spawn(plan)
        if not self._ready:
            reply = self._read(zygote, READY_TIMEOUT_S)
            if not reply.get("ready"):
                self.close()
                raise LaunchError(f"the warm trial launcher did not start: {reply}")
            self._ready = True
        return zygote

    def _spawn(self, plan: TrialPlan) -> subprocess.Popen[bytes]:
        """Start the zygote for ``plan``'s environment unless it runs; does not wait for it to be ready."""
        # The study's env: variables may be read once, when a library loads (OMP_WAIT_POLICY when torch
        # loads libgomp): ranks forked from a zygote started under other values would not see them.
        if self._zygote is not None and self._env_key(plan) != self._zygote_env:
            self._close_zygote()
        self._zygote_env = self._env_key(plan)
        if self._zygote is not None and self._zygote.poll() is None:
            return self._zygote
        env = trial_environment(plan, self.extra_env)
        try:
            zygote = subprocess.Popen(
                # not "-m": the package already imported the module, and runpy warned so on every run
                [sys.executable, "-c", "from autotune.trial_runner._zygote import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                cwd=plan.base_dir,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_tuner,
            )
        except OSError as e:
            raise LaunchError(f"cannot start the warm trial launcher: {e}") from e
        launched(zygote.pid)
        self._zygote, self._ready = zygote, False
        return zygote

    def _read(self, zygote: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
        stdout: IO[bytes] | None = zygote.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            self.close()
            raise LaunchError(f"the warm trial launcher did not answer within {timeout:.0f} s")
        line = stdout.readline()
        if not line:
            code = zygote.wait(timeout=5)
            self._zygote = None
            # Its stderr is this process's (the trial's launcher.err is written by the leader it forks, which
            # did not start): say how it ended, the one thing known here.
            how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
            raise LaunchError(f"the warm trial launcher (pid {zygote.pid}) {how} before it started the trial; "
                              "its own messages, if any, are above in this output")
        data: dict[str, Any] = json.loads(line)
        return data

    def prepare(self, plan: TrialPlan) -> None:
        """Start the zygote now and return: it imports torch while the tuner opens the study; the first launch
        waits for it to be ready. A failure is the first launch's error."""
        with contextlib.suppress(LaunchError, OSError):
            self._spawn(plan)

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        lease = self.lease(plan, trial_dir)
        try:
            zygote = self._start(plan)
            lease.pin(zygote.pid)  # the trial's leader is forked now and inherits the leased cores
            request = {
                "trial_dir": str(trial_dir),
                "world_size": plan.config.world_size,
                "env": trial_environment(plan, {**lease.env(plan.config.world_size), **self.extra_env}),
                "cwd": plan.base_dir,
            }
            stdin = zygote.stdin
            assert stdin is not None
            try:
                stdin.write((json.dumps(request) + "\n").encode())
                stdin.flush()
            except OSError as e:
                self._zygote = None
                raise LaunchError(f"the warm trial launcher is gone: {e}") from e
            reply = self._read(zygote, REPLY_TIMEOUT_S)
        except BaseException:
            lease.release()
            raise
        leader = _Leader(int(reply["pid"]), trial_dir)
        return ProcessTreeHandle(leader, trial_dir, trial_dir / ERR_FILE, lease=lease)  # type: ignore[arg-type]

    def close(self) -> None:
        try:
            self._close_zygote()
        finally:
            super().close()

    def _close_zygote(self) -> None:
        zygote, self._zygote = self._zygote, None
        if zygote is None:
            return
        if not self._ready:
            # Never asked to fork (the study failed to open, the run ended before its first trial): it may
            # still be importing torch, which closing its stdin would wait out (2.5 s of a refused storage's
            # 5 s error). It has started nothing: end it now.
            with contextlib.suppress(OSError):
                os.killpg(zygote.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                zygote.wait(timeout=5)
            return
        try:
            if zygote.stdin is not None:
                zygote.stdin.close()
            zygote.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(OSError):
                os.killpg(zygote.pid, signal.SIGKILL)
            zygote.wait(timeout=5)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
