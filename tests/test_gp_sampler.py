"""autotune's default sampler and pruner: GP search that learns from pruned trials and never repeats itself."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.samplers import GPSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.pruners import NoiseAwarePruner, make_pruner
from autotune.samplers import OneThreadGPSampler, PartialGPSampler, make_sampler
from autotune.samplers._gp_view import WithPartial
from autotune.search_space import study_space
from autotune.spec import parse_spec

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _spec(tmp_path: Path, **extra: object) -> object:
    document = {
        "name": "s",
        "workload": {"entrypoint": "autotune.workloads.mlp:build"},
        "search_space": {"batch_size": {"choices": [16, 32, 64]}, "num_workers": {"low": 0, "high": 2}},
        "trial": {"warmup_steps": 5, "max_steps": 50, "report_every": 5},
        **extra,
    }
    return parse_spec(document, source="s.yaml", base_dir=tmp_path)


def test_defaults_are_gp_search_and_the_best_pruner(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    sampler = make_sampler(spec, study_space(spec)).inner  # make_sampler's wrapper: tests/tuner/test_no_repeats.py
    assert isinstance(sampler, PartialGPSampler)
    pruner = make_pruner(spec)
    assert isinstance(pruner, NoiseAwarePruner)
    assert pruner.percentile == 0.0
    assert pruner.n_startup_trials == 1  # the baseline
    assert (pruner.n_warmup_steps, pruner.min_windows) == (5, 2)  # judged from the second measured window on
    assert pruner.margin is None  # measured from the study's repeats (docs/pruning.md)
    assert pruner.current_margin([]) == 0.1  # until it has two
    median = make_pruner(_spec(tmp_path, pruner={"name": "median"}))
    assert isinstance(median, NoiseAwarePruner)
    assert (median.percentile, median.n_startup_trials, median.n_warmup_steps, median.min_windows) == (50.0, 3, 10, 2)


def test_multi_objective_gp_is_optunas_own(tmp_path: Path) -> None:
    objectives = [
        {"metric": "throughput", "direction": "maximize"},
        {"metric": "peak_memory_mb", "direction": "minimize"},
    ]
    spec = _spec(tmp_path, objectives=objectives)
    sampler = make_sampler(spec, study_space(spec)).inner
    assert isinstance(sampler, GPSampler) and not isinstance(sampler, PartialGPSampler)
    assert isinstance(sampler, OneThreadGPSampler)


def _pruned(study: optuna.Study, values: dict[int, float]) -> None:
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 20)})
    for step, value in values.items():
        trial.report(value, step)
    study.tell(trial, state=TrialState.PRUNED)


def test_the_model_sees_pruned_trials_at_their_last_value() -> None:
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"x": 3})
    _pruned(study, {10: 50.0, 15: 40.0})
    study.enqueue_trial({"x": 4})
    _pruned(study, {})  # pruned before reporting anything: nothing to learn
    study.enqueue_trial({"x": 5})
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 20)})
    study.tell(trial, 70.0)
    seen = WithPartial(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert [(t.params["x"], t.values) for t in seen] == [(3, [40.0]), (5, [70.0])]
    # the study itself is untouched
    assert [t.state for t in study.get_trials()] == [TrialState.PRUNED, TrialState.PRUNED, TrialState.COMPLETE]
    everything = WithPartial(study)._get_trials(deepcopy=False, states=None)
    assert len(everything) == 3


def test_a_measured_configuration_is_not_proposed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    study = optuna.create_study(direction="maximize")
    space = {"x": optuna.distributions.IntDistribution(0, 20)}
    for x, value in ((3, 10.0), (7, 30.0)):
        study.enqueue_trial({"x": x})
        trial = study.ask(space)
        study.tell(trial, value)
    sampler = PartialGPSampler(seed=0, n_startup_trials=1)
    proposals = iter([{"x": 7}, {"x": 8}])
    monkeypatch.setattr(GPSampler, "sample_relative", lambda self, study, trial, space: next(proposals))
    trial = study.ask()
    frozen = study._storage.get_trial(trial._trial_id)
    instead = sampler.sample_relative(study, frozen, space)  # 7 was measured: a random point not measured yet
    assert set(instead) == {"x"} and instead["x"] not in (3, 7)
    assert sampler.sample_relative(study, frozen, space) == {"x": 8}


def _fail(study: optuna.Study, x: int, outcome: str, reported: float | None = None) -> None:
    study.enqueue_trial({"x": x})
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 5)})
    if reported is not None:
        trial.report(reported, 10)
    trial.set_user_attr("outcome", outcome)
    study.tell(trial, state=TrialState.FAIL)


def _complete(study: optuna.Study, x: int, value: float, memory: float = -1.0) -> None:
    study.enqueue_trial({"x": x})
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 5)})
    trial.set_user_attr("outcome", "complete")
    trial.set_constraint("memory", memory)
    trial.set_constraint("diverged", 0.0)
    study.tell(trial, value)


def test_trials_that_fail_for_good_are_fitted_as_infeasible_and_interrupted_ones_are_not() -> None:
    study = optuna.create_study(direction="maximize")
    _complete(study, 0, 100.0)
    _complete(study, 1, 300.0)
    _fail(study, 2, "timeout", reported=250.0)  # measured 250 before it ran out of time
    _fail(study, 3, "crashed")  # measured nothing
    _fail(study, 4, "interrupted")  # Ctrl-C: says nothing about x=4 (it is retried)
    seen = {t.number: t for t in WithPartial(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    assert set(seen) == {0, 1, 2, 3}
    assert seen[2].values == [250.0] and seen[3].values == [100.0]  # its partial value; else the worst measured
    for number in (2, 3):
        assert seen[number].constraints == {"diverged": 1.0, "memory": 1.0}
    assert seen[0].constraints == {"diverged": 0.0, "memory": -1.0}
    assert study.trials[2].state == TrialState.FAIL  # the study itself is untouched


def test_a_configuration_that_always_fails_is_never_proposed_again() -> None:
    # x in 0..5; x = 4 and 5 time out every time. Before the fix GPSampler never saw FAIL trials and the
    # duplicate guard ignored them, so the failures were proposed again and again.
    sampler = PartialGPSampler(seed=0, n_startup_trials=2)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {"x": optuna.distributions.IntDistribution(0, 5)}
    proposed: list[int] = []
    for _ in range(6):
        trial = study.ask(space)
        x = int(trial.params["x"])
        proposed.append(x)
        if x >= 4:
            trial.set_user_attr("outcome", "timeout")
            study.tell(trial, state=TrialState.FAIL)
        else:
            trial.set_user_attr("outcome", "complete")
            trial.set_constraint("memory", -1.0)
            trial.set_constraint("diverged", 0.0)
            study.tell(trial, 100.0 + 50.0 * x)
    assert len(set(proposed)) == len(proposed), proposed  # six trials, six configurations: nothing repeated


def test_gp_search_finds_the_peak_of_a_discrete_landscape_with_pruning() -> None:
    # A 1-D landscape with one peak; the pruner stops most trials early. The model must still converge:
    # pruned trials teach it where not to look, and it never spends a trial on a repeat.
    def value(x: int) -> float:
        return 100.0 * math.exp(-((x - 14) ** 2) / 8.0)

    sampler = PartialGPSampler(seed=1, n_startup_trials=3)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=NoiseAwarePruner(0.0, n_startup_trials=1))
    seen: list[int] = []
    for _ in range(12):
        trial = study.ask({"x": optuna.distributions.IntDistribution(0, 30)})
        x = int(trial.params["x"])
        seen.append(x)
        trial.report(value(x), 1)
        trial.report(value(x), 2)
        if trial.should_prune():
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, value(x))
    assert max(value(x) for x in seen) >= 95.0, seen
    assert sum(t.state == TrialState.PRUNED for t in study.get_trials()) >= 3


def test_constraints_of_complete_trials_do_not_break_the_fit_on_pruned_ones() -> None:
    # The tuner sets constraints (memory, diverged) on complete trials; GPSampler refuses trials with
    # different constraints, so a pruned trial without them must still fit (as feasible).
    study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=2))
    space = {"x": optuna.distributions.IntDistribution(0, 20)}
    for x, value in ((2, 10.0), (9, 50.0), (15, 30.0)):
        study.enqueue_trial({"x": x})
        trial = study.ask(space)
        trial.set_constraint("memory", -1.0)
        trial.set_constraint("diverged", 0.0)
        study.tell(trial, value)
    study.enqueue_trial({"x": 4})
    _pruned(study, {10: 5.0})  # an older study's pruned trial: no constraints recorded
    seen = WithPartial(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    # memory: -1 on the complete trials, 0 (feasible) on the pruned one; diverged: 0 everywhere, no
    # information, left out of the fit (test_constant_constraints_are_left_out_of_the_fit)
    assert [sorted(t.constraints) for t in seen] == [["memory"]] * 4
    assert study.get_trials()[3].constraints == {}  # the stored trial is untouched
    trial = study.ask(space)
    assert 0 <= trial.params["x"] <= 20


def _ask_workers_and_prefetch(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    workers = trial.suggest_int("num_workers", 0, 2)
    if workers:
        trial.suggest_int("prefetch_factor", 2, 4)
    return trial


def test_a_failure_fitted_only_later_does_not_break_the_search_space() -> None:
    """A crashed trial without a conditional knob is fitted only once some trial measured a value; the
    search space must then leave that knob out (a cached one kept it: KeyError in the fit, the run died)."""
    study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=2))
    crashed = study.ask({"num_workers": optuna.distributions.IntDistribution(0, 2)})
    crashed.set_user_attr("outcome", "crashed")
    study.tell(crashed, state=TrialState.FAIL)  # no value anywhere yet: the GP cannot place it
    pruned = study.ask({"num_workers": optuna.distributions.IntDistribution(0, 2),
                        "prefetch_factor": optuna.distributions.IntDistribution(2, 4)})
    pruned.report(100.0, step=1)
    study.tell(pruned, state=TrialState.PRUNED)  # fitted at its last value; the crash still is not
    for value in (300.0, 200.0):
        trial = _ask_workers_and_prefetch(study)
        study.tell(trial, value)
    for _ in range(3):  # the crash is fitted now (a worst value exists); the fit must not look up its prefetch
        trial = _ask_workers_and_prefetch(study)
        study.tell(trial, 250.0)
    assert len(study.trials) == 7 and study.trials[-1].state == TrialState.COMPLETE


_DISCRETE = {
    "batch_size": optuna.distributions.IntDistribution(16, 256, log=True),
    "num_workers": optuna.distributions.IntDistribution(0, 2),
    "amp": optuna.distributions.CategoricalDistribution(["off", "bf16"]),
    "world_size": optuna.distributions.CategoricalDistribution([1, 2]),
}


def _throughput(params: dict[str, object]) -> float:
    bs, workers = int(params["batch_size"]), int(params["num_workers"])  # type: ignore[call-overload]
    return (math.log(bs) * (1 + 0.3 * workers - 0.1 * workers**2) * (0.3 if params["amp"] == "bf16" else 1.0)
            * (1.4 if params["world_size"] == 2 else 1.0))


def test_a_small_discrete_space_gets_the_acquisitions_best_unmeasured_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every point of the space (241 x 3 x 2 x 2) is scored: each proposal after the start-up trials is the
    acquisition function's maximum over the points not yet measured, never a random draw and never
    Optuna's sampled search."""
    from autotune.samplers import _acquisition

    def not_sampled(self: object, acqf: object, best: object) -> None:
        raise AssertionError("Optuna's sampled acquisition search ran on a small discrete space")

    monkeypatch.setattr(GPSampler, "_optimize_acqf", not_sampled)
    chosen: list[tuple[float, float]] = []  # (the proposal's acquisition value, the best over unmeasured points)
    exhaustive = PartialGPSampler._optimize_acqf

    def spy(self: PartialGPSampler, acqf: object, best: object) -> object:
        point = exhaustive(self, acqf, best)
        grid = _acquisition.grid_of(acqf.search_space)  # type: ignore[attr-defined]
        assert grid is not None and len(grid) == 241 * 3 * 2 * 2
        values = acqf.eval_acqf_no_grad(grid)  # type: ignore[attr-defined]
        open_ = [v for row, v in zip(grid, values, strict=True)
                 if self._point(acqf.search_space.get_unnormalized_param(row)) not in self._taken]  # type: ignore[attr-defined]
        chosen.append((float(acqf.eval_acqf_no_grad(point[None, :])[0]), max(open_)))  # type: ignore[attr-defined]
        return point

    monkeypatch.setattr(PartialGPSampler, "_optimize_acqf", spy)
    sampler = PartialGPSampler(seed=0, n_startup_trials=3)
    random_draws = 0
    unmeasured = sampler._unmeasured

    def counted(*args: object, **kwargs: object) -> dict[str, object]:
        nonlocal random_draws
        random_draws += 1
        return unmeasured(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sampler, "_unmeasured", counted)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(12):
        trial = study.ask(_DISCRETE)
        study.tell(trial, _throughput(trial.params))
    assert len(chosen) == 9  # every trial after the 3 start-up ones
    for value, best in chosen:
        assert value == pytest.approx(best, abs=1e-9)
    assert random_draws <= 3  # the start-up trials' only
    keys = {tuple(sorted(t.params.items())) for t in study.trials}
    assert len(keys) == 12
    assert max(t.value for t in study.trials if t.value is not None) >= 0.95 * _throughput(
        {"batch_size": 256, "num_workers": 1, "amp": "off", "world_size": 2})


