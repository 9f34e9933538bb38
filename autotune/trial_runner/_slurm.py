"""The SLURM launcher: each trial is one ``srun`` job step running one torchrun per node.

``srun --nodes=N --ntasks-per-node=1`` starts the node program (``_slurm_node.py``, run by its path: it
imports nothing of autotune, to start fast) on every node of the step (inside
the tuner's allocation when ``SLURM_JOB_ID`` is set, else srun asks for an allocation of its own with
``--exclusive``, ``--partition`` and ``--time``). The program on node 0 picks a free port and publishes
``address:port`` (and its hostname) in the trial folder; the address is one the other nodes reach
(``node_address``: GLOO_SOCKET_IFNAME's interface, else a non-loopback address). The other nodes first
check that they can reach it, and every node then becomes ``torchrun --nnodes=N --nproc-per-node=W/N
--rdzv-backend=c10d --rdzv-endpoint=address:port --local-addr=<its own address>``, so the ranks meet
through torch.distributed's own rendezvous. SLURM_PROCID and SLURM_NTASKS reach the ranks too; they
read RANK and WORLD_SIZE, which torchrun sets. A node that cannot take part says why on one line,
``autotune: node K (HOST): ...``, which becomes the trial's reason.

The trial folder must be on a file system every node sees (it is where config.json, metrics and logs
are). Ending a trial cancels its step (``scancel``) and kills the local srun, so nothing is left on any
node; when the tuner dies, srun gets SIGTERM and SLURM cancels the step.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from autotune.errors import LaunchError
from autotune.trial_runner import _slurm_node
from autotune.trial_runner._base import Launcher, RunHandle
from autotune.trial_runner._exit import summarize_torchrun_failure
from autotune.trial_runner._local import (
    ProcessTreeHandle,
    become_subreaper,
    trial_environment,
    with_trial_env,
)
from autotune.trial_runner._plan import TrialPlan
from autotune.trial_runner._process import die_with_tuner
from autotune.trial_runner._slurm_node import ENDPOINT_PREFIX, NODE_ERROR_RE, STEP_FILE, node_main

__all__ = ["ENDPOINT_PREFIX", "NODE_PROGRAM", "STEP_FILE", "SlurmLauncher", "SlurmStepHandle"]

NODE_PROGRAM = Path(_slurm_node.__file__)  # run by its path on every node: it imports nothing of autotune
COMMAND_TIMEOUT_S = 30.0


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LaunchError(f"{name} not found; install slurm-client or use launcher.kind: local")
    return path


class SlurmLauncher(Launcher):
    """srun job steps, one torchrun per node and a c10d rendezvous.

    Args:
        nodes: nodes per trial; a trial's world size must be a multiple of it (ranks per node = W / nodes).
        partition, time_limit: for the allocation srun asks for when the tuner runs outside one.
        srun_args: extra srun arguments, appended last.
        env: extra environment for the ranks.
    """

    name = "slurm"

    def __init__(
        self,
        nodes: int = 1,
        partition: str | None = None,
        time_limit: str | None = None,
        srun_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.srun = _which("srun")
        self.scancel = _which("scancel")
        self.squeue = _which("squeue")
        self.nodes = nodes
        self.partition = partition
        self.time_limit = time_limit
        self.srun_args = tuple(srun_args)
        self.extra_env = env or {}
        self.kill_wait_s = self._kill_wait()
        become_subreaper()

    @property
    def in_allocation(self) -> bool:
        return bool(os.environ.get("SLURM_JOB_ID"))

    def _kill_wait(self) -> float:
        """The cluster's KillWait: how long SLURM waits between SIGTERM and SIGKILL when cancelling."""
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            return 30.0
        try:
            out = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True,
                                 timeout=COMMAND_TIMEOUT_S, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return 30.0
        match = re.search(r"^KillWait\s*=\s*(\d+)", out, re.M)
        return float(match.group(1)) if match else 30.0

    def ranks_per_node(self, world_size: int) -> int:
        if world_size % self.nodes:
            raise LaunchError(
                f"world_size {world_size} is not divisible by launcher.nodes {self.nodes}; "
                f"use world sizes that are multiples of {self.nodes}"
            )
        return world_size // self.nodes

    def command(self, plan: TrialPlan, trial_dir: Path, job_name: str) -> list[str]:
        per_node = self.ranks_per_node(plan.config.world_size)
        cmd = [
            self.srun,
            f"--job-name={job_name}",
            f"--nodes={self.nodes}",
            f"--ntasks={self.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "--export=ALL",
        ]
        if not self.in_allocation:
            cmd.append("--exclusive")  # whole nodes: a trial is never measured beside another job
            if self.partition:
                cmd.append(f"--partition={self.partition}")
            if self.time_limit:
                cmd.append(f"--time={self.time_limit}")
        cmd += [*self.srun_args, sys.executable, "-P", str(NODE_PROGRAM),
                str(trial_dir), str(self.nodes), str(per_node)]
        return cmd

    def environment(self, plan: TrialPlan) -> dict[str, str]:
        env = trial_environment(plan, self.extra_env)
        # srun needs the tuner's SLURM_* (the allocation, SLURM_CONF); each node sizes its own threads.
        env.update({k: v for k, v in os.environ.items() if k.startswith("SLURM_")})
        if "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in self.extra_env:
            env.pop("OMP_NUM_THREADS", None)
        # A threads_per_rank number reaches every node's torchrun (node_main keeps a set OMP_NUM_THREADS).
        return with_trial_env(env, plan)

    def launch(self, plan: TrialPlan, trial_dir: Path) -> RunHandle:
        job_name = f"autotune-{trial_dir.name}-{uuid.uuid4().hex[:8]}"
        cmd = self.command(plan, trial_dir, job_name)
        # Ranks on other nodes cannot see the tuner's pid; srun ending the step stands in for that watch.
        plan.model_copy(update={"tuner_pid": None}).write(trial_dir)
        out, err = trial_dir / "launcher.out", trial_dir / "launcher.err"
        try:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=plan.base_dir,
                    env=self.environment(plan),
                    start_new_session=True,
                    preexec_fn=die_with_tuner,
                )
        except OSError as e:
            raise LaunchError(f"cannot start srun for {trial_dir}: {e}") from e
        return SlurmStepHandle(proc, trial_dir, err, self, job_name)


