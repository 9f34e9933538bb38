"""Recorded landscapes (benchmarks/landscape.py's JSON) and the studies replayed on them: what the
search-efficiency, warm-start and memory-prediction benchmarks share; the recording of one (measure_once, used by
landscape.py and global_batch_landscape.py); and a grid's search space as the tuner builds it (study_space, used by
landscape.py and landscape_refine.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    RUNS,
    Trials,
    WorkloadRef,
    console,
    knobs_label,
    make_spec,
    read_json,
    seeded_shuffle,
    space_of_grid,
    stage,
    study_document,
)

LEVEL = 0.95  # "near-best": within 95% of the grid's best throughput


def study_space(grid: dict[str, list[Any]], limits: dict[str, Any]) -> Any:
    """The SearchSpace of the grid, built the way the tuner builds it (so configuration keys match)."""
    from autotune.search_space import study_space as space_of_spec

    document = study_document("landscape", MLP, space_of_grid(grid), limits)
    return space_of_spec(make_spec(document))


@dataclass
class Landscape:
    """A recorded landscape, indexed by configuration key."""

    path: Path
    records: dict[str, dict[str, Any]]
    settings: dict[str, Any]
    machine: dict[str, Any]
    best: float

    @classmethod
    def load(cls, path: Path) -> Landscape:
        if not path.exists():
            hint = " --quick" if path.name.endswith(".quick.json") else ""
            raise SystemExit(f"{path}: no landscape recorded; run `python benchmarks/landscape.py{hint}` first")
        data = read_json(path)
        records = {r["config_key"]: r for r in data["results"]["configs"]}
        values = [r["throughput_samples_s"] for r in records.values()
                  if r["outcome"] == "complete" and r["throughput_samples_s"]]
        if not values:
            raise SystemExit(f"{path}: no complete configuration in the landscape")
        return cls(path, records, data["settings"], data["machine"], max(values))

    def geometric_mean(self, other: Landscape) -> Landscape:
        """The grid as two recordings of it read together: each configuration complete in both at the geometric
        mean of its two readings, any other at the outcome of the recording where it did not complete (this
        one's record otherwise: its memory, windows and wall). A better-estimated truth than either recording
        when a single reading is noisy (benchmarks/README.md, "The large landscape")."""
        again = {tuple(sorted(r["knobs"].items())): r for r in other.records.values()}
        records: dict[str, dict[str, Any]] = {}
        for key, record in self.records.items():
            second = again.get(tuple(sorted(record["knobs"].items())))
            if second is None:
                raise SystemExit(f"{other.path}: configuration {record['label']} is not in this recording")
            mean, value = dict(record), self.value(key)
            if value and second["outcome"] == "complete" and second["throughput_samples_s"]:
                mean["throughput_samples_s"] = (value * second["throughput_samples_s"]) ** 0.5
            else:
                failed = record if record["outcome"] != "complete" or not record["throughput_samples_s"] else second
                mean["outcome"], mean["throughput_samples_s"] = failed["outcome"], None
            records[key] = mean
        return self._with(records)

    def refined(self, path: Path) -> Landscape:
        """This grid with its leaders at the ratios ``landscape_refine.py`` measured (``path``), every other
        configuration as it is. A ratio is put on this grid's scale by the geometric mean of (value here / ratio)
        over the refined configurations and the baseline (ratio 1): one recorded reading, the baseline's alone,
        wanders 15%."""
        if not path.exists():
            raise SystemExit(f"{path}: no refined leaders recorded; run `python benchmarks/landscape_refine.py` first")
        data = read_json(path)
        leaders = [(data["settings"]["baseline"]["config_key"], 1.0)]
        leaders += [(r["config_key"], r["ratio"]) for r in data["results"]["configs"] if r["ratio"]]
        missing = [key for key, _ in leaders if key not in self.records]
        if missing:
            raise SystemExit(f"{path}: configuration {missing[0]} is not in {self.path.name}")
        logs = [math.log(value / ratio) for key, ratio in leaders if (value := self.value(key))]
        scale = math.exp(sum(logs) / len(logs))
        records = dict(self.records)
        for key, ratio in leaders:
            records[key] = {**records[key], "throughput_samples_s": ratio * scale}
        return self._with(records)

    def _with(self, records: dict[str, dict[str, Any]]) -> Landscape:
        """This recording with other values for its configurations (a truth derived from it)."""
        values = [r["throughput_samples_s"] for r in records.values() if r["outcome"] == "complete"]
        return Landscape(self.path, records, self.settings, self.machine, max(values))

    def by_config(self) -> dict[str, dict[str, Any]]:
        """The records by today's configuration key (knobs added since the recording take their defaults)."""
        from autotune.objectives import config_key
        from autotune.search_space import TrialConfig

        return {config_key(TrialConfig.model_validate(r["config"]).model_dump()): r for r in self.records.values()}

    def lookup(self) -> Callable[[Any], dict[str, Any]]:
        """``recorded_runner``'s lookup: a configuration's record (a clear exit when it was not recorded)."""
        from autotune.objectives import config_key

        by_config = self.by_config()

        def lookup(config: Any) -> dict[str, Any]:
            record = by_config.get(config_key(config.model_dump()))
            if record is None:
                raise SystemExit(f"{self.path}: configuration {config.short()} is not in the landscape")
            return record

        return lookup

    @property
    def size(self) -> int:
        return len(self.records)

    def document(self, name: str, sampler: dict[str, Any], n_trials: int, pruner: dict[str, Any] | None = None,
                 **extra: Any) -> dict[str, Any]:
        """A study file over the landscape's workload, space and trial length (autotune's default pruner
        unless ``pruner`` says otherwise)."""
        workload = WorkloadRef(self.settings["workload"], self.settings["workload_args"])
        return study_document(name, workload, self.settings["search_space"], self.settings["limits"],
                              sampler=sampler, pruner=pruner, n_trials=n_trials, **extra)

    def value(self, key: str) -> float | None:
        record = self.records.get(key)
        if record is None or record["outcome"] != "complete":
            return None
        value: float | None = record["throughput_samples_s"]
        return value


@dataclass
class Replay:
    """One replayed study: per trial its configuration's key, cost, state and (complete) value."""

    strategy: str
    seed: int
    keys: list[str] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)

    @classmethod
    def from_study(cls, strategy: str, seed: int, study: Any) -> Replay:
        """A replayed study's trials as the tuner stored them (failed ones count as ``fail``)."""
        out = cls(strategy, seed)
        for t in study.get_trials(deepcopy=False):
            outcome = t.user_attrs.get("outcome")
            out.keys.append(str(t.user_attrs.get("config_key")))
            out.costs.append(float(t.user_attrs.get("wall_s") or 0.0))
            out.states.append(outcome if outcome in ("complete", "pruned") else "fail")
            value = t.user_attrs.get("throughput_samples_s")
            out.values.append(float(value) if value is not None and outcome in ("complete", "pruned") else None)
        return out

    def reached(self, target: float) -> int | None:
        """1-based number of the first complete trial at or above ``target``; None when none is."""
        for i, (state, value) in enumerate(zip(self.states, self.values, strict=True)):
            if state == "complete" and value is not None and value >= target:
                return i + 1
        return None

    def cost_until(self, n: int) -> float:
        return sum(self.costs[:n])

    def best_within(self, n: int) -> float:
        values = [v for s, v in zip(self.states[:n], self.values[:n], strict=True) if s == "complete" and v]
        return max(values, default=0.0)

    def pruned_within(self, n: int) -> int:
        return sum(s == "pruned" for s in self.states[:n])

    def pick_within(self, n: int) -> str | None:
        """The configuration key a study of ``n`` trials would choose: its best complete trial's."""
        complete = [(v, k) for k, s, v in zip(self.keys[:n], self.states[:n], self.values[:n], strict=True)
                    if s == "complete" and v]
        return max(complete)[1] if complete else None


