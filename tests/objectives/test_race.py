"""The confirmation race's statistics: a drift shared by a round cancels, the interval on a ratio is honest, and a
tie says what it would take to part it."""

from __future__ import annotations

import math
import random

from autotune.objectives import MIN_ROUNDS, choose_from_race, contrast, fit, standing


def _rounds(truth: dict[str, float], n: int, *, noise: float, wave: float, seed: int = 0) -> list[dict[str, float]]:
    """``n`` rounds of every entrant's reading: its true speed, times a drift of ±``wave`` that moves over the
    rounds (shared by a round), times its own lognormal noise."""
    rng = random.Random(seed)
    out = []
    for r in range(n):
        drift = 1 + wave * math.sin(r / 3)
        out.append({k: v * drift * math.exp(rng.gauss(0, noise)) for k, v in truth.items()})
    return out


def test_a_drift_shared_by_each_round_cancels_in_the_ratio() -> None:
    truth = {"base": 1000.0, "fast": 1500.0, "close": 1450.0}
    rounds = _rounds(truth, 12, noise=0.02, wave=0.25)
    speeds = [r["fast"] for r in rounds]
    assert max(speeds) / min(speeds) > 1.3  # the readings alone scatter far more than the 3% between the leaders
    c = contrast(rounds, "fast", "base")
    assert abs(c.ratio - 1.5) < 0.02 and c.half_width is not None and c.half_width < 0.03
    assert contrast(rounds, "fast", "close").separated  # 3.4% apart, parted although the drift is ±25%


def test_the_stated_interval_holds_the_true_ratio_in_most_races() -> None:
    held = 0
    for seed in range(200):
        rounds = _rounds({"base": 1000.0, "fast": 1300.0}, 6, noise=0.1, wave=0.15, seed=seed)
        c = contrast(rounds, "fast", "base")
        assert c.half_width is not None
        held += abs(c.log_ratio - math.log(1.3)) <= c.half_width
    assert held >= 0.9 * 200  # a ~95% interval


def test_an_entrant_missing_from_some_rounds_is_fitted_from_the_rounds_it_was_read_in() -> None:
    rounds = _rounds({"base": 1000.0, "fast": 2000.0, "slow": 500.0}, 10, noise=0.03, wave=0.2)
    for r in rounds[5:]:
        del r["slow"]  # dropped after round 5
    fitted = fit(rounds)
    assert fitted.counts == {"base": 10, "fast": 10, "slow": 5} and fitted.sigma is not None
    assert abs(math.exp(fitted.effects["slow"] - fitted.effects["base"]) - 0.5) < 0.03


def test_standing_drops_the_separated_never_the_anchor_and_decides_on_the_speedup_precision() -> None:
    rounds = _rounds({"base": 1000.0, "fast": 1600.0, "slow": 1100.0}, MIN_ROUNDS + 2, noise=0.02, wave=0.1)
    now = standing(rounds, "base")
    assert now.leader == "fast" and set(now.losers()) == {"slow"}  # the baseline is never dropped
    assert now.speedup is not None and now.decided(precision=0.07)
    assert not now.decided(precision=0.001)  # separated, but the speed-up not known that well yet
    anchored = standing(_rounds({"base": 1500.0, "other": 1000.0}, 6, noise=0.02, wave=0.1), "base")
    assert anchored.leader == "base" and anchored.speedup is None and anchored.losers() == ["other"]
    assert anchored.decided(precision=0.07)  # the default leads, parted from the rest: keep it


def _race(truth: dict[str, float], n: int, noise: float) -> dict[str, object]:
    return {
        "anchor": "base", "round_s": 1.5, "block_s": 0.5, "rounds": _rounds(truth, n, noise=noise, wave=0.12),
        "entrants": {k: {"trials": [i, 10 + i], "config": {"name": k}} for i, k in enumerate(truth)},
    }


def test_the_choice_of_a_race_keeps_the_default_unless_the_leader_is_separated_from_it() -> None:
    choice = choose_from_race(_race({"base": 1000.0, "a": 1010.0}, 6, noise=0.08))
    assert choice.default_is_best and choice.best is not None and choice.best.config == {"name": "base"}
    assert choice.speedup == 1.0
    won = choose_from_race(_race({"base": 1000.0, "a": 1800.0, "b": 1200.0}, 8, noise=0.03))
    assert won.best is not None and won.best.config == {"name": "a"} and not won.default_is_best
    assert won.speedup is not None and abs(won.speedup - 1.8) < 0.1
    assert won.speedup_half_width is not None and won.speedup_half_width < 0.1
    assert won.separated and won.statement() is not None and won.statement().startswith("best by")  # type: ignore[union-attr]
    assert won.best.trials == (1, 11)  # named by the search trial that found it, then its race trial