class SlurmStepHandle(ProcessTreeHandle):
    """A trial's srun (a local process) and its job step (on any node).

    Ranks that run on this machine are found through their pid files and checked against their command
    line (a pid from another node may name an unrelated local process); their memory is watched like a
    local trial's. Ranks elsewhere are ended by SLURM.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], trial_dir: Path, log_err: Path, launcher: SlurmLauncher, job_name: str
    ) -> None:
        super().__init__(proc, trial_dir, log_err)
        self.launcher = launcher
        self.job_name = job_name
        self.own_allocation = not launcher.in_allocation

    def _rank_pids(self) -> dict[int, int]:
        local = {}
        for rank, pid in super()._rank_pids().items():
            with contextlib.suppress(psutil.Error):
                if _runs_trial(psutil.Process(pid), self.trial_dir):
                    local[rank] = pid
        return local

    def processes(self) -> list[psutil.Process]:
        for pid in self._rank_pids().values():
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(pid).parent()
                if parent is not None and _runs_trial(parent, self.trial_dir):
                    self._remember(parent)  # the node's torchrun (slurmstepd's child, not ours)
        return super().processes()

    def step(self) -> str | None:
        """``JOBID.STEPID`` once the step runs (node 0 wrote it), else None."""
        with contextlib.suppress(OSError):
            text = (self.trial_dir / STEP_FILE).read_text().strip()
            if re.fullmatch(r"\d+(_\d+)?\.\d+", text):
                return text
        return None

    def _scancel(self, *args: str) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([self.launcher.scancel, *args], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=COMMAND_TIMEOUT_S, check=False)

    def _cancel(self, signal_name: str | None = None) -> None:
        """Cancel (or signal) this trial's step; srun's own allocation goes with it."""
        opts = [f"--signal={signal_name}"] if signal_name else []
        step = self.step()
        if step is not None:
            self._scancel(*opts, step.split(".")[0] if self.own_allocation and not signal_name else step)
        elif self.own_allocation:
            self._scancel(*opts, f"--name={self.job_name}")  # still pending, or node 0 not started yet

    def still_queued(self) -> bool:
        """Whether squeue still lists this trial's step (or its own job)."""
        step = self.step()
        if step is not None:
            args = ["-h", "-s", "-o", "%i", "-j", step.split(".")[0]]
        elif self.own_allocation:
            args = ["-h", "-o", "%i", f"--name={self.job_name}"]
        else:
            return False
        try:
            out = subprocess.run([self.launcher.squeue, *args], stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=COMMAND_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if out.returncode != 0:
            return False  # the job is gone: squeue refuses an unknown job id
        listed = out.stdout.split()
        return bool(listed) if step is None else step in listed

    def terminate(self, grace_s: float) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # srun: "forcing job termination", the step is ended
        self._cancel()
        deadline = time.monotonic() + grace_s + self.launcher.kill_wait_s + 5
        while time.monotonic() < deadline and (self.proc.poll() is None or self.still_queued()):
            time.sleep(0.1)
        if self.proc.poll() is None or self.still_queued():
            self._cancel("KILL")
            self._cancel()
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.still_queued():
                time.sleep(0.2)
        super().terminate(min(grace_s, 1.0))  # stragglers on this machine, and srun itself

    def exit_summary(self) -> str:
        """A node's own account first (the node program's ``autotune: node K (HOST): ...``, srun's ``Node
        failure on HOST``), then torchrun's failure reports of every node."""
        try:
            text = self.log_err.read_text(errors="replace")
        except OSError:
            return ""
        own = NODE_ERROR_RE.search(text)
        if own:
            return own.group(1)
        lost = _NODE_FAILURE_RE.search(text)
        if lost:
            return f"node {lost.group(1)}: SLURM reports a node failure (its slurmd stopped answering)"
        return summarize_torchrun_failure(text)

    def diagnose(self) -> str:
        """The step's nodes that SLURM lists as not responding or down, when the run stopped making progress."""
        step = self.step()
        if step is None:
            return ""
        nodes = _command([self.launcher.squeue, "-h", "-s", "-o", "%N", "-j", step.split(".")[0]])
        listed = [line.split()[0] for line in nodes.splitlines() if line.strip()]
        if not listed or not (sinfo := shutil.which("sinfo")):
            return ""
        states = _command([sinfo, "-h", "-N", "-o", "%N %T", "-n", ",".join(listed)])
        bad = []
        for line in states.splitlines():
            name, _, state = line.partition(" ")
            if state.endswith("*") or state.strip().lower().startswith(("down", "fail")):
                bad.append(f"{name} ({state.strip()})")
        if not bad:
            return ""
        return f"node {', '.join(bad)}: not responding to SLURM"


_NODE_FAILURE_RE = re.compile(r"^srun: error: Node failure on (\S+)", re.M)


def _command(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


def _runs_trial(proc: psutil.Process, trial_dir: Path) -> bool:
    try:
        return str(trial_dir) in proc.cmdline()
    except psutil.Error:
        return False


if __name__ == "__main__":  # the node program's former entry point (``-m autotune.trial_runner._slurm``)
    node_main(sys.argv)
