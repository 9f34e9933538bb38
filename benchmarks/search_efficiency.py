"""Search efficiency: how many trials, and how much trial time, until a study finds a near-best configuration.

Replays studies against a recorded landscape (landscape.py: every configuration of a grid measured once).
The autotune strategies run the real tuner (``autotune.tuner.Tuner`` on a study file, its own SQLite
storage, sampler, pruner, baseline and choice) with one seam: a trial's result comes from the landscape
instead of a launch (``autotune.tuner.recorded_runner``): its recorded windows go to the tuner's window
callback (report, prune) as the monitor hands them over; its cost is its recorded wall time, or for a
pruned trial the seconds from launch to the window it was pruned at plus the trial's own teardown (its
wall time after its last window). The comparison strategies (random, grid, Optuna's TPE) run through the
same Tuner and the same records, with their sampler and no pruner: each study, theirs too, measures the
workload's default configuration first (the baseline). Strategies:

- ``autotune``: the tuner on a study file that leaves sampler and pruner at their defaults (Gaussian-process
  search that learns from pruned and failed trials, and the ``best`` pruner; the baseline first, reporting
  its windows and never pruned);
- ``autotune-no-pruning``: the same sampler and baseline, no pruner (to measure what pruning saves);
- ``autotune-tpe``: the earlier default, ``sampler: tpe`` (grouped multivariate TPE) with ``pruner: median``;
- ``random``: Optuna's RandomSampler; ``grid``: Optuna's GridSampler (a seeded order of the grid; ``sampler: grid``);
- ``optuna-tpe``: Optuna's default TPESampler, no pruning.

Each runs ``--seeds`` times (seeds 0..N-1) for up to twice the grid's size in trials (``--max-trials`` caps the
autotune strategies; ``--jobs`` replays in parallel processes). Reported, median over
seeds: trials and trial-seconds until a complete trial is within 95% of the grid's best throughput;
whether that is within 15% of the grid's trial count (5% on a landscape of 300+ configurations); random
search's trials over each strategy's; the trial-seconds pruning saves against the same sampler without
pruning over a study of ``--budget`` trials (the target: the same final result, i.e. the same best
configuration, for 40% fewer trial-seconds), and until both reach the 95% level. Confirmation runs are not replayed.

``--judge-on OTHER`` reads each autotune strategy's choice after ``--budget`` trials on another recording of
the same grid (landscape.py's repeat): a replay's "same final result" is judged on the very readings its pruner
saw, so it cannot show a good configuration pruned on an unlucky reading or a lucky reading chosen; an
independent reading of the chosen configuration can. ``--margins 0.2 0.3`` adds the default study with those
``pruner.margin`` values (strategies ``autotune-margin-M``), to weigh the margin's savings against its choices.

``--live`` runs one real study instead (the tuner on a generated study file: the landscape's workload,
space and trial length, ``--budget`` trials) and compares what it found with the grid's best.

    python benchmarks/search_efficiency.py                    # replay: 20 seeds, no trials run (hours)
    python benchmarks/search_efficiency.py --seeds 3 --max-trials 20   # a small replay: ~10 minutes on 2 cores
    python benchmarks/search_efficiency.py --landscape benchmarks/landscape_large.json --max-trials 40 --jobs 2
    python benchmarks/search_efficiency.py --jobs 2 --strategies autotune --margins 0.2 0.3 \
        --judge-on benchmarks/landscape_repeat.json          # the pruner's margin, judged on the repeat
    python benchmarks/search_efficiency.py --live             # one real study: about 1-2 minutes on 2 cores
    python benchmarks/search_efficiency.py --quick [--live]   # smoke runs on the quick landscape
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

from _common import (
    MLP,
    RUNS,
    check,
    console,
    default_out,
    fmt,
    fresh_study_file,
    machine_caption,
    machine_facts,
    make_spec,
    median,
    pct,
    print_table,
    quiet_optuna,
    ratio,
    read_json,
    stage,
    write_json,
)
from _landscapes import LEVEL, Landscape, Replay

GRID_SHARE_TARGET = 0.15  # reach that level within 15% of the grid's trial count
GRID_SHARE_TARGET_LARGE = 0.05  # ... within 5% on a landscape of 300+ configurations (landscape.py --grid large)
LARGE_GRID = 300
RANDOM_RATIO_TARGET = 2.0  # with at least 2x fewer trials than random search
PRUNING_SAVING_TARGET = 0.40  # pruning saves at least 40% of the trial-seconds
STRATEGIES = ("autotune", "autotune-no-pruning", "autotune-tpe", "random", "grid", "optuna-tpe")
REQUIRED = ("autotune", "autotune-no-pruning", "random")  # the targets compare these


def grid_share_target(landscape: Landscape) -> float:
    return GRID_SHARE_TARGET_LARGE if landscape.size >= LARGE_GRID else GRID_SHARE_TARGET


MARGIN_PREFIX = "autotune-margin-"  # autotune-margin-0.2: the default study with pruner.margin 0.2


def margin_of(strategy: str) -> float | None:
    """The pruner margin a ``--margins`` strategy sets (None: the strategy's own pruner)."""
    return float(strategy[len(MARGIN_PREFIX):]) if strategy.startswith(MARGIN_PREFIX) else None


def strategy_decisions(strategy: str, seed: int) -> tuple[dict[str, Any], dict[str, Any] | None, Any]:
    """A strategy's study-file ``sampler:`` and ``pruner:`` (None: the default), and an Optuna sampler given to
    the Tuner instead of the file's (None: the file's). The peers prune nothing."""
    import optuna

    if strategy == "autotune":
        return {"seed": seed}, None, None
    if strategy == "autotune-no-pruning":
        return {"seed": seed}, {"name": "none"}, None
    if (margin := margin_of(strategy)) is not None:
        return {"seed": seed}, {"name": "best", "margin": margin}, None
    if strategy == "autotune-tpe":  # the earlier default: grouped multivariate TPE + noise-aware median pruning
        return {"name": "tpe", "seed": seed}, {"name": "median"}, None
    if strategy in ("random", "grid"):
        return {"name": strategy, "seed": seed}, {"name": "none"}, None
    if strategy == "optuna-tpe":  # Optuna's default TPE, as a user would create it
        return {"seed": seed}, {"name": "none"}, optuna.samplers.TPESampler(seed=seed)
    raise ValueError(strategy)


def replay(strategy: str, seed: int, landscape: Landscape, max_trials: int, budget: int) -> Replay:
    """One strategy's study: the real Tuner (its baseline first, then the strategy's sampler and pruner), trials
    replayed from the landscape, no confirmation runs."""
    import tempfile

    from autotune.tuner import NoLaunch, Tuner, recorded_runner

    sampler, pruner, optuna_sampler = strategy_decisions(strategy, seed)
    # in memory where the machine has a tmpfs: a replayed trial's cost is its record's, and its 30-odd SQLite
    # commits cost far more on a disk than the replay itself
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="autotune-replay-", dir=shm) as folder:
        document = landscape.document(f"replay-{strategy}-{seed}", sampler, budget, pruner=pruner,
                                      confirm={"top_k": 0}, storage=f"sqlite:///{folder}/replay.db")
        spec = make_spec(document, Path(folder))  # trial folders in the temp folder
        tuner = Tuner(spec, launcher=NoLaunch(), run_trial=recorded_runner(landscape.lookup()),
                      sampler=optuna_sampler)
        summary = tuner.run(n_trials=max_trials)
        return Replay.from_study(strategy, seed, summary.study)