def test_a_space_with_a_continuous_knob_keeps_optunas_acquisition_search(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    sampled = GPSampler._optimize_acqf

    def counted(self: object, acqf: object, best: object) -> object:
        nonlocal calls
        calls += 1
        return sampled(self, acqf, best)  # type: ignore[arg-type]

    monkeypatch.setattr(GPSampler, "_optimize_acqf", counted)
    space = {**_DISCRETE, "lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=2))
    for _ in range(5):
        trial = study.ask(space)
        study.tell(trial, _throughput(trial.params) - abs(math.log10(float(trial.params["lr"])) + 2))
    assert calls == 3
    from optuna._gp.search_space import SearchSpace

    from autotune.samplers._acquisition import EXHAUSTIVE_POINTS, grid_of

    assert grid_of(SearchSpace(space)) is None and grid_of(SearchSpace(_DISCRETE)) is not None
    big = {f"k{i}": optuna.distributions.IntDistribution(0, 9) for i in range(5)}  # 100,000 points
    assert EXHAUSTIVE_POINTS < 10**5 and grid_of(SearchSpace(big)) is None


_LARGE = {  # 241 x 3 x 2 x 2 x 10**3 x 4 x 2 = 23 million points: past EXHAUSTIVE_POINTS, every knob discrete
    **_DISCRETE, **{f"k{i}": optuna.distributions.IntDistribution(0, 9) for i in range(3)},
    "bucket": optuna.distributions.CategoricalDistribution([10, 25, 50, 100]),
    "sharding": optuna.distributions.CategoricalDistribution(["ddp", "fsdp"]),
}


def _large_throughput(params: dict[str, object]) -> float:
    knobs = sum(abs(int(params[f"k{i}"]) - 3 * i) for i in range(3))  # type: ignore[call-overload]
    return _throughput(params) * (1 - 0.03 * knobs) * (0.9 if params["sharding"] == "fsdp" else 1.0)


def test_a_large_discrete_space_is_climbed_in_batches_to_optunas_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """A discrete space too large to score whole gets Optuna's search (sampled starts, each climbed one knob at a
    time) as a few batched evaluations: on the same acquisition functions it reaches at least the value Optuna's
    own search reaches, with a small fraction of its evaluation calls, and proposes an unmeasured point."""
    from optuna._gp.search_space import SearchSpace

    from autotune.samplers import _acquisition

    assert _acquisition.grid_of(SearchSpace(_LARGE)) is None and _acquisition.all_discrete(SearchSpace(_LARGE))
    compared: list[tuple[float, float, int, int]] = []  # ours, Optuna's, and each one's evaluation calls
    ours = PartialGPSampler._optimize_acqf

    def counting(acqf: object) -> tuple[object, list[int]]:
        calls = [0]
        evaluate = acqf.eval_acqf_no_grad  # type: ignore[attr-defined]

        def counted(x: object) -> object:
            calls[0] += 1
            return evaluate(x)

        monkeypatch.setattr(acqf, "eval_acqf_no_grad", counted)
        return acqf, calls

    def spy(self: PartialGPSampler, acqf: object, best: object) -> object:
        _, calls = counting(acqf)
        point = ours(self, acqf, best)
        own_calls = calls[0]
        optunas = GPSampler._optimize_acqf(self, acqf, best)  # type: ignore[arg-type]
        value = acqf.eval_acqf_no_grad  # type: ignore[attr-defined]
        compared.append((float(value(point[None, :])[0]), float(value(optunas[None, :])[0]),
                         own_calls, calls[0] - own_calls - 2))
        assert self._point(acqf.search_space.get_unnormalized_param(point)) not in self._taken  # type: ignore[attr-defined]
        return point

    monkeypatch.setattr(PartialGPSampler, "_optimize_acqf", spy)
    study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=5))
    for _ in range(15):
        trial = study.ask(_LARGE)
        study.tell(trial, _large_throughput(trial.params))
    assert len(compared) == 10
    for value, optunas, own_calls, optunas_calls in compared:
        assert value >= optunas - 1e-9
        assert own_calls * 5 < optunas_calls
    assert len({tuple(sorted(t.params.items())) for t in study.trials}) == 15


