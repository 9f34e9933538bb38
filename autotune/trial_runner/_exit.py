"""How a run that ended by itself went: the ranks' error records, done.json and the launcher's own report."""

from __future__ import annotations

import contextlib
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.trial_result import Outcome, RecordError
from autotune.trial_runner._base import RunHandle
from autotune.trial_runner._plan import DONE_FILE, ERRORS_DIR
from autotune.trial_runner._records import DoneRecord, RankErrorRecord, read_record


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _log_tail(trial_dir: Path, rank: int, lines: int = 12) -> list[str]:
    try:
        text = (trial_dir / f"rank{rank}.log").read_text(errors="replace")
    except OSError:
        return []
    found = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("Extension modules:")]
    fatal = next((i for i, ln in enumerate(found) if ln.startswith("Fatal Python error")), None)
    if fatal is not None:  # a crash dump (faulthandler): the signal and the innermost frames
        return found[fatal : fatal + lines]
    return found[-lines:]


def rank_hosts(trial_dir: Path) -> list[str]:
    """The hostname each rank ran on, by rank (its rank<N>.host); "" for a rank that never started."""
    hosts: dict[int, str] = {}
    for path in trial_dir.glob("rank*.host"):
        with contextlib.suppress(ValueError, OSError):
            hosts[int(path.stem.removeprefix("rank"))] = path.read_text().strip()
    return [hosts.get(rank, "") for rank in range(max(hosts) + 1)] if hosts else []


def _rank_on_host(trial_dir: Path) -> Callable[[object], str]:
    """``rank N``, and ``rank N on HOST`` when the trial's ranks ran on more than one host."""
    hosts = rank_hosts(trial_dir)
    several = len({h for h in hosts if h}) > 1

    def name(rank: object) -> str:
        index = int(rank) if isinstance(rank, (int, str)) and str(rank).isdigit() else -1
        if several and 0 <= index < len(hosts) and hosts[index]:
            return f"rank {rank} on {hosts[index]}"
        return f"rank {rank}"

    return name


def classify_exit(trial_dir: Path, handle: RunHandle) -> tuple[Outcome, str, list[str], DoneRecord | None]:
    """How a run that ended by itself went: (outcome, reason, error lines, done.json or None).

    A launcher's account that names a node (``node K (HOST): ...``, a multi-node launcher's) is the cause
    of whatever the ranks recorded afterwards; a rank's is named with its host when ranks ran on several.
    A done.json or an error record that does not parse makes the trial crashed, with the file and field named.
    """
    try:
        done = read_record(trial_dir / DONE_FILE, DoneRecord)
        errors = [
            record
            for path in sorted((trial_dir / ERRORS_DIR).glob("rank*.json"))
            if (record := read_record(path, RankErrorRecord)) is not None
        ]
    except RecordError as e:
        return Outcome.CRASHED, f"a rank's record does not parse: {e}", [], None
    errors.sort(key=lambda r: r.time)
    if done is not None and not errors:
        return Outcome(done.outcome), done.reason, [], done
    return _from_errors(trial_dir, handle, errors, done)


def _from_errors(
    trial_dir: Path, handle: RunHandle, errors: list[RankErrorRecord], done: DoneRecord | None
) -> tuple[Outcome, str, list[str], DoneRecord | None]:
    who = _rank_on_host(trial_dir)
    exit_summary = handle.exit_summary()
    oom = [e for e in errors if e.kind == "oom"]
    if oom:
        return Outcome.OOM, f"{who(oom[0].rank)}: out of memory", oom[0].lines, done
    first = exit_summary.split(";")[0]
    if first.startswith("node "):  # a node failed (left the step, lost its slurmd, cannot reach node 0)
        return Outcome.CRASHED, first, _launcher_tail(trial_dir), done
    crash_signal = "killed by" in first and not first.endswith(("SIGTERM", "SIGINT", "SIGHUP"))
    if crash_signal:  # SIGSEGV and the like: the cause, whatever the other ranks recorded afterwards
        rank = int(first.split("rank ", 1)[1].split()[0])
        return Outcome.CRASHED, first.replace(f"rank {rank}", who(rank), 1), _log_tail(trial_dir, rank), done
    primary = [e for e in errors if e.kind not in ("peer", "timeout")]
    if primary:
        e = primary[0]
        return Outcome.CRASHED, f"{who(e.rank)}: {e.type}: {e.message}", e.lines, done
    timeouts = [e for e in errors if e.kind == "timeout"]
    if timeouts:
        return Outcome.HANG, f"{who(timeouts[0].rank)}: a collective timed out", timeouts[0].lines, done
    if errors:
        e = errors[0]
        return Outcome.CRASHED, f"{who(e.rank)}: {e.type}: {e.message}", e.lines, done
    if done is not None:
        return Outcome(done.outcome), done.reason, [], done
    reason = exit_summary or "the run ended without a result"
    return Outcome.CRASHED, reason, _launcher_tail(trial_dir), done


def _launcher_tail(trial_dir: Path, lines: int = 12) -> list[str]:
    with contextlib.suppress(OSError):
        return (trial_dir / "launcher.err").read_text(errors="replace").splitlines()[-lines:]
    return []


_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)


def summarize_torchrun_failure(text: str) -> str:
    """'rank 1 killed by SIGSEGV' / 'rank 0 exited with status 1' from torchrun's failure report.

    Ranks killed by a crash signal (SIGSEGV, SIGBUS, SIGABRT...) come first: they are the cause, the
    others' errors the consequence. SIGTERM/SIGINT come last: that is how torchrun (or the warm leader)
    stops the surviving ranks once one has failed.
    """
    parts = []
    for block in re.split(r"^\s*\[\d+\]:\s*$", text, flags=re.M)[1:]:
        rank_match, exit_match = _RANK_RE.search(block), _EXIT_RE.search(block)
        if not rank_match or not exit_match:
            continue
        rank, status = rank_match.group(1), int(exit_match.group(1))
        if status < 0:
            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = f"signal {-status}"
            parts.append(f"rank {rank} killed by {name}")
        else:
            parts.append(f"rank {rank} exited with status {status}")
    parts.sort(key=_cause_rank)
    return "; ".join(dict.fromkeys(parts))


_SHUTDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


def _cause_rank(part: str) -> int:
    if "killed by" not in part:
        return 1
    return 2 if part.endswith(_SHUTDOWN_SIGNALS) else 0