def _median_or_inf(values: list[float | None]) -> float:
    """Median where 'never reached' (None) counts as worse than anything."""
    return statistics.median([math.inf if v is None else v for v in values]) if values else math.inf


def strategy_summary(replays: list[Replay], landscape: Landscape, budget: int) -> dict[str, Any]:
    target = LEVEL * landscape.best
    reached = [r.reached(target) for r in replays]
    costs = [None if n is None else r.cost_until(n) for r, n in zip(replays, reached, strict=True)]
    limit = grid_share_target(landscape) * landscape.size
    trials_median = _median_or_inf([None if n is None else float(n) for n in reached])
    return {
        "seeds": len(replays),
        "reached": sum(n is not None for n in reached),
        "trials_to_level": reached,
        "trials_to_level_median": trials_median,
        "cost_to_level_s": costs,
        "cost_to_level_s_median": _median_or_inf(costs),
        "within_grid_share_seeds": sum(n is not None and n <= limit for n in reached),
        "within_grid_share": trials_median <= limit,
        "budget": budget,
        "best_at_budget_of_grid_best": median([r.best_within(budget) / landscape.best for r in replays]),
        "cost_at_budget_s": median([r.cost_until(budget) for r in replays]),
        "pruned_at_budget": median([float(r.pruned_within(budget)) for r in replays]),
    }