def test_a_climb_tries_every_value_of_a_short_knob_and_powers_of_two_steps_of_a_long_one() -> None:
    import numpy as np

    from autotune.samplers._acquisition import _neighbours

    short, long = np.linspace(0, 1, 4), np.linspace(0, 1, 241)
    x = np.array([short[1], long[100]])
    rows = _neighbours(x, [short, long])
    first = rows[(rows[:, 1] == long[100])]
    assert sorted(first[:, 0]) == sorted(short)  # every value of the short knob, the others held
    second = rows[len(short):]
    assert (second[:, 0] == short[1]).all()
    steps = sorted(round(float(v) * 240) - 100 for v in second[:, 1])
    assert steps == [-100, -64, -32, -16, -8, -4, -2, -1, 1, 2, 4, 8, 16, 32, 64, 128]  # -100: clipped to the range


def test_constant_constraints_are_left_out_of_the_fit() -> None:
    """A constraint every trial met with the same value (memory without a budget, diverged before any trial
    diverged) is not fitted: it says nothing about where the space is infeasible, and each constraint is a
    GP of its own. One that varies, or that a trial violated, is."""
    def study_with(memory: list[float], diverged: list[float]) -> list[FrozenTrial]:
        study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=2))
        for x, (mem, div) in enumerate(zip(memory, diverged, strict=True)):
            trial = study.ask({"x": optuna.distributions.IntDistribution(0, 20)})
            trial.set_constraint("memory", mem)
            trial.set_constraint("diverged", div)
            study.tell(trial, 10.0 + x)
        return WithPartial(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))

    assert [t.constraints for t in study_with([-1.0] * 3, [0.0] * 3)] == [{}] * 3  # the quickstart's
    budget = study_with([-900.0, -400.0, -650.0], [0.0] * 3)  # with a memory budget: how far below it
    assert [sorted(t.constraints) for t in budget] == [["memory"]] * 3
    diverged = study_with([-1.0] * 3, [0.0, 1.0, 0.0])
    assert [sorted(t.constraints) for t in diverged] == [["diverged"]] * 3
    assert study_with([1.0] * 3, [0.0] * 3)[0].constraints == {"memory": 1.0}  # all infeasible: kept


