"""Costs as the work grows: the default sampler's ask at 50-500 trials, and the report of a 500-trial study.

One study over every knob (``SPACE``), its trials replayed (``autotune.tuner.replay_runner``: the real tuner,
storage and pruner, no training) from a synthetic landscape, is grown with random search to 50, 100, 200 and
500 trials. At each size the default sampler (autotune's GP, seeded; one sampler across its asks, as in a
study, after a first ask, recorded apart, that fits its GP from scratch) asks ``--asks`` more trials, each told
its landscape value before the next: the ask time is ``study.ask()`` plus the suggestion of every knob (the GP
fits and searches its acquisition function there), timed for the GP as it is past ``GP_MAX_TRIALS`` (where
the default hands over to TPE), for the same GP searching its acquisition function with Optuna's own
search (the code before the batched coordinate search), and for the default, interleaved. Then the search
quality of the two acquisition searches: ``--quality-seeds`` GP studies of 30 trials each on the landscape,
the best found after 10, 20 and 30 trials. Last, ``autotune report`` builds the 500-trial study's HTML page,
``--report-repeats`` times: its build time and size. PostgreSQL workers: benchmarks/pg_workers.py.

The 5% reference is a quickstart trial's wall time (benchmarks/landscape.json's median, measured on a quiet
machine), the shortest trial a user runs.

    python benchmarks/scale.py            # about 15 minutes on 2 cores
    python benchmarks/scale.py --quick    # sizes 20 and 40, one ask each
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    HERE,
    MLP,
    RUNS,
    console,
    default_out,
    fresh_study_file,
    machine_caption,
    machine_facts,
    make_spec,
    median,
    pct,
    print_table,
    quiet_optuna,
    read_json,
    stage,
    study_document,
    warn_if_busy,
    write_json,
)

#: Every knob of the knob table that runs on a CPU (pin_memory and fp16 need CUDA: the study file refuses them).
SPACE: dict[str, Any] = {
    "batch_size": {"low": 8, "high": 512, "log": True},
    "grad_accum": {"low": 1, "high": 4},
    "lr_scaling": {"choices": ["none", "linear", "sqrt"]},
    "num_workers": {"low": 0, "high": 4},
    "prefetch_factor": {"choices": [2, 4, 8]},
    "amp": {"choices": ["off", "bf16"]},
    "activation_checkpointing": {"choices": [False, True]},
    "bucket_cap_mb": {"choices": [10, 25, 50, 100]},
    "world_size": {"choices": [1, 2]},
    "threads_per_rank": {"low": 1, "high": 2},
    "compile": {"choices": ["off", "default"]},
    "sharding": {"choices": ["ddp", "fsdp"]},
    "gradient_as_bucket_view": {"choices": [False, True]},
    "static_graph": {"choices": [False, True]},
}
TRIAL = {"warmup_steps": 5, "max_steps": 50, "report_every": 5}
SHARE_TARGET = 0.05  # of a trial's time


def landscape(config: Any, seen: int) -> Any:
    """A made-up but structured throughput: larger batches, two ranks, bf16 and workers help, some knobs
    hurt; a few percent of noise from a hash of the configuration and how often it was measured."""
    from autotune.tuner import Measured

    words = config.model_dump_json() + str(seen)
    noise = 1 + (int(hashlib.sha256(words.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF - 0.5) * 0.06
    value = 1000.0 * min(config.batch_size, 256) ** 0.4 * (1.7 if config.world_size == 2 else 1.0)
    value *= (1.3 if config.amp == "bf16" else 1.0) * (1 + 0.15 * min(config.num_workers, 2))
    value *= 0.8 if config.activation_checkpointing else 1.0
    value *= 0.9 if config.sharding != "ddp" else 1.0
    return Measured(throughput_samples_s=value * noise, peak_memory_mb=200 + config.batch_size, overhead_s=1.0)


def grow(spec_random: Any, size: int) -> None:
    """Random search (the real tuner, replayed) until the study holds ``size`` trials."""
    from autotune.tuner import NoLaunch, Tuner, replay_runner

    Tuner(spec_random, launcher=NoLaunch(), run_trial=replay_runner(landscape)).run(n_trials=size)


def gp_kinds() -> dict[str, type]:
    """The GP as it is, and the same GP searching its acquisition function with Optuna's own search (what it did
    before the batched coordinate search, 2026-12-02)."""
    from autotune.compat.optuna_private import with_optuna_acquisition_search
    from autotune.samplers import PartialGPSampler

    # SPACE has far more points than the GP scores exhaustively, so the GP of that time used Optuna's search on it.
    return {"gp": PartialGPSampler, "gp_optuna_search": with_optuna_acquisition_search(PartialGPSampler)}


def samplers(spec: Any) -> dict[str, Any]:
    """The arms, each one sampler kept across its asks as a study keeps it (the GP's kernel fit starts from the
    last ask's parameters): the GP without the hand-over, the same GP with Optuna's search (:func:`gp_kinds`),
    and the default."""
    import optuna

    from autotune.samplers import GP_MAX_TRIALS
    from autotune.tuner import make_storage

    kinds = gp_kinds()

    def load(max_trials: int | None, kind: type) -> Any:
        sampler = kind(seed=0, n_startup_trials=3, warn_independent_sampling=False, max_trials=max_trials)
        return optuna.load_study(study_name=spec.name, storage=make_storage(spec.storage_url()), sampler=sampler)

    return {"gp": load(None, kinds["gp"]), "gp_optuna_search": load(None, kinds["gp_optuna_search"]),
            "default": load(GP_MAX_TRIALS, kinds["gp"])}


def search_quality(spec: Any, seeds: int, trials: int) -> dict[str, Any]:
    """The GP with each acquisition search (the batched coordinate search, Optuna's own), ``seeds`` studies of
    ``trials`` trials each on the synthetic landscape (in memory, one reading per configuration): the best
    value found after 10, 20 and ``trials`` trials over the best any study found (medians over seeds), and the
    studies' wall time (the sampler's asks nearly all of it)."""
    import optuna

    from autotune.search_space import study_space

    space = study_space(spec)
    arms = gp_kinds()
    curves: dict[str, list[list[float]]] = {arm: [] for arm in arms}
    seconds = dict.fromkeys(arms, 0.0)
    for seed in range(seeds):
        for arm, kind in arms.items():  # interleaved
            study = optuna.create_study(direction="maximize", sampler=kind(seed=seed, n_startup_trials=3))
            best: list[float] = []
            started = time.perf_counter()
            for _ in range(trials):
                trial = study.ask()
                value = landscape(space.suggest(trial), 0).throughput_samples_s
                study.tell(trial, value)
                best.append(max(best[-1], value) if best else value)
            seconds[arm] += time.perf_counter() - started
            curves[arm].append(best)
    top = max(curve[-1] for arm_curves in curves.values() for curve in arm_curves)
    return {
        arm: {f"best_after_{n}": median([curve[n - 1] / top for curve in arm_curves])
              for n in sorted({10, 20, trials}) if n <= trials}
        | {"final_per_seed": [round(curve[-1] / top, 4) for curve in arm_curves], "wall_s": round(seconds[arm], 1)}
        for arm, arm_curves in curves.items()
    }


def time_ask(spec: Any, study: Any, seen: int) -> float:
    """One trial of ``study``'s sampler: seconds for the ask and every knob's suggestion; the trial is then
    told its landscape value (as complete), so the next ask sees it."""
    from autotune.search_space import study_space

    space = study_space(spec)
    started = time.perf_counter()
    trial = study.ask()
    config = space.suggest(trial)
    seconds = time.perf_counter() - started
    study.tell(trial, landscape(config, seen).throughput_samples_s)
    return seconds


def trial_reference_s() -> float | None:
    """A quickstart trial's wall time: the median over benchmarks/landscape.json's configurations."""
    path = HERE / "landscape.json"
    if not path.exists():
        return None
    configs = read_json(path)["results"]["configs"]
    return median([c["wall_s"] for c in configs if c.get("wall_s")])


def build_report(study_file: Path, out: Path) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "report", str(study_file), "-o", str(out)],
                          capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        console.print(f"  [red]autotune report exited {proc.returncode}[/]: {proc.stderr.strip()[-300:]}")
    return {"exit_code": proc.returncode, "build_s": round(seconds, 2),
            "size_mb": round(out.stat().st_size / 2**20, 2) if out.exists() else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes 20 and 40, one ask each, one report build")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/scale.json)")
    parser.add_argument("--sizes", type=int, nargs="+", help="study sizes (default 50 100 200 500)")
    parser.add_argument("--asks", type=int, help="asks timed per size and sampler (default 3)")
    parser.add_argument("--report-repeats", type=int, help="report builds (default 2)")
    parser.add_argument("--quality-seeds", type=int, help="studies per acquisition search in the search-quality "
                        "check (default 8; 0 skips it)")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([20, 40] if args.quick else [50, 100, 200, 500])
    asks = args.asks or (1 if args.quick else 3)
    report_repeats = args.report_repeats or (1 if args.quick else 2)
    out = args.out or default_out("scale", args.quick)
    quiet_optuna()
    from autotune.samplers import GP_MAX_TRIALS

    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    folder = RUNS / "scale"
    storage = f"sqlite:///{(folder / 'scale.db').resolve()}"
    document = study_document("scale", MLP, SPACE, TRIAL, n_trials=max(sizes), confirm={"top_k": 0},
                              storage=storage)
    study_file = fresh_study_file(document, folder)
    spec = make_spec(document, folder)
    spec_random = make_spec({**document, "sampler": {"name": "random", "seed": 1}}, folder)
    reference = trial_reference_s()
    rows = []
    for size in sizes:
        with stage(f"growing the study to {size} trials (random search, replayed)"):
            grow(spec_random, size)
        loads = []
        timed: dict[str, list[float]] = {"gp": [], "gp_optuna_search": [], "default": []}
        arms = samplers(spec)
        # each arm's first ask fits its GP from scratch (a study pays that once): recorded, not in the median
        first = {arm: time_ask(spec, study, -1) for arm, study in arms.items()}
        for i in range(asks):
            for arm, study in arms.items():  # interleaved
                loads.append(round(os.getloadavg()[0], 2))
                timed[arm].append(time_ask(spec, study, i))
        row = {
            "trials": size,
            "gp_ask_s": median(timed["gp"]),
            "gp_ask_s_all": [round(s, 3) for s in timed["gp"]],
            "gp_optuna_search_ask_s": median(timed["gp_optuna_search"]),
            "gp_optuna_search_ask_s_all": [round(s, 3) for s in timed["gp_optuna_search"]],
            "default_ask_s": median(timed["default"]),
            "default_ask_s_all": [round(s, 3) for s in timed["default"]],
            "first_ask_s": {arm: round(value, 3) for arm, value in first.items()},
            "default_is": "gp" if size < GP_MAX_TRIALS else "tpe",
            "load_avg_1m": loads,
        }
        for arm in ("gp", "gp_optuna_search", "default"):
            value = row[f"{arm}_ask_s"]
            row[f"{arm}_share_of_trial"] = None if reference is None or value is None else round(value / reference, 4)
        console.print(f"  {size} trials: gp {row['gp_ask_s']:.3f} s (with Optuna's search "
                      f"{row['gp_optuna_search_ask_s']:.3f} s), default ({row['default_is']}) "
                      f"{row['default_ask_s']:.3f} s per ask (load {loads})")
        rows.append(row)
    quality_seeds = 2 if args.quick and args.quality_seeds is None else (
        8 if args.quality_seeds is None else args.quality_seeds)
    quality_trials = 15 if args.quick else 30
    quality: dict[str, Any] = {}
    if quality_seeds:
        with stage(f"search quality: {quality_seeds} seeds x {quality_trials} trials per acquisition search"):
            quality = search_quality(spec, quality_seeds, quality_trials)
    reports = []
    with stage(f"autotune report on the {sizes[-1]}-trial study, {report_repeats} build(s)"):
        for i in range(report_repeats):
            reports.append(build_report(study_file, folder / f"report-{i}.html"))
    report = {"trials": sizes[-1], "build_s": median([r["build_s"] for r in reports if r["exit_code"] == 0]),
              "size_mb": median([r["size_mb"] for r in reports if r["size_mb"] is not None]), "runs": reports}

    print_table(
        f"Ask time of the default sampler, every knob searched ({len(SPACE)} knobs), replayed study",
        ["trials", "GP ask s", "GP / trial", "with Optuna's search s", "default", "default ask s", "default / trial",
         "load"],
        [[r["trials"], r["gp_ask_s"], pct(r["gp_share_of_trial"]), r["gp_optuna_search_ask_s"], r["default_is"],
          r["default_ask_s"], pct(r["default_share_of_trial"]), r["load_avg_1m"]] for r in rows],
        caption=machine_caption(machine) + (f"; a trial: {reference:.2f} s (landscape.json median)" if reference
                                            else ""),
    )
    if quality:
        columns = [key for key in quality["gp"] if key.startswith("best_after_")]
        print_table(f"Search quality, {quality_seeds} seeds x {quality_trials} trials (of the best found, medians)",
                    ["acquisition search", *[c.replace("best_after_", "best after ") for c in columns], "wall s"],
                    [[arm, *[pct(result[c]) for c in columns], result["wall_s"]] for arm, result in quality.items()])
    print_table(f"autotune report at {report['trials']} trials", ["build s", "HTML MB"],
                [[report["build_s"], report["size_mb"]]])
    write_json(out, "scale",
               {"quick": args.quick, "sizes": sizes, "asks": asks, "report_repeats": report_repeats,
                "quality_seeds": quality_seeds, "quality_trials": quality_trials,
                "knobs": sorted(SPACE), "trial": TRIAL, "gp_max_trials": GP_MAX_TRIALS,
                "trial_reference_s": reference, "share_target": SHARE_TARGET},
               {"ask": rows, "report": report, "search_quality": quality}, machine, started)


if __name__ == "__main__":
    main()
