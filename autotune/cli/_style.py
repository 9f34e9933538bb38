"""What every CLI view shares: the colour of each trial outcome and how a missing number prints."""

from __future__ import annotations

OUTCOME_STYLE = {
    "complete": "green",
    "pruned": "yellow",
    "oom": "red",
    "diverged": "magenta",
    "crashed": "red",
    "timeout": "red",
    "hang": "red",
}


def fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"