def pruning_savings(pruned: list[Replay], unpruned: list[Replay], landscape: Landscape, budget: int) -> dict[str, Any]:
    """Trial-seconds the pruner saves against the same sampler without it, seed by seed."""
    target = LEVEL * landscape.best
    to_level = []
    for p, u in zip(pruned, unpruned, strict=True):
        n_p, n_u = p.reached(target), u.reached(target)
        if n_p is not None and n_u is not None:
            to_level.append(1 - p.cost_until(n_p) / u.cost_until(n_u))
    at_budget = [1 - p.cost_until(budget) / u.cost_until(budget) for p, u in zip(pruned, unpruned, strict=True)]
    same_result = sum(
        p.best_within(budget) >= u.best_within(budget) * 0.99 for p, u in zip(pruned, unpruned, strict=True)
    )
    return {
        "saved_to_level": to_level,
        "saved_to_level_median": median(to_level),
        "seeds_compared": len(to_level),
        "saved_at_budget": at_budget,
        "saved_at_budget_median": median(at_budget),
        "budget_same_best_seeds": same_result,
    }


def trials_of(strategy: str, landscape: Landscape, max_trials: int | None) -> int:
    """A replayed study's length: ``--max-trials`` caps the autotune strategies' replays; the peers (random, grid,
    Optuna's TPE; the same Tuner, 0.1-0.4 s a replayed trial) always run twice the grid's size, so random
    search's trials to the level are counted, not cut off."""
    full = 2 * landscape.size
    return min(full, max_trials) if max_trials and strategy.startswith("autotune") else full


def _replay_job(job: tuple[str, int, Landscape, int, int]) -> Replay:
    """One replay. One torch thread, whatever ``--jobs``: the GP's matrices are tiny, two processes would
    otherwise each spin two threads on two cores, and the same thread count keeps the results the same."""
    import optuna
    import torch

    torch.set_num_threads(1)
    quiet_optuna()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not a line per failed trial of the plain loops
    return replay(*job)


def run_replays(landscape: Landscape, seeds: int, max_trials: int | None, budget: int,
                strategies: tuple[str, ...] = STRATEGIES, jobs: int = 1) -> dict[str, list[Replay]]:
    """Every strategy's seeds; ``jobs`` > 1 replays them in that many processes (each replay has its own
    storage and seed, and its cost comes from the records, so the results do not depend on it)."""
    from concurrent.futures import ProcessPoolExecutor

    replays: dict[str, list[Replay]] = {}
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    try:
        for strategy in strategies:
            started = time.monotonic()
            n = trials_of(strategy, landscape, max_trials)
            work = [(strategy, seed, landscape, n, budget) for seed in range(seeds)]
            replays[strategy] = list(pool.map(_replay_job, work) if pool else map(_replay_job, work))
            console.print(f"  {strategy}: {seeds} seeds x {n} trials in {time.monotonic() - started:.0f} s")
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    return replays


