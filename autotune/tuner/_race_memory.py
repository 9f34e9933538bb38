"""The race's memory: which entrants can be alive together on a device, and an entrant that is not kept alive.

A race (autotune/tuner/_race.py) keeps its entrants alive between their blocks, frozen (SIGSTOP: autotune/
trial_runner/_pace.py), and a frozen run keeps its memory. On a GPU four entrants of a model that fills 60% of the
device cannot all be resident. So before a race starts, each entrant's use of one device is known from what its
configuration measured (the largest ``peak_memory_mb`` of its trials: on CUDA the rank's peak allocation, on the
CPU the peak PSS of the rank and its DataLoader workers), and the race keeps alive together only what fits the
device's budget (:func:`race_budget`):

- ``constraints.max_memory_mb``, where the study sets it, is the device's share the study may use;
- else on CUDA the device's own capacity (``torch.cuda.get_device_properties``: the smallest of the GPUs seen);
- else on the CPU the machine's memory available as the race starts, less a tenth left to the rest of it.

An entrant's use of a device (:func:`footprint`): on CUDA each rank holds a GPU of its own, and beside its peak
allocation a process holds its CUDA context and the caching allocator's reserve (``CUDA_CONTEXT_MB`` and
``CUDA_RESERVE`` of the peak); on the CPU every rank of it shares the one machine, so its ranks' peaks add up.
An entrant whose peak is not known counts as the whole budget.

:class:`Residency` is the decision: ``race`` when every entrant fits together (nothing changes), else each
entrant is a :class:`Relaunched` run, launched (and warmed up) for a block when the race needs it and ended
when another needs the memory. The rounds keep their order (every entrant once, shuffled), so a round's
readings are still taken within seconds of each other and the round effect still takes the drift out; what
changes is that an entrant not resident when its turn comes is launched again. When no two fit together that
is paired alternation (``alternation``: launch A, measure a block, end it, launch B, ...); when some do, the
race keeps alive the ones the round reads next (``groups``). The record (``autotune_race``'s ``memory``) and
the run's output say which, and why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
import psutil

from autotune.objectives import Group
from autotune.spec import StudySpec
from autotune.trial_result import Window
from autotune.trial_runner import TrialPlan

CUDA_CONTEXT_MB = 500.0  # a CUDA process's context, beside what it allocates (300-600 MB on recent GPUs)
CUDA_RESERVE = 0.10  # the caching allocator's reserve over its peak allocation
CPU_HEADROOM = 0.10  # of the memory available as the race starts, what is left to the rest of the machine


@dataclass(frozen=True)
class Budget:
    """The memory one device may hold of the race's entrants (None: not known, every entrant is kept alive)."""

    mb: float | None
    source: str  # in words, for the record and the run's output


def race_budget(spec: StudySpec, device: str) -> Budget:
    """The device's budget for the race (module docstring)."""
    if spec.constraints.max_memory_mb is not None:
        return Budget(float(spec.constraints.max_memory_mb), "constraints.max_memory_mb")
    if device == "cuda":
        capacity = cuda_capacity_mb()
        return Budget(capacity, "the GPU's capacity") if capacity else Budget(None, "no GPU seen")
    return Budget(psutil.virtual_memory().available / 2**20 * (1 - CPU_HEADROOM), "the machine's available memory")


def cuda_capacity_mb() -> float | None:
    """The smallest capacity of the GPUs this process sees (MB), None without one. It asks the driver for the
    devices' properties, which creates no context on them (the fingerprint reads the same)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())) / 2**20


def footprint(config: Mapping[str, Any], peak_mb: float | None, device: str) -> float | None:
    """The entrant's use of one device (module docstring); None when its peak is not known."""
    if peak_mb is None or not math.isfinite(peak_mb) or peak_mb <= 0:
        return None
    if device == "cuda":
        return peak_mb * (1 + CUDA_RESERVE) + CUDA_CONTEXT_MB
    return peak_mb * int(config.get("world_size") or 1)


def measured_peak(study: optuna.Study, group: Group) -> float | None:
    """The largest ``peak_memory_mb`` the group's trials measured (the group's median peak where none is stored)."""
    numbers = set(group.trials)
    peaks = [float(t.user_attrs["peak_memory_mb"]) for t in study.get_trials(deepcopy=False)
             if t.number in numbers and isinstance(t.user_attrs.get("peak_memory_mb"), (int, float))]
    return max(peaks) if peaks else group.peak_memory_mb


