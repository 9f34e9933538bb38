"""A race that fits the device: its entrants are kept alive together only as far as their measured memory fits the
budget (``constraints.max_memory_mb``, the GPU's capacity, or the machine's available memory), and below that it
races by launching an entrant again for its block, down to paired alternation. The fitting decision, then whole
studies through the real Tuner on a replayed landscape (the live study with real ranks: test_race.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from autotune.objectives import choose
from autotune.search_space import TrialConfig
from autotune.trial_result import Window
from autotune.tuner import Measured, NoLaunch, Tuner, replay_runner
from autotune.tuner._race_memory import (
    CUDA_CONTEXT_MB,
    CUDA_RESERVE,
    Budget,
    Residency,
    footprint,
    make_room,
    race_budget,
)
from autotune.workload_check import load_spec

from .conftest import StudyDir


def _fit(budget: float | None, **uses: float | None) -> Residency:
    return Residency(Budget(budget, "constraints.max_memory_mb"), dict(uses), "cuda")


def test_what_fits_together_decides_the_mode() -> None:
    assert _fit(8000, a=1000, b=1000, c=1000).mode == "race"
    four = _fit(8000, a=5100, b=5100, c=5100, d=5100)  # the GPU: no two fit together
    assert (four.mode, four.together) == ("alternation", 1)
    assert four.line().startswith("race by alternation")
    assert "4 entrants of up to 5.0 GB each, 7.8 GB budget" in four.line()
    some = _fit(8000, base=2000, a=3000, b=2500, c=4000)  # the smallest three fit (7,500), not four
    assert (some.mode, some.together) == ("groups", 3) and some.fits(["base", "a", "b"])
    assert not some.fits(["base", "a", "c"])
    assert _fit(8000, a=3000, b=None).mode == "alternation"  # a peak not known counts as the whole budget
    assert _fit(None, a=9e9, b=9e9).mode == "race"  # no budget known: as before
    alone = _fit(1000, a=3000, b=3000)  # even one over the budget: one at a time, not none
    assert alone.together == 1 and alone.mode == "alternation"


def test_an_entrants_use_of_a_device() -> None:
    # CUDA: one rank a GPU, its peak allocation with the allocator's reserve and the process's context
    assert footprint({"world_size": 4}, 5000.0, "cuda") == pytest.approx(5000 * (1 + CUDA_RESERVE) + CUDA_CONTEXT_MB)
    assert footprint({"world_size": 2}, 300.0, "cpu") == 600.0  # the CPU: every rank on the one machine
    assert footprint({"world_size": 1}, None, "cpu") is None and footprint({}, math.nan, "cpu") is None
    fit = _fit(8000, a=1000.0)
    fit.observe("a", 2000.0)  # a block read more than the search did: the larger counts
    fit.observe("a", 100.0)
    assert fit.use_mb["a"] == pytest.approx(2000 * (1 + CUDA_RESERVE) + CUDA_CONTEXT_MB)


def test_the_budget_is_the_studys_share_else_the_machines(tmp_path: Path) -> None:
    from autotune.spec import parse_spec

    def spec(**extra: Any) -> Any:
        doc = {"name": "s", "workload": {"entrypoint": "autotune.workloads.mlp:build"}, **extra}
        return parse_spec(doc, source="s.yaml", base_dir=tmp_path)

    assert race_budget(spec(constraints={"max_memory_mb": 8000}), "cuda") == Budget(8000.0, "constraints.max_memory_mb")
    cpu = race_budget(spec(), "cpu")
    assert cpu.source == "the machine's available memory" and cpu.mb is not None and cpu.mb > 0


class _Resident:
    def __init__(self) -> None:
        self.alive, self.evicted = True, 0

    def evict(self) -> None:
        self.alive, self.evicted = False, self.evicted + 1


def test_room_is_made_from_the_entrants_the_round_reads_last() -> None:
    fit = _fit(7000, base=2000, a=2000, b=2000, c=2000)  # three fit together
    entrants = {k: _Resident() for k in ("base", "a", "b", "c")}
    entrants["c"].alive = False
    make_room(fit, entrants, ["b", "base", "c", "a"], 2)  # b and base were read: b, read longest ago, goes
    assert [k for k, e in entrants.items() if e.evicted] == ["b"]
    for e in entrants.values():
        e.alive, e.evicted = True, 0
    entrants["b"].alive = False
    make_room(fit, entrants, ["b", "a", "base", "c"], 0)  # all read later this round: c, read last, goes
    assert [k for k, e in entrants.items() if e.evicted] == ["c"]
    for e in entrants.values():
        e.alive, e.evicted = True, 0
    entrants["a"].alive = False
    make_room(fit, entrants, ["base", "a", "b", "c"], 1)  # the baseline, read longest ago, is no exception
    assert entrants["base"].evicted == 1 and entrants["b"].evicted == 0


SPACE = {"batch_size": {"choices": [16, 32, 64, 128]}, "num_workers": {"low": 0, "high": 1}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def heavy(config: TrialConfig, repeat: int) -> Measured:
    """Every configuration needs 60% of the budget (a model that fills most of the device); the fastest is
    batch 128 with a worker, 1.5x the baseline."""
    speed = 1000.0 * (config.batch_size / 32) ** 0.3 * (1.4 if config.num_workers else 1.0)
    return Measured(speed * math.exp(0.01 * math.sin(repeat)), peak_memory_mb=600.0)


@pytest.mark.parametrize(("budget", "mode"), [(1000, "alternation"), (1300, "groups"), (4000, "race")])
def test_a_race_whose_entrants_do_not_fit_together_relaunches_them_and_still_chooses(
    study_dir: Callable[..., StudyDir], budget: int, mode: str,
) -> None:
    sd = study_dir(f"race-memory-{mode}", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": 0},
                   constraints={"max_memory_mb": budget}, confirm={"top_k": 3, "rounds": 8})
    lines: list[str] = []
    runner = replay_runner(heavy)
    launches: list[str] = []
    paced = runner.paced

    def counted(plan: Any, trial_dir: Path) -> Any:
        if trial_dir.name.startswith("trial-"):  # a race entrant's (not a search's paired reference)
            launches.append(plan.config.model_dump_json())
        return paced(plan, trial_dir)

    runner.paced = counted  # type: ignore[method-assign]
    tuner = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=runner)
    tuner.observer.note = lines.append  # type: ignore[method-assign]
    summary = tuner.run(n_trials=8)
    race = summary.study.user_attrs["autotune_race"]
    memory = race["memory"]
    n = len(race["entrants"])  # the baseline and up to confirm.top_k others
    if mode == "groups" and n == 2:
        mode = "race"  # two fit together: a race of two is a race
    assert memory["mode"] == mode and memory["budget_mb"] == budget and memory["budget"] == "constraints.max_memory_mb"
    assert n >= 2 and len(race["rounds"]) >= 4
    blocks = sum(len(r) for r in race["rounds"])
    if mode == "race":
        assert len(launches) == n and not any(line.startswith("race by") for line in lines)
    elif mode == "alternation":  # one alive at a time: each block its own launch (a round's last entrant may
        assert blocks - len(race["rounds"]) < len(launches) <= blocks  # be the next one's first: still alive)
        assert any(line.startswith("race by alternation") and f"{n} entrants of up to 600 MB each, 1000 MB budget"
                   in line for line in lines), lines
    else:  # two fit together: fewer launches than blocks, more than entrants
        assert memory["together"] == 2 and n < len(launches) < blocks
    raced = [t for t in summary.study.get_trials(deepcopy=False) if t.user_attrs.get("race")]
    for t in raced:  # each entrant's trial holds every block it read, numbered on as one run
        windows = t.user_attrs["windows"]
        assert len(windows) == sum(t.user_attrs["config_key"] in r for r in race["rounds"])
        assert [w[0] for w in windows] == sorted({w[0] for w in windows})  # [step, speed, memory, loss]
        assert t.user_attrs["outcome"] == "complete" and t.user_attrs["peak_memory_mb"] <= budget
    choice = choose(summary.study)
    assert choice.best is not None and choice.best.config["num_workers"] == 1 and choice.speedup is not None


def test_a_relaunched_entrant_numbers_its_blocks_on_and_ends_its_run_when_evicted(tmp_path: Path) -> None:
    from autotune.tuner._race_memory import Relaunched

    class Run:
        runs: ClassVar[list[Run]] = []

        def __init__(self) -> None:
            self.windows: list[Window] = []
            self.wall_s = 0.0
            self.closed = False
            Run.runs.append(self)

        def start(self, timeout_s: float) -> None:
            self.wall_s = 1.0

        def block(self, timeout_s: float) -> Window:
            self.wall_s += 0.5
            window = Window(step=12, samples=12 * 32, elapsed_s=self.wall_s, window_throughput_samples_s=100.0,
                            throughput_samples_s=100.0, loss=1.0, peak_memory_mb=50.0, time_to_first_step_s=1.0)
            self.windows.append(window)
            return window

        def finish(self, timeout_s: float) -> dict[str, object] | None:
            self.closed = True
            return {"eval_loss": 0.5}

        def close(self) -> None:
            self.closed = True

    from autotune.search_space import TrialConfig as Config
    from autotune.spec import parse_spec
    from autotune.trial_runner import plan_for

    spec = parse_spec({"name": "s", "workload": {"entrypoint": "autotune.workloads.mlp:build"}}, source="s.yaml",
                      base_dir=tmp_path)
    config = Config.create(batch_size=32, base_lr=1e-3, base_batch_size=32)
    plan = plan_for(spec, config).model_copy(update={"pace_steps": 10})
    entrant = Relaunched(lambda plan, trial_dir: Run(), plan, tmp_path)
    entrant.start(30.0)
    assert not Run.runs and not entrant.alive  # nothing launched until its first block
    entrant.block(5.0)
    entrant.evict()
    assert Run.runs[0].closed and not entrant.alive
    entrant.block(5.0)
    entrant.block(5.0)
    assert len(Run.runs) == 2 and entrant.launches == 2
    warm = plan.limits.warmup_steps
    assert [w.step for w in entrant.windows] == [warm + 10, warm + 20, warm + 30]
    assert entrant.finish(5.0) == {"eval_loss": 0.5} and entrant.wall_s == pytest.approx(1.5 + 2.0)
    assert entrant.finish(5.0) is None  # not alive: nothing to finish


@pytest.mark.slow
def test_a_real_study_whose_entrants_do_not_fit_the_budget_together_races_by_alternation(tmp_path: Path) -> None:
    """Real ranks on the CPU, a memory budget standing for the device: the search runs first without one (to
    read the entrants' peaks on this machine), then the budget is set to 1.5x the largest peak, so that each
    entrant fits alone and no two together, and the race completes by alternation with no trial over budget."""
    import yaml

    from .conftest import assert_nothing_left, make_study

    sd = make_study(tmp_path / "alternation", "alternation", search_space={"batch_size": {"choices": [16, 64]}},
                    sampler={"name": "grid"}, pruner={"name": "none"}, confirm={"top_k": 0})
    first = sd.cli("run", "study.yaml", "--n-trials", "3")
    assert first.returncode == 0, first.stdout + first.stderr
    peak = max(float(t.user_attrs["peak_memory_mb"]) for t in sd.load().get_trials(deepcopy=False))
    budget = round(1.5 * peak)
    doc = yaml.safe_load(sd.file.read_text())
    doc.update(constraints={"max_memory_mb": budget}, confirm={"top_k": 2, "rounds": 5, "block_s": 0.3})
    sd.file.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = sd.cli("run", "study.yaml", "--n-trials", "3")  # the budget is spent: straight to the race
    assert out.returncode == 0, out.stdout + out.stderr
    study = sd.load()
    race = study.user_attrs["autotune_race"]
    assert race["memory"]["mode"] == "alternation" and race["memory"]["budget_mb"] == budget
    n = len(race["entrants"])  # the baseline and the top 2 (the baseline may be one of them)
    assert f"race by alternation (each entrant launched for its block, then ended): {n} entrants" in out.stdout
    assert n >= 2 and len(race["rounds"]) >= 4 and all(len(r) == n for r in race["rounds"])
    trials = study.get_trials(deepcopy=False)
    assert all(t.user_attrs["outcome"] == "complete" and t.user_attrs["peak_memory_mb"] <= budget for t in trials)
    raced = [t for t in trials if t.user_attrs.get("race")]
    assert len(raced) == n and all(len(t.user_attrs["windows"]) == len(race["rounds"]) for t in raced)
    assert study.user_attrs["autotune_confirmation"]["best_config_key"] in race["entrants"]
    assert_nothing_left(study, sd)
