"""The confirmation race through the real Tuner, on a replayed landscape whose truth is known and whose
machine drifts (a wave of ±12% over the study, as the 2-core VM's speed wanders): at the study file's
defaults the choice is the true best, and the stated speed-up's interval holds the true one."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from autotune.objectives import choose, lighter
from autotune.report import headline_data
from autotune.search_space import TrialConfig
from autotune.tuner import Measured, NoLaunch, Observer, Tuner, replay_runner
from autotune.workload_check import load_spec

from .conftest import StudyDir

SPACE = {"batch_size": {"choices": [16, 32, 64, 128]}, "num_workers": {"low": 0, "high": 2}}
TRIAL = {"warmup_steps": 2, "max_steps": 20, "report_every": 3}


def truth(config: TrialConfig | dict[str, int]) -> float:
    c = dict(config) if isinstance(config, dict) else config.model_dump()
    speed = 1000.0 * (c["batch_size"] / 32) ** 0.3 * (1.6 if c["num_workers"] >= 1 else 1.0)
    return speed * (0.95 if c["num_workers"] == 2 else 1.0)  # a second worker costs 5%: the best is one worker


def drifting(seed: int) -> Callable[[TrialConfig, int], Measured]:
    rng = random.Random(seed)
    calls = [0]

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        calls[0] += 1
        drift = 1 + 0.12 * math.sin(calls[0] / 8 + seed)
        return Measured(truth(config) * drift * math.exp(rng.gauss(0, 0.06)))

    return landscape


@pytest.mark.slow
def test_at_the_defaults_a_race_on_a_drifting_machine_chooses_the_true_best_with_an_honest_interval(
    study_dir: Callable[..., StudyDir],
) -> None:
    held = best = 0
    widths = []
    for seed in range(6):
        sd = study_dir(f"race-drift-{seed}", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": seed})
        summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(drifting(seed))).run(
            n_trials=8)
        choice = choose(summary.study)
        race = summary.study.user_attrs["autotune_race"]
        assert len(race["rounds"]) >= 4 and race["stopped"]
        assert choice.best is not None and choice.baseline is not None and choice.speedup is not None
        assert choice.speedup_half_width is not None
        widths.append(choice.speedup_half_width)
        true_speedup = truth(dict(choice.best.config)) / truth(dict(choice.baseline.config))
        held += abs(math.log(choice.speedup / true_speedup)) <= choice.speedup_half_width
        best += truth(dict(choice.best.config)) >= 0.99 * truth({"batch_size": 128, "num_workers": 1})
        raced = [t for t in summary.study.get_trials(deepcopy=False) if t.user_attrs.get("race")]
        assert len(raced) == len(race["entrants"]) and all(t.user_attrs["outcome"] == "complete" for t in raced)
        for t in raced:  # each entrant's trial holds its blocks as its windows
            assert len(t.user_attrs["windows"]) == sum(t.user_attrs["config_key"] in r for r in race["rounds"])
        assert summary.study.user_attrs["autotune_confirmation"]["best_config_key"] == choice.best.config_key
        headline = headline_data(summary.study)  # the report's headline says the same, and how it was confirmed
        assert headline.statement == choice.statement() and headline.speedup == choice.speedup
        said = f"a race against the baseline: {len(race['rounds'])} rounds"
        assert headline.race is not None and headline.race.startswith(said)
    # The intervals are ~95% ones; on this landscape they held the truth in 11 of 14 seeds (12 before the race
    # kept the lighter of two tied entrants: seed 0 then keeps one worker, the true best, its speed-up read 11% low
    # with ± 8.5%, where it kept two workers, 5% slower, whose speed-up read 6% low). Six seeds, at most two misses.
    assert best >= 5 and held >= 4
    assert max(widths) <= 0.1


def test_a_race_whose_baseline_blocks_were_slowed_by_other_work_reads_through_them(
    study_dir: Callable[..., StudyDir],
) -> None:
    # Four of the race's baseline blocks read 3-25x slow (another process took the cores during them, as a test
    # run did during a convnet calibration): they are left out, the speed-up holds the truth, and the summary
    # says how many blocks were left out.
    from autotune.cli._run_summary import noise_lines

    rng = random.Random(5)
    slow_blocks = iter([1.0, 4.0, 1.0, 1.0, 25.0, 1.0, 1.0, 3.0, 1.0, 1.0, 14.0])

    def landscape(config: TrialConfig, repeat: int) -> Measured:
        reading = truth(config) * math.exp(rng.gauss(0, 0.04))
        if config.batch_size == 32 and config.num_workers == 0 and repeat > 0:  # the baseline, in the race
            reading /= next(slow_blocks, 1.0)
        return Measured(reading)

    sd = study_dir("race-disturbed", search_space=SPACE, trial=TRIAL, sampler={"name": "gp", "seed": 0},
                   confirm={"top_k": 2, "rounds": 12, "precision": 0.01})
    # unpaired: the search's anchor would read the baseline too, and take some of the slowed blocks meant for the race
    summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(landscape, paired=False)).run(
        n_trials=8)
    choice = choose(summary.study)
    assert choice.best is not None and choice.baseline is not None
    assert choice.speedup is not None and choice.speedup_half_width is not None
    true_speedup = truth(dict(choice.best.config)) / truth(dict(choice.baseline.config))
    assert abs(math.log(choice.speedup / true_speedup)) <= max(choice.speedup_half_width, 0.05)
    assert choice.speedup_half_width < 0.1
    lines = noise_lines(summary)
    assert any("block readings left out as disturbed" in line for line in lines), lines


@pytest.mark.slow
def test_of_two_configurations_the_race_cannot_part_it_keeps_the_one_on_fewer_ranks(
    study_dir: Callable[..., StudyDir],
) -> None:
    # One and two ranks train equally fast at batch 128 (twice batch 32's speed): no number of rounds parts them,
    # and which one leads when the tie is called is the drift's and the noise's doing. Every seed keeps the one
    # rank (the same speed on less), and its summary says why it was chosen over the other.
    space = {"batch_size": {"choices": [32, 128]}, "world_size": {"choices": [1, 2]}}

    def even(seed: int) -> Callable[[TrialConfig, int], Measured]:
        rng, calls = random.Random(seed), [0]

        def landscape(config: TrialConfig, repeat: int) -> Measured:
            calls[0] += 1
            drift = 1 + 0.12 * math.sin(calls[0] / 8 + seed)
            return Measured(1000.0 * config.batch_size / 32 * drift * math.exp(rng.gauss(0, 0.06)))

        return landscape

    class Lines(Observer):
        def __init__(self) -> None:
            self.lines: list[str] = []

        def racing(self, line: str) -> None:
            self.lines.append(line)

    said, passed = [], []
    for seed in range(4):
        sd = study_dir(f"race-even-{seed}", search_space=space, trial=TRIAL, sampler={"name": "grid", "seed": seed})
        view = Lines()
        summary = Tuner(load_spec(str(sd.file)), launcher=NoLaunch(), run_trial=replay_runner(even(seed)),
                        observer=view).run(n_trials=5)
        race = summary.study.user_attrs["autotune_race"]
        raced = {(e["config"]["batch_size"], e["config"]["world_size"]) for e in race["entrants"].values()}
        assert {(128, 1), (128, 2)} <= raced, raced
        tied = [race["entrants"][k]["config"]["world_size"] for k in race.get("tied", ())]
        assert 1 not in tied, race.get("stopped")  # passed over as tied: the two ranks, when they led
        passed += [line for line in view.lines if "which runs on less (1 rank against 2)" in line]
        choice = choose(summary.study)
        assert choice.best is not None and choice.runner_up is not None
        assert (choice.best.config["batch_size"], choice.best.config["world_size"]) == (128, 1), race.get("tied")
        assert choice.runner_up.config["world_size"] == 2 and not choice.separated
        statement = choice.statement()
        assert statement is not None and statement.endswith("chosen as it runs on less (1 rank against 2)")
        said.append(statement)
    print("\n".join(said + passed))
    assert passed, "no seed's race had the two ranks lead when it called the tie"  # the live view says so then


def test_lighter_counts_ranks_first_then_dataloader_workers() -> None:
    assert lighter({"world_size": 1, "num_workers": 2}, {"world_size": 2, "num_workers": 0}) == "1 rank against 2"
    assert lighter({"world_size": 2, "num_workers": 0}, {"world_size": 1, "num_workers": 2}) is None
    assert lighter({"world_size": 2, "num_workers": 1}, {"world_size": 2, "num_workers": 2}) == (
        "1 DataLoader worker a rank against 2")
    assert lighter({"world_size": 2, "num_workers": 0}, {"world_size": 2, "num_workers": 0}) is None
    assert lighter({"batch_size": 64}, {"batch_size": 32, "world_size": 2}) == "1 rank against 2"  # 1 unless set