@dataclass
class Residency:
    """Which of the race's entrants may be alive together: each one's use of a device (``use_mb``; None: not
    known, counted as the whole budget) against the device's ``budget``; ``ranks``: each one's ranks."""

    budget: Budget
    use_mb: dict[str, float | None]
    device: str
    ranks: dict[str, int] = dataclasses.field(default_factory=dict)

    def _use(self, key: str) -> float:
        use = self.use_mb[key]
        return use if use is not None else (self.budget.mb or 0.0)

    @property
    def together(self) -> int:
        """The most entrants that fit alive together (the smallest first)."""
        if self.budget.mb is None:
            return len(self.use_mb)
        uses = sorted(self._use(k) for k in self.use_mb)
        total, count = 0.0, 0
        for use in uses:
            total += use
            if total > self.budget.mb:
                break
            count += 1
        return max(1, count)

    @property
    def mode(self) -> str:
        """``race`` (every entrant alive together), ``groups`` (some), or ``alternation`` (one at a time)."""
        together = self.together
        if together >= len(self.use_mb):
            return "race"
        return "alternation" if together < 2 else "groups"

    def fits(self, alive: Sequence[str]) -> bool:
        """Whether the entrants ``alive`` fit the budget together."""
        if self.budget.mb is None:
            return True
        return sum(self._use(k) for k in alive) <= self.budget.mb

    def observe(self, key: str, peak_mb: float) -> None:
        """A block read ``peak_mb`` for the entrant: its use is the larger of what is known and that."""
        use = footprint({"world_size": self.ranks.get(key, 1)}, peak_mb, self.device)
        known = self.use_mb[key]
        if use is not None and (known is None or use > known):
            self.use_mb[key] = use

    def line(self) -> str:
        """The run's line: which mode, and why."""
        known = [u for u in self.use_mb.values() if u is not None]
        size = f"{_mb(max(known))}" if known else "unknown size"
        of = f"{len(self.use_mb)} entrants of up to {size} each, {_mb(self.budget.mb)} budget ({self.budget.source})" \
            if self.budget.mb is not None else f"{len(self.use_mb)} entrants, {self.budget.source}"
        if self.mode == "race":
            return f"race with every entrant alive: {of}"
        if self.mode == "alternation":
            return f"race by alternation (each entrant launched for its block, then ended): {of}"
        return f"race in groups (at most {self.together} entrants alive together): {of}"

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "together": self.together, "budget_mb": self.budget.mb,
                "budget": self.budget.source, "device": self.device, "use_mb": dict(self.use_mb), "why": self.line()}


def residency(study: optuna.Study, spec: StudySpec, entrants: Sequence[Group]) -> Residency:
    """The race's residency for ``entrants`` (module docstring)."""
    device = str(entrants[0].config.get("device") or spec.resolved_device())
    uses = {g.config_key: footprint(g.config, measured_peak(study, g), device) for g in entrants}
    ranks = {g.config_key: int(g.config.get("world_size") or 1) for g in entrants}
    return Residency(race_budget(spec, device), uses, device, ranks)


def _mb(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value / 1024:.1f} GB" if value >= 1024 else f"{value:.0f} MB"


class _Run(Protocol):
    windows: list[Window]
    wall_s: float

    def start(self, timeout_s: float) -> None: ...

    def block(self, timeout_s: float) -> Window: ...

    def finish(self, timeout_s: float) -> dict[str, object] | None: ...

    def close(self) -> None: ...


class Relaunched:
    """A race entrant that is not kept alive between its blocks: launched and warmed up for a block when the race
    needs it (:meth:`block`), ended when another needs its memory (:meth:`evict`). Its windows are every block's,
    numbered on as one run's; its trial folder holds the last launch's files. An Entrant
    (autotune/tuner/_entrants.py) to the race."""

    def __init__(self, open_run: Callable[[TrialPlan, Path], _Run], plan: TrialPlan, trial_dir: Path) -> None:
        self.open_run, self.plan, self.trial_dir = open_run, plan, trial_dir
        self.windows: list[Window] = []
        self.wall_s = 0.0
        self.launches = 0
        self._run: _Run | None = None
        self._start_s = 60.0

    @property
    def alive(self) -> bool:
        return self._run is not None

    def start(self, timeout_s: float) -> None:
        """Nothing is launched yet: the first block launches it (the race's rounds decide when)."""
        self._start_s = timeout_s

    def block(self, timeout_s: float) -> Window:
        if self._run is None:
            run = self.open_run(self.plan, self.trial_dir)
            self._run, self.launches = run, self.launches + 1
            run.start(self._start_s)
        window = self._run.block(timeout_s)
        steps = (self.plan.pace_steps or 1) * (len(self.windows) + 1)
        step = self.plan.limits.warmup_steps + steps
        window = dataclasses.replace(window, step=step, samples=step * self.plan.config.global_batch,
                                     elapsed_s=self.wall_s + self._run.wall_s)
        self.windows.append(window)
        return window

    def evict(self) -> None:
        """End the run now (its memory is needed); the next block launches it again."""
        run, self._run = self._run, None
        if run is not None:
            try:
                run.close()
            finally:
                self.wall_s += run.wall_s

    def finish(self, timeout_s: float) -> dict[str, object] | None:
        """End as a trial does where it is alive (evaluated when the plan says so); None where it is not."""
        run, self._run = self._run, None
        if run is None:
            return None
        try:
            return run.finish(timeout_s)
        finally:
            self.wall_s += run.wall_s

    def close(self) -> None:
        self.evict()


def relaunching(open_run: Callable[[TrialPlan, Path], _Run]) -> Callable[[TrialPlan, Path], Relaunched]:
    """``open_run``'s entrants as :class:`Relaunched` ones."""
    return lambda plan, trial_dir: Relaunched(open_run, plan, trial_dir)


def make_room(residency: Residency, entrants: Mapping[str, Any], order: Sequence[str], place: int) -> None:
    """Before the block of ``order[place]`` (this round's order): end resident entrants until it fits beside the
    rest: first those the round does not read again, the one read longest ago first, then those it reads last.
    The rule looks at places in the shuffled order only, never at which entrant is which (the baseline included),
    so every entrant is as likely as any other to read a block fresh from its launch rather than resumed."""
    key, upcoming, read = order[place], order[place + 1:], order[:place]
    alive = [k for k, e in entrants.items() if k != key and getattr(e, "alive", False)]

    def keep(k: str) -> tuple[int, int]:  # the smallest is ended first
        return (-upcoming.index(k), 0) if k in upcoming else (-len(upcoming) - 1, read.index(k) if k in read else -1)

    for other in sorted(alive, key=keep):
        if residency.fits([*[k for k in alive if getattr(entrants[k], "alive", False)], key]):
            return
        entrants[other].evict()