def pruned_cost(record: dict[str, Any], window: dict[str, Any]) -> float:
    """A trial pruned at ``window``: launch to that window, plus the trial's teardown (after its last window)."""
    windows = record["windows"]
    teardown = max(0.0, float(record["wall_s"]) - float(windows[-1]["elapsed_s"])) if windows else 0.0
    return min(float(record["wall_s"]), float(window["elapsed_s"]) + teardown)


def window_record(window: Any) -> dict[str, Any]:
    return {
        "step": window.step,
        "elapsed_s": window.elapsed_s,
        "throughput_samples_s": window.throughput_samples_s,
        "window_throughput_samples_s": window.window_throughput_samples_s,
        "peak_memory_mb": window.peak_memory_mb,
        "loss": window.loss,
    }


def trial_record(knobs: dict[str, Any], config: Any, result: Any, order: int) -> dict[str, Any]:
    from autotune.objectives import config_key

    return {
        "knobs": knobs,
        "label": knobs_label(knobs),
        "config_key": config_key(config.model_dump()),
        "config": config.model_dump(),
        "order": order,
        "outcome": result.outcome.value,
        "reason": result.reason,
        "throughput_samples_s": result.throughput_samples_s,
        "wall_s": round(result.wall_s, 4),
        "training_span_s": round(result.training_span_s, 4),
        "training_s": round(result.training_s, 4),
        "time_to_first_step_s": result.time_to_first_step_s,
        "peak_memory_mb": result.peak_memory_mb,
        "loss": result.loss,
        "steps": result.steps,
        "windows": [window_record(w) for w in result.windows],
    }


def measure_once(space: Any, configs: list[dict[str, Any]], limits: dict[str, Any], seed: int,
                 runs: str) -> list[dict[str, Any]]:
    """Every configuration measured once, in a seeded order, by one warm launcher (its first trial discarded):
    their records (:func:`trial_record`) in the order of ``configs``."""
    order = seeded_shuffle(range(len(configs)), seed)
    records: list[dict[str, Any] | None] = [None] * len(configs)
    with Trials(MLP, RUNS / runs) as trials:
        with stage("starting the warm launcher (one discarded trial)"):
            trials.run(space.default_config(), {"warmup_steps": 1, "max_steps": 3}, "warm", tag="warm-up")
        with stage(f"measuring {len(configs)} configurations once each"):
            for position, index in enumerate(order):
                knobs = configs[index]
                config = space.config(knobs)
                result = trials.run(config, limits, "warm", tag=knobs_label(knobs).replace(" ", "_"))
                records[index] = trial_record(knobs, config, result, position)
                through = result.throughput_samples_s
                console.print(
                    f"  {position + 1:3d}/{len(configs)} gb {config.global_batch:4d} {knobs_label(knobs):44s} "
                    f"{result.outcome.value:9s} {'-' if through is None else f'{through:,.0f}'} samples/s, "
                    f"wall {result.wall_s:.2f} s"
                )
    return [r for r in records if r is not None]