def test_the_gp_fits_and_searches_on_one_torch_thread_and_gives_the_count_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two intra-op threads the first acquisition evaluation after a trial waited for the sleeping pool
    (every other quickstart ask 0.10-0.13 s instead of 0.02 s): the GP runs on one thread, and the process's
    own count (a user's launcher, through calibrate()) is restored after every ask, also when it fails."""
    import torch

    seen: list[int] = []
    exhaustive = PartialGPSampler._optimize_acqf

    def spy(self: PartialGPSampler, acqf: object, best: object) -> object:
        seen.append(torch.get_num_threads())
        return exhaustive(self, acqf, best)

    monkeypatch.setattr(PartialGPSampler, "_optimize_acqf", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        study = optuna.create_study(direction="maximize", sampler=PartialGPSampler(seed=0, n_startup_trials=3))
        for _ in range(6):
            trial = study.ask(_DISCRETE)
            assert torch.get_num_threads() == 2
            study.tell(trial, _throughput(trial.params))
        assert seen == [1, 1, 1]  # the three asks after the start-up trials
        monkeypatch.setattr(GPSampler, "_sample_relative_impl", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            study.ask(_DISCRETE)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_multi_objective_gp_runs_on_one_torch_thread_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    seen: list[int] = []
    impl = GPSampler._sample_relative_impl

    def spy(self: GPSampler, *args: object) -> object:
        seen.append(torch.get_num_threads())
        return impl(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(GPSampler, "_sample_relative_impl", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        study = optuna.create_study(directions=["maximize", "minimize"],
                                    sampler=OneThreadGPSampler(seed=0, n_startup_trials=3))
        for _ in range(5):
            trial = study.ask(_DISCRETE)
            value = _throughput(trial.params)
            study.tell(trial, [value, 1000.0 / value])
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("seed", range(5))
def test_numbers_given_as_choices_are_modelled_in_their_order(seed: int) -> None:
    # batch sizes as choices, measured at 16, 32 and 64 with throughput rising: the model leans towards the
    # larger batches. As categories, each unmeasured choice (1-8 below, 128-512 above) would look alike.
    sizes = [2**i for i in range(10)]
    space = {"batch_size": optuna.distributions.CategoricalDistribution(sizes),
             "amp": optuna.distributions.CategoricalDistribution(["off", "bf16"])}
    sampler = PartialGPSampler(seed=seed, n_startup_trials=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for bs, value in ((16, 1000.0), (32, 1900.0), (64, 2800.0)):
        for amp in ("off", "bf16"):
            study.enqueue_trial({"batch_size": bs, "amp": amp})
            trial = study.ask(space)
            study.tell(trial, value * (1.02 if amp == "bf16" else 1.0))
    trial = study.ask(space)
    assert trial.params["batch_size"] in (128, 256, 512), trial.params  # a value, not its index
    assert trial.distributions["batch_size"] == space["batch_size"]


def test_only_three_or_more_numbers_are_ordinal() -> None:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from autotune.samplers._gp_view import as_ordinal, from_ordinal, ordinal_choices, to_ordinal

    space = {"bs": CategoricalDistribution([64, 16, 256]), "amp": CategoricalDistribution(["off", "bf16"]),
             "flag": CategoricalDistribution([True, False, None]), "ws": CategoricalDistribution([1, 2]),
             "lr": CategoricalDistribution([1e-3, 3e-4, 1e-4]), "n": IntDistribution(0, 2)}
    ordinal = ordinal_choices(space)
    assert ordinal == {"bs": [16, 64, 256], "lr": [1e-4, 3e-4, 1e-3]}
    assert as_ordinal(space, ordinal)["bs"] == IntDistribution(0, 2)
    params = {"bs": 256, "amp": "off", "lr": 3e-4, "n": 1}
    assert to_ordinal(params, ordinal) == {"bs": 2, "amp": "off", "lr": 1, "n": 1}
    assert from_ordinal(to_ordinal(params, ordinal), ordinal) == params


def test_a_knob_the_queued_baseline_lacks_is_modelled_without_it() -> None:
    """The baseline runs the workload's defaults; where one lies outside its knob's range (threads_per_rank: auto
    beside {low: 1, high: 2}) its trial, queued with its parameters fixed, lacks that knob. The GP models the knob
    all the same and fits the trials that have it: taking the intersection of every fitted trial's knobs, it left
    the knob out for the whole study and drew it at random at every ask (the large landscape: threads 2 in 49% of
    the GP's trials, 0.66x threads 1 by the median)."""
    space = {"batch_size": optuna.distributions.IntDistribution(16, 256, log=True),
             "threads": optuna.distributions.IntDistribution(1, 2)}
    sampler = PartialGPSampler(seed=0, n_startup_trials=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({"batch_size": 64})
    baseline = study.ask({"batch_size": space["batch_size"]})
    study.tell(baseline, 100.0)
    for _ in range(8):  # the fit runs from the fourth trial on: it must not look up the baseline's threads
        trial = study.ask(space)
        study.tell(trial, 20.0 * math.log(trial.params["batch_size"]) * (1.0 if trial.params["threads"] == 1 else 0.6))
    ask = study.ask()
    assert sampler.infer_relative_search_space(study, study._storage.get_trial(ask._trial_id)) == space
    fitted = WithPartial(study, space=space).fitted()
    assert [t.number for t in fitted] == list(range(1, 9))  # the baseline left out of the fit, not the knob
    assert len(WithPartial(study).fitted()) == 9


def test_a_failure_that_measured_nothing_is_fitted_at_the_worst_reading_pruned_ones_included() -> None:
    # With the pruner most trials end pruned and the complete ones are the best few: a failure fitted at the worst
    # complete value read as a fair configuration, and the GP went on proposing its neighbours.
    study = optuna.create_study(direction="maximize")
    _complete(study, 0, 300.0)
    study.enqueue_trial({"x": 1})
    pruned = study.ask({"x": optuna.distributions.IntDistribution(0, 5)})
    pruned.report(40.0, 4)
    pruned.set_user_attr("outcome", "pruned")
    study.tell(pruned, state=TrialState.PRUNED)
    _fail(study, 3, "timeout")  # measured nothing
    seen = {t.number: t for t in WithPartial(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    assert seen[2].values == [40.0]
    assert seen[2].constraints == {"diverged": 1.0, "memory": 1.0}


_START_SPACE = {
    "amp": optuna.distributions.CategoricalDistribution(["off", "bf16"]),
    "batch_size": optuna.distributions.CategoricalDistribution([16, 32, 64, 128, 256]),
    "num_workers": optuna.distributions.IntDistribution(0, 2),
    "lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
}


@pytest.mark.parametrize("seed", range(12))
def test_the_start_up_trials_cover_each_knob_evenly(tmp_path: Path, seed: int) -> None:
    """The default GP's start-up trials after a queued baseline (the baseline does not count): amp off twice and
    bf16 twice, four batch sizes, every worker count among the first three, the learning rate once in each
    quarter of its log range. Random draws (Optuna's) miss this in most seeds: all four on one amp one time in
    eight, four distinct batch sizes of five one time in five."""
    spec = _spec(tmp_path, sampler={"seed": seed, "n_startup_trials": 5})
    sampler = make_sampler(spec, study_space(spec))
    study = optuna.create_study(direction="maximize", sampler=sampler.inner)
    study.enqueue_trial({"amp": "off", "batch_size": 64, "num_workers": 0, "lr": 1e-3})  # the baseline
    proposed = []
    for i in range(5):
        trial = study.ask(_START_SPACE)
        if i:
            proposed.append(trial.params)
        study.tell(trial, 100.0 + i)
    assert sorted(p["amp"] for p in proposed) == ["bf16", "bf16", "off", "off"]
    assert len({p["batch_size"] for p in proposed}) == 4
    assert {p["num_workers"] for p in proposed[:3]} == {0, 1, 2}
    quarters = {min(3, int(4 * math.log(p["lr"] / 1e-4) / math.log(1e3))) for p in proposed}
    assert quarters == {0, 1, 2, 3}