def report_replays(landscape: Landscape, replays: dict[str, list[Replay]], budget: int) -> dict[str, Any]:
    summaries = {s: strategy_summary(r, landscape, budget) for s, r in replays.items()}
    random_trials = summaries["random"]["trials_to_level_median"]
    for summary in summaries.values():
        summary["random_over_this_trials"] = ratio(random_trials, summary["trials_to_level_median"]) if (
            math.isfinite(random_trials) and math.isfinite(summary["trials_to_level_median"])
        ) else None
    share = grid_share_target(landscape)
    limit = share * landscape.size
    print_table(
        f"Replayed studies on {landscape.path.name}: {landscape.size} configurations, best "
        f"{landscape.best:,.0f} samples/s; median over seeds",
        ["strategy", "reached", f"trials to {LEVEL:.0%}", f"<= {limit:g} trials", "trial-s to 95%",
         "random/this trials", f"best after {budget}", f"trial-s for {budget}", "pruned"],
        [
            [name, f"{s['reached']}/{s['seeds']}", s["trials_to_level_median"],
             f"{check(s['within_grid_share'])} ({s['within_grid_share_seeds']}/{s['seeds']} seeds)",
             s["cost_to_level_s_median"], s["random_over_this_trials"], pct(s["best_at_budget_of_grid_best"]),
             s["cost_at_budget_s"], s["pruned_at_budget"]]
            for name, s in summaries.items()
        ],
        caption=f"landscape measured on: {machine_caption(landscape.machine)}",
    )
    savings = pruning_savings(replays["autotune"], replays["autotune-no-pruning"], landscape, budget)
    print_table(
        "Pruning: autotune (its default pruner) against the same sampler without pruning, seed by seed",
        ["measure", "median saved", "seeds"],
        [
            [f"trial-seconds until {LEVEL:.0%} of the grid's best", pct(savings["saved_to_level_median"]),
             savings["seeds_compared"]],
            [f"trial-seconds of a {budget}-trial study", pct(savings["saved_at_budget_median"]),
             f"{savings['budget_same_best_seeds']} with the same best (within 1%)"],
        ],
    )
    auto = summaries["autotune"]
    targets = {
        "within_grid_share": {"target": f"<= {share:.0%} of {landscape.size} trials",
                              "measured": auto["trials_to_level_median"], "met": auto["within_grid_share"]},
        "fewer_trials_than_random": {
            "target": f">= {RANDOM_RATIO_TARGET:g}x", "measured": auto["random_over_this_trials"],
            "met": None if auto["random_over_this_trials"] is None
            else auto["random_over_this_trials"] >= RANDOM_RATIO_TARGET,
        },
        # "At the same final result": studies of the same length, with and without pruning, ending with as
        # good a best configuration (median over seeds, within 1%).
        "pruning_saving": {
            "target": f">= {PRUNING_SAVING_TARGET:.0%} of a {budget}-trial study's trial-seconds, as good a best",
            "measured": savings["saved_at_budget_median"],
            "met": savings["saved_at_budget_median"] >= PRUNING_SAVING_TARGET
            and auto["best_at_budget_of_grid_best"] >= summaries["autotune-no-pruning"]["best_at_budget_of_grid_best"]
            - 0.01,
        },
    }
    for name, t in targets.items():
        measured = t["measured"]
        shown = pct(measured) if name == "pruning_saving" else fmt(measured)
        console.print(f"target {name}: {t['target']}: {shown} -> {check(t['met'])}")
    return {
        "strategies": summaries,
        "pruning": savings,
        "targets": targets,
        # The sequences of the first two seeds only, as examples: all of them make a 2.4 MB file.
        "trials": {s: [{"seed": r.seed, "keys": r.keys, "costs": [round(c, 3) for c in r.costs], "states": r.states}
                       for r in rs[:2]] for s, rs in replays.items()},
    }


# ------------------------------------------------------------------------------------------------ judged on a repeat
def judged_on(landscape: Landscape, other: Landscape, replays: dict[str, list[Replay]], budget: int) -> dict[str, Any]:
    """Each autotune strategy's choice after ``budget`` trials, read on another recording of the same grid.

    A replay's sampler and pruner see one reading per configuration, and its "best after N trials" is that
    same reading, so a replay cannot show what run-to-run noise costs a pruner: a configuration pruned on an
    unlucky window, a choice that was a lucky reading. On the other recording (an independent reading of every
    configuration) a study's choice is worth what that configuration measured there; one that did not complete
    there (a timeout) is worth 0."""
    same_grid(landscape, other)
    measured = {k: float(r["throughput_samples_s"]) for k, r in other.by_config().items()
                if r["outcome"] == "complete" and r["throughput_samples_s"]}

    def worth(replay: Replay) -> float:
        key = replay.pick_within(budget)
        return measured.get(key, 0.0) / other.best if key else 0.0

    unpruned = replays["autotune-no-pruning"]
    unpruned_worth = [worth(r) for r in unpruned]
    default_margin = _default_margin()
    rows: dict[str, dict[str, Any]] = {}
    for name, reps in replays.items():
        if not name.startswith("autotune") or name == "autotune-tpe":
            continue
        picks = [worth(r) for r in reps]
        margin = margin_of(name)
        rows[name] = {
            "margin": None if name == "autotune-no-pruning" else (default_margin if margin is None else margin),
            "pick_on_other": picks,
            "pick_on_other_median": median(picks),
            "pick_on_other_mean": statistics.mean(picks),
            "as_good_as_unpruned_seeds": sum(p >= u * 0.99 for p, u in zip(picks, unpruned_worth, strict=True)),
            "cost_at_budget_s": median([r.cost_until(budget) for r in reps]),
            "saved_at_budget_median": median([1 - r.cost_until(budget) / u.cost_until(budget)
                                              for r, u in zip(reps, unpruned, strict=True)]),
            "pruned_at_budget": median([float(r.pruned_within(budget)) for r in reps]),
        }
    print_table(
        f"The choice after {budget} trials, measured on the other recording ({other.path.name}, its best "
        f"{other.best:,.0f} samples/s); the sampler and pruner saw {landscape.path.name}",
        ["strategy", "pruner margin", "choice on the other (median)", "(mean)", "as good as unpruned (1%)",
         f"trial-s for {budget}", "saved", "pruned"],
        [[name, _margin_text(r["margin"]), pct(r["pick_on_other_median"]),
          pct(r["pick_on_other_mean"]), f"{r['as_good_as_unpruned_seeds']}/{len(r['pick_on_other'])} seeds",
          r["cost_at_budget_s"], "-" if name == "autotune-no-pruning" else pct(r["saved_at_budget_median"]),
          r["pruned_at_budget"]] for name, r in rows.items()],
    )
    return {"other": str(other.path), "other_best_samples_s": other.best, "strategies": rows}


