"""Whose code an error came from: the user's workload, or autotune's own machinery (and libraries).

Used where an error is shown to the user (``autotune trial``, ``autotune validate``) and by the rule that
stops a study whose workload is broken. Works on live tracebacks and on the formatted lines a rank
records (``errors/rank<N>.json``), which follow :mod:`traceback`'s format::

    Traceback (most recent call last):
      File "/path/file.py", line 12, in loss
        return model(**batch)
    ValueError: message
"""

from __future__ import annotations

import json
import re
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

_PACKAGE = Path(__file__).resolve().parent
_BUILT_IN_WORKLOADS = _PACKAGE / "workloads"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


def _library_roots() -> tuple[Path, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(Path(path).resolve())
    return tuple(roots)


_LIBRARIES = _library_roots()


def is_user_file(filename: str) -> bool:
    """A file of the user's workload: not autotune's (its built-in workloads excepted), not a library's,
    not Python's own."""
    if filename.startswith("<"):  # <string>, <frozen ...>
        return False
    path = Path(filename).resolve()
    if path.is_relative_to(_BUILT_IN_WORKLOADS):
        return True
    if path.is_relative_to(_PACKAGE):
        return False
    return not any(path.is_relative_to(root) for root in _LIBRARIES)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    source: str = ""

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.func}"


def user_frame(tb: TracebackType | None) -> Frame | None:
    """The innermost frame of a live traceback that is in the user's code."""
    found = None
    for summary in traceback.extract_tb(tb):
        if is_user_file(summary.filename):
            found = Frame(summary.filename, summary.lineno or 0, summary.name, (summary.line or "").strip())
    return found


@dataclass(frozen=True)
class ParsedError:
    """A recorded traceback, split: the exception line, the user's innermost frame, the other lines."""

    exception: str  # "ValueError: message" (the last exception of a chain)
    user: Frame | None
    user_lines: list[str]  # the traceback with autotune's frames left out
    all_lines: list[str]


def parse_lines(lines: list[str]) -> ParsedError | None:
    """Split recorded traceback lines; None when they hold no traceback (a crash dump, a launcher error)."""
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), default=None)
    body = lines[start + 1 :] if start is not None else lines
    frames: list[tuple[int, Frame]] = []
    for i, ln in enumerate(body):
        m = _FRAME.match(ln)
        if m:
            nxt = body[i + 1].strip() if i + 1 < len(body) and not _FRAME.match(body[i + 1]) else ""
            frames.append((i, Frame(m["file"], int(m["line"]), m["func"], nxt)))
    if not frames:
        return None
    # The exception text: whatever follows the last frame and its source line.
    last_index, last = frames[-1]
    tail_start = last_index + (2 if last.source else 1)
    exception = " ".join(ln.strip() for ln in body[tail_start:] if ln.strip() and not set(ln.strip()) <= set("^~ "))
    user = next((f for _, f in reversed(frames) if is_user_file(f.file)), None)
    kept: list[str] = []
    for i, frame in frames:
        if is_user_file(frame.file) or not Path(frame.file).resolve().is_relative_to(_PACKAGE):
            kept.append(body[i])
            if frame.source:
                kept.append(body[i + 1])
    return ParsedError(exception or lines[-1].strip(), user, kept, lines)


def recorded_where(trial_dir: str | Path | None) -> str | None:
    """The user's file:line the trial's ranks recorded (errors/rank<N>.json "where"), earliest error first."""
    if not trial_dir:
        return None
    records = []
    for path in sorted(Path(trial_dir, "errors").glob("rank*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("where"):
            records.append((float(record.get("time") or 0.0), str(record["where"])))
    return min(records)[1] if records else None