def test_a_tie_says_what_more_rounds_would_take() -> None:
    near = choose_from_race(_race({"base": 1000.0, "a": 1500.0, "b": 1440.0}, 5, noise=0.08))
    assert not near.separated and near.advice is not None
    assert near.advice.startswith("about ") and "would likely separate #1 from #2" in near.advice
    same = choose_from_race(_race({"base": 1000.0, "a": 1500.0, "b": 1500.0}, 5, noise=0.0005))
    assert same.advice is not None and "no affordable race parts them" in same.advice


def test_blocks_slowed_by_something_else_on_the_machine_are_left_out() -> None:
    # The convnet's calibration, as its race read it while a test run took a core: the baseline's block read
    # 3-25x slow in 4 of 24 rounds. Left in, they took the speed-up from 2.7x to ~3.4x and its interval wide.
    truth = {"base": 1150.0, "fast": 3100.0}
    clean = _rounds(truth, 24, noise=0.04, wave=0.1, seed=3)
    rounds = [dict(r) for r in clean]
    for i, slow in ((1, 4.0), (5, 14.0), (8, 25.0), (11, 3.0)):
        rounds[i]["base"] /= slow
    fitted = fit(rounds)
    assert {k for _, k in fitted.left_out} == {"base"} and {i for i, _ in fitted.left_out} == {1, 5, 8, 11}
    c, ideal = contrast(rounds, "fast", "base"), contrast(clean, "fast", "base")
    assert c.half_width is not None and ideal.half_width is not None
    assert abs(c.log_ratio - math.log(3100 / 1150)) < 0.03 and c.half_width < 1.2 * ideal.half_width
    assert c.rounds == 20
    kept = [r for i, r in enumerate(rounds) if i not in {1, 5, 8, 11}]
    lead = fitted.effects["fast"] - fitted.effects["base"]
    assert abs(lead - (fit(kept).effects["fast"] - fit(kept).effects["base"])) < 1e-6  # as if never read


def test_slow_blocks_that_are_how_an_entrant_runs_stay_in() -> None:
    # An entrant slow in half of its blocks (a stall every other block) is that slow: nothing of it is left
    # out, and a fast reading is never left out either.
    rounds = _rounds({"base": 1000.0, "stalls": 2000.0}, 12, noise=0.03, wave=0.1, seed=1)
    for i in range(0, 12, 2):
        rounds[i]["stalls"] /= 3
    rounds[3]["base"] *= 4  # a reading far above its round
    fitted = fit(rounds)
    assert fitted.left_out == ()
    assert contrast(rounds, "stalls", "base").rounds == 12


def test_a_clean_race_leaves_nothing_out() -> None:
    for seed in range(50):
        rounds = _rounds({"base": 1000.0, "fast": 1300.0, "close": 1250.0}, 24, noise=0.08, wave=0.15, seed=seed)
        assert fit(rounds).left_out == (), seed


def test_the_choice_of_a_race_is_the_entrant_raced_to_the_end_when_the_one_dropped_as_tied_read_a_hair_above() -> None:
    # Two leaders 0.3% apart: the race dropped one as tied at round 5 and raced the other to its precision. On its
    # five rounds the dropped one reads a hair above; the choice is the survivor, whose speed-up is the narrower.
    rounds = _rounds({"base": 1000.0, "a": 2000.0, "b": 2006.0}, 17, noise=0.05, wave=0.1, seed=2)
    for r in rounds[5:]:
        del r["b"]
    for r in rounds[:5]:
        r["b"] *= 1.06  # its few rounds read it ahead
    race = {"rounds": rounds, "anchor": "base", "tied": ["b"],
            "entrants": {k: {"config": {"name": k}, "trials": [n]} for n, k in enumerate(["base", "a", "b"])}}
    assert standing(rounds, "base").leader == "b"
    choice = choose_from_race(race)
    assert choice.best is not None and choice.best.config_key == "a"
    assert choice.runner_up is not None and choice.runner_up.config_key == "b"
    assert choice.speedup_half_width is not None
    assert choice.speedup_half_width < contrast(rounds, "b", "base").half_width  # type: ignore[operator]
    assert "tied within noise with #2" in choice.statement()