def same_grid(landscape: Landscape, other: Landscape) -> None:
    """Exit with one line unless ``other`` records the grid ``landscape`` does (before any replay runs)."""
    if landscape.settings.get("grid") != other.settings.get("grid") or landscape.size != other.size:
        raise SystemExit(f"--judge-on {other.path}: not a recording of {landscape.path.name}'s grid; give the "
                         "repeat that landscape.py recorded of the same --grid")


def _margin_text(margin: float | str | None) -> str:
    return "-" if margin is None else margin if isinstance(margin, str) else f"{margin:g}"


def _default_margin() -> float | str:
    """The study file's default pruner margin: a number, or "measured" (from the study's repeats)."""
    from autotune.spec import PrunerSpec

    margin = PrunerSpec().margin
    return "measured" if margin is None else float(margin)


# ------------------------------------------------------------------------------------------------ live
def live_study(landscape: Landscape, budget: int, quick: bool) -> dict[str, Any]:
    from autotune.objectives import config_key
    from autotune.tuner import Tuner
    from autotune.workload_check import load_spec

    confirm = {"top_k": 1, "repeats": 1} if quick else {"top_k": 2, "repeats": 1}
    document = landscape.document("search-live", {"seed": 0}, budget, confirm=confirm)
    path = fresh_study_file(document, RUNS / "search_live")
    spec = load_spec(path)
    started = time.monotonic()
    summary = Tuner(spec).run()
    elapsed = time.monotonic() - started
    trials: list[dict[str, Any]] = []
    for t in summary.study.get_trials(deepcopy=False):
        key = t.user_attrs.get("config_key") or config_key(t.user_attrs.get("config", {}))
        trials.append({
            "number": t.number, "role": t.user_attrs.get("role"), "outcome": t.user_attrs.get("outcome"),
            "config_key": key, "live_throughput_samples_s": t.user_attrs.get("throughput_samples_s"),
            "landscape_throughput_samples_s": landscape.value(key), "wall_s": t.user_attrs.get("wall_s"),
        })
    search = [t for t in trials if t["role"] != "confirm"]
    target = LEVEL * landscape.best
    reached = next((i + 1 for i, t in enumerate(search)
                    if t["outcome"] == "complete" and (t["landscape_throughput_samples_s"] or 0) >= target), None)
    chosen_key = config_key(summary.best_config.model_dump()) if summary.best_config else None
    chosen_value = landscape.value(chosen_key) if chosen_key else None
    best_key = max((k for k in landscape.records if landscape.value(k)), key=lambda k: landscape.value(k) or 0.0)
    result = {
        "budget": budget,
        "elapsed_s": round(elapsed, 1),
        "search_trial_s": round(sum(t["wall_s"] or 0.0 for t in search), 1),
        "all_trial_s": round(sum(t["wall_s"] or 0.0 for t in trials), 1),
        "trials_to_level_by_landscape": reached,
        "chosen": summary.best_config.short() if summary.best_config else None,
        "chosen_config_key": chosen_key,
        "chosen_live_median_samples_s": summary.best.median if summary.best else None,
        "chosen_landscape_samples_s": chosen_value,
        "chosen_of_grid_best": ratio(chosen_value, landscape.best),
        "grid_best": landscape.records[best_key]["label"],
        "grid_best_samples_s": landscape.best,
        "chosen_is_grid_best": chosen_key == best_key,
        "speedup_over_baseline": summary.speedup,
        "trials": trials,
    }
    print_table(
        f"Live study: the tuner, {budget} trials (baseline included) + confirmation, against the grid",
        ["measure", "value"],
        [
            ["wall time of the whole study s", result["elapsed_s"]],
            ["trial-seconds (search / all)", f"{result['search_trial_s']} / {result['all_trial_s']}"],
            [f"trials until {LEVEL:.0%} of the grid's best (by landscape values)", reached],
            ["chosen configuration", result["chosen"]],
            ["chosen: landscape samples/s (of the grid's best)",
             f"{fmt(chosen_value)} ({pct(result['chosen_of_grid_best'])})"],
            ["grid's best", f"{result['grid_best']}: {landscape.best:,.0f} samples/s"],
            ["chosen: live median samples/s", result["chosen_live_median_samples_s"]],
            ["speed-up over the baseline (live)", result["speedup_over_baseline"]],
        ],
    )
    return result


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 seeds on the quick landscape")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/search_efficiency[_live].json)")
    parser.add_argument("--landscape", type=Path, help="landscape JSON (default benchmarks/landscape.json)")
    parser.add_argument("--seeds", type=int, help="replayed seeds per strategy (default 20; quick 3)")
    parser.add_argument("--max-trials", type=int,
                        help="trials per replayed autotune study (default twice the grid size; the peers "
                        "(random, grid, optuna-tpe) always run that)")
    parser.add_argument("--jobs", type=int, default=1, help="replay in this many processes (default 1)")
    parser.add_argument("--budget", type=int, help="trials of a study: live run and fixed-budget columns (default 15)")
    parser.add_argument("--live", action="store_true", help="run one real study instead of replaying")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES),
                        help=f"replayed strategies (default all; the targets need {', '.join(REQUIRED)})")
    parser.add_argument("--margins", type=float, nargs="+", default=[], metavar="M",
                        help="also replay the default study with pruner.margin M (strategy autotune-margin-M)")
    parser.add_argument("--judge-on", type=Path, metavar="OTHER",
                        help="another recording of the same grid: read each autotune strategy's choice there")
    args = parser.parse_args(argv)
    if any(not 0 <= m < 1 for m in args.margins):
        parser.error("--margins: give relative margins 0 <= M < 1, e.g. --margins 0.2 0.3")
    strategies = tuple(s for s in STRATEGIES if s in args.strategies or s in REQUIRED)
    strategies += tuple(f"{MARGIN_PREFIX}{m:g}" for m in args.margins)
    quick = args.quick
    quiet_optuna()
    landscape = Landscape.load(args.landscape or default_out("landscape", quick))
    budget = args.budget or (5 if quick else 15)
    name = "search_efficiency_live" if args.live else "search_efficiency"
    out = args.out or default_out(name, quick)
    started = time.monotonic()
    machine = machine_facts()
    settings: dict[str, Any] = {"quick": quick, "landscape": str(landscape.path), "landscape_date": None,
                                "landscape_configs": landscape.size, "landscape_best_samples_s": landscape.best,
                                "level": LEVEL, "budget": budget, "workload": MLP.entrypoint}
    settings["landscape_date"] = read_json(landscape.path).get("date")
    other = Landscape.load(args.judge_on) if args.judge_on and not args.live else None
    if other is not None:
        same_grid(landscape, other)
    if args.live:
        with stage(f"live study: {budget} trials + confirmation"):
            results = live_study(landscape, budget, quick)
    else:
        seeds = args.seeds or (3 if quick else 20)
        max_trials = {s: trials_of(s, landscape, args.max_trials) for s in strategies}
        settings.update(seeds=seeds, max_trials=max_trials, strategies=list(strategies), jobs=args.jobs)
        with stage(f"replaying {len(strategies)} strategies x {seeds} seeds"):
            replays = run_replays(landscape, seeds, args.max_trials, budget, strategies, args.jobs)
        results = report_replays(landscape, replays, budget)
        if other is not None:
            settings["judge_on"] = str(other.path)
            results["judged_on_other"] = judged_on(landscape, other, replays, budget)
    write_json(out, name, settings, results, machine, started)


if __name__ == "__main__":
    main()
