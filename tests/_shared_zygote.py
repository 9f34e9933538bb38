"""One warm zygote for every in-process study of a test session (an xdist worker), instead of one per run.

A test that runs a study in the worker's own process (`calibrate()`, the CLI through tests/_cli.py, a
`Tuner`) gets a fresh `WarmLauncher`, as the product does, and that launcher starts a zygote: 2-3 CPU-seconds
of importing torch, about 80 times in a suite run. Here a launcher borrows the session's zygote instead,
when its trials' environment key (the study's `env:` values) is the one the zygote started under, and
leaves it running when it closes. Everything else of the launcher stays its own: its leases, its lease
folder, its subreaper role; every trial's leader still takes the request's environment and folder (the
zygote's own are the session's, taken when the session began, so no test's mark rides along).

What stays on the product's path: every `autotune run` subprocess (its own zygote, started before the
workload is imported), and a test marked `own_zygote`: one that checks the zygote's own start or end, or runs
two launchers at once from two threads (each pins its zygote to its leased cores as it forks a trial).
"""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.search_space import TrialConfig
from autotune.trial_runner import TrialPlan, WarmLauncher
from autotune.trial_runner._local import die_with_tuner, launched, trial_environment

READY_TIMEOUT_S = 300.0  # a loaded machine imports torch slowly


class SharedZygote:
    """The session's zygote: started under the session's environment in a folder of its own, lent to every
    warm launcher whose environment key is empty, started again if a trial took it down."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # what a study's first trial gives the product's zygote (one rank, no `env:` values), taken now
        config = TrialConfig.create(base_lr=0.01, base_batch_size=32, batch_size=32, world_size=1)
        self.env = trial_environment(TrialPlan(config=config, entrypoint="none:build", base_dir=str(folder)))
        self.proc: subprocess.Popen[bytes] | None = None

    def get(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        return self.proc

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from autotune.trial_runner._zygote import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.folder, env=self.env,
            start_new_session=True, preexec_fn=die_with_tuner,
        )
        launched(proc.pid)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        if not line or not json.loads(line).get("ready"):
            proc.kill()
            raise RuntimeError(f"the session's zygote did not start: {line!r}")
        return proc

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def lent(shared: SharedZygote) -> Iterator[None]:
    """Inside: every WarmLauncher borrows ``shared`` where its environment key allows."""
    spawn, close_zygote = WarmLauncher._spawn, WarmLauncher._close_zygote

    def borrowing_spawn(self: WarmLauncher, plan: Any) -> subprocess.Popen[bytes]:
        if self._env_key(plan) == () and (self._zygote is None or getattr(self, "_borrowed", False)):
            self._zygote, self._zygote_env, self._ready = shared.get(), (), True
            self._borrowed = True  # type: ignore[attr-defined]
            return self._zygote
        if getattr(self, "_borrowed", False):  # another environment: this launcher starts its own from now on
            self._zygote, self._borrowed = None, False  # type: ignore[attr-defined]
        return spawn(self, plan)

    def returning_close(self: WarmLauncher) -> None:
        if getattr(self, "_borrowed", False):
            self._zygote, self._borrowed = None, False  # type: ignore[attr-defined]
            return
        close_zygote(self)

    WarmLauncher._spawn = borrowing_spawn  # type: ignore[method-assign]
    WarmLauncher._close_zygote = returning_close  # type: ignore[method-assign]
    try:
        yield
    finally:
        WarmLauncher._spawn, WarmLauncher._close_zygote = spawn, close_zygote  # type: ignore[method-assign]
