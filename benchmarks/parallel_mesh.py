"""The parallel mesh on the built-in decoder-only transformer (autotune/workloads/gpt.py), at world size 4.

Three parts (``--part``; all by default):

- ``grid``: every mesh of the workload at 4 ranks (pp x dp x tp: 1x4x1, 1x2x2, 1x1x4, 2x2x1, 2x1x2, 4x1x1; the
  pipelines 1F1B with 4 micro-batches) under ddp and fsdp on the data-parallel axis, measured in ``--rounds``
  interleaved rounds (each round every mesh once, its order rotated): each mesh's median samples/s, spread and
  peak memory per rank, and the grid's best.
- ``choice``: a fresh study (``autotune.calibrate``) over the same meshes (tensor_parallel and pipeline_parallel
  in {1, 2, 4}, sharding, world_size 4) chooses one; then a referee measures the choice against the grid's best
  in ``--referee`` interleaved rounds. Target: the choice within 5% of the grid's best (chosen / best >= 0.95).
- ``memory``: the same transformer made wider (dim 512: ~12.7M parameters, 200 MB of training state), every
  mesh's peak per rank measured once (under ddp: FSDP2 on the CPU peaked above ddp on every mesh of this model,
  so the meshes that shard its state here are the tensor and pipeline ones); the memory budget set halfway
  between the replicated mesh's peak (1x4x1, the one mesh that shards nothing) and the largest peak below it,
  so only meshes that shard the training state meet it. A study with that budget (its baseline on the first
  sharded mesh that meets it) must launch no
  configuration over the budget (its measured peaks) and choose the fastest mesh that meets it; its choice is
  refereed against that mesh of the grid (when they differ) in interleaved rounds. Targets: 0 launched over
  budget, the choice within 5% of the fastest feasible mesh.

    python benchmarks/parallel_mesh.py                 # all parts, ~45 minutes on 2 cores
    python benchmarks/parallel_mesh.py --part memory   # one part
    python benchmarks/parallel_mesh.py --quick         # smoke run: 3 meshes, 1 round, 4-trial studies; ~8 min
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from _common import (
    RUNS,
    Trials,
    WorkloadRef,
    check,
    console,
    default_out,
    fmt,
    fresh_study_file,
    interleaved,
    machine_caption,
    machine_facts,
    median,
    pct,
    print_table,
    quiet_optuna,
    ratio,
    spread,
    stage,
    study_document,
    warn_if_busy,
    write_json,
)

GPT = WorkloadRef("autotune.workloads.gpt:build", {"vocab": 64, "dim": 64, "heads": 4, "layers": 4, "seq": 32})
GPT_WIDE = WorkloadRef("autotune.workloads.gpt:build", {"vocab": 64, "dim": 512, "heads": 4, "layers": 4, "seq": 32})
GPT_WIDE_QUICK = WorkloadRef("autotune.workloads.gpt:build",
                             {"vocab": 64, "dim": 256, "heads": 4, "layers": 4, "seq": 32})
WORLD = 4
MESHES = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)]  # (pp, tp) at 4 ranks: dp = 4 / (pp x tp)
MESHES_QUICK = [(1, 1), (1, 2), (2, 1)]
PIPELINE = {"pipeline_schedule": "1f1b", "pipeline_microbatches": 4}
BATCH = 16
TRIAL = {"warmup_steps": 3, "max_steps": 15, "report_every": 3, "max_seconds": 120}
TRIAL_QUICK = {"warmup_steps": 1, "max_steps": 5, "report_every": 2, "max_seconds": 90}
TARGET = 0.95
MEMORY_FSDP_NOTE = ("FSDP2 on the CPU (gloo) peaked above ddp on every mesh of the wide transformer (658 against "
                    "619 MB replicated at 4 ranks, 560 against 423 MB on 2 stages; 2026-12-06): the memory-bound "
                    "part searches the tensor and pipeline meshes under ddp")


def mesh_knobs(pp: int, tp: int, sharding: str) -> dict[str, Any]:
    knobs: dict[str, Any] = {"world_size": WORLD, "tensor_parallel": tp, "pipeline_parallel": pp,
                             "sharding": sharding, "batch_size": BATCH}
    return {**knobs, **PIPELINE} if pp > 1 else knobs


def arms_of(meshes: list[tuple[int, int]], shardings: list[str]) -> dict[str, dict[str, Any]]:
    """``{label: knobs}``, the label the mesh as autotune names it (``pp1.dp2.tp2 fsdp``)."""
    from autotune.search_space import mesh_label

    return {f"{mesh_label(k)} {k['sharding']}": k for pp, tp in meshes for s in shardings
            if (k := mesh_knobs(pp, tp, s))}


def measure(workload: WorkloadRef, arms: dict[str, Any], rounds: int, limits: dict[str, Any], folder: str
            ) -> dict[str, dict[str, Any]]:
    """Each arm (knobs or a TrialConfig) once a round, ``rounds`` interleaved rounds; per arm its runs and median."""
    labels = list(arms)
    with Trials(workload, RUNS / "parallel_mesh" / folder) as trials:
        trials.run(trials.config({}), {"warmup_steps": 1, "max_steps": 2}, "warm", tag="warm-up")  # the zygote

        def run(label: str, repeat: int) -> dict[str, Any]:
            arm = arms[label]
            config = trials.config(arm) if isinstance(arm, dict) else arm
            result = trials.run(config, limits, "warm", tag=label.replace(" ", "-"))
            console.print(f"  {label:28s} #{repeat + 1}: {result.outcome.value}, "
                          f"{fmt(result.throughput_samples_s)} samples/s, peak {fmt(result.peak_memory_mb)} MB")
            return {"outcome": result.outcome.value, "throughput_samples_s": result.throughput_samples_s,
                    "peak_memory_mb": result.peak_memory_mb, "reason": result.reason,
                    "config": config.model_dump(mode="json")}

        runs = interleaved(labels, rounds, run)
    out = {}
    for label, arm_runs in zip(labels, runs, strict=True):
        values = [r["throughput_samples_s"] for r in arm_runs
                  if r["outcome"] == "complete" and r["throughput_samples_s"]]
        peaks = [r["peak_memory_mb"] for r in arm_runs if r["peak_memory_mb"]]
        out[label] = {"median": median(values), "spread": spread(values), "values": values,
                      "peak_memory_mb": max(peaks) if peaks else None, "runs": arm_runs,
                      "config": arm_runs[0]["config"]}
    return out


def best_of(stats: dict[str, dict[str, Any]], labels: list[str] | None = None) -> str:
    pool = [label for label in (labels or list(stats)) if stats[label]["median"]]
    return max(pool, key=lambda label: stats[label]["median"])


def study(name: str, workload: WorkloadRef, meshes: list[tuple[int, int]], shardings: list[str], quick: bool,
          extra: dict[str, Any] | None = None) -> tuple[Any, Path]:
    """A fresh study over the meshes (autotune.calibrate): its Calibration and its study file."""
    import autotune

    pps = sorted({pp for pp, _ in meshes})
    tps = sorted({tp for _, tp in meshes})
    space: dict[str, Any] = {"world_size": WORLD, "batch_size": BATCH, "pipeline_schedule": "1f1b",
                             "pipeline_microbatches": 4, "tensor_parallel": {"choices": tps},
                             "pipeline_parallel": {"choices": pps}, "sharding": {"choices": shardings}}
    document = study_document(name, workload, space, TRIAL_QUICK if quick else TRIAL, sampler={"seed": 0},
                              n_trials=4 if quick else 10, confirm={"top_k": 1 if quick else 2})
    document.update(extra or {})
    path = fresh_study_file(document, RUNS / "parallel_mesh" / name)
    return autotune.calibrate(path), path


def referee(workload: WorkloadRef, chosen: Any, best: dict[str, Any], rounds: int, limits: dict[str, Any],
            folder: str) -> dict[str, Any]:
    """The study's choice against the grid's best, ``rounds`` interleaved rounds: chosen / best."""
    from autotune.search_space import mesh_label

    chosen_knobs = {k: getattr(chosen, k) for k in best}
    if chosen_knobs == best:
        return {"same": True, "ratio": 1.0}
    stats = measure(workload, {"chosen": chosen, "grid-best": best}, rounds, limits, folder)
    return {"same": False, "chosen": mesh_label(chosen.knobs()), "ratio": ratio(stats["chosen"]["median"],
                                                                               stats["grid-best"]["median"]),
            "arms": stats}


def grid_part(quick: bool, rounds: int, limits: dict[str, Any]) -> dict[str, Any]:
    meshes = MESHES_QUICK if quick else MESHES
    shardings = ["ddp"] if quick else ["ddp", "fsdp"]
    arms = arms_of(meshes, shardings)
    with stage(f"grid: {len(arms)} meshes x {rounds} interleaved rounds"):
        stats = measure(GPT, arms, rounds, limits, "grid")
    best = best_of(stats)
    print_table("every mesh at 4 ranks", ["mesh", "samples/s", "spread", "peak MB", "x best"],
                [[label, s["median"], pct(s["spread"]), s["peak_memory_mb"], ratio(s["median"], stats[best]["median"])]
                 for label, s in sorted(stats.items(), key=lambda kv: -(kv[1]["median"] or 0))])
    return {"arms": arms, "stats": stats, "best": best, "meshes": meshes, "shardings": shardings}


def choice_part(quick: bool, grid: dict[str, Any], referee_rounds: int, limits: dict[str, Any]) -> dict[str, Any]:
    # The study's baseline on a 4-rank mesh other than the grid's best (a study's baseline is the workload's default,
    # one rank, unless told: on 2 cores one rank outruns every 4-rank mesh, and the study chose it, judging nothing)
    baseline = grid["arms"][next(label for label in grid["arms"] if label != grid["best"])]
    with stage("choice: a study over the same meshes"):
        calibration, _ = study("parallel-mesh-choice", GPT, grid["meshes"], grid["shardings"], quick,
                               extra={"baseline": baseline})
    console.print(f"  chose {calibration.summary()}")
    with stage(f"choice: the choice against the grid's best, {referee_rounds} interleaved rounds"):
        judged = referee(GPT, calibration.config, grid["arms"][grid["best"]], referee_rounds, limits, "referee")
    met = judged["ratio"] is not None and judged["ratio"] >= TARGET
    console.print(f"  chosen / grid's best: {fmt(judged['ratio'])} ({check(met)}: >= {TARGET})")
    return {"chosen": calibration.config.knobs(), "grid_best": grid["best"], "referee": judged, "met": met}


def memory_part(quick: bool, referee_rounds: int, limits: dict[str, Any]) -> dict[str, Any]:
    from autotune.search_space import mesh_label

    workload = GPT_WIDE_QUICK if quick else GPT_WIDE
    meshes = MESHES_QUICK if quick else MESHES
    # the meshes that shard the training state here are the tensor and pipeline ones: FSDP2 on the CPU peaked
    # above ddp on every mesh of this model (MEMORY_FSDP_NOTE), so a budget only FSDP meshes met could not exist
    shardings = ["ddp"]
    arms = arms_of(meshes, shardings)
    with stage(f"memory: every mesh's peak per rank, {len(arms)} meshes once"):
        stats = measure(workload, arms, 1, limits, "memory-grid")
    prediction = predicted_from_five(stats)
    print_table("memory predicted from 5 other meshes' trials (5 draws)", ["mesh kind", "median miss", "meshes"],
                [[kind, pct(v["median_miss"]), len(v["meshes"])] for kind, v in prediction.items()])
    replicated = arms_of([(1, 1)], ["ddp"])
    top = next(iter(replicated))
    # halfway between the replicated mesh's peak and the largest below it (a mesh that peaks above it, FSDP's
    # gathered blocks on a small model, is over the budget too)
    below = [s["peak_memory_mb"] for s in stats.values() if s["peak_memory_mb"] and
             s["peak_memory_mb"] < stats[top]["peak_memory_mb"]]
    budget = round((stats[top]["peak_memory_mb"] + max(below)) / 2, 1)
    feasible = [label for label, s in stats.items() if s["peak_memory_mb"] and s["peak_memory_mb"] <= budget]
    fastest = best_of(stats, feasible)
    console.print(f"  budget {budget} MB: {len(feasible)} of {len(stats)} meshes meet it; the fastest {fastest}")
    # the baseline on a sharded mesh (a study's baseline is always launched): the first (fewest model ranks)
    baseline = arms[next(label for label in arms if label in feasible and label != top)]
    extra = {"constraints": {"max_memory_mb": budget}, "baseline": baseline}
    with stage("memory: a study with that budget"):
        calibration, path = study("parallel-mesh-memory", workload, meshes, shardings, quick, extra)
    import optuna

    trials = optuna.load_study(study_name="parallel-mesh-memory",
                               storage=f"sqlite:///{path.parent / 'parallel-mesh-memory.db'}").get_trials()
    launched = [t for t in trials if t.user_attrs.get("launched") is not False]
    over = [t.number for t in launched if (t.user_attrs.get("peak_memory_mb") or 0) > budget]
    skipped = [mesh_label(t.user_attrs.get("config") or {}) for t in trials if t.user_attrs.get("launched") is False]
    chosen = f"{mesh_label(calibration.config.knobs())} {calibration.config.sharding}"
    with stage(f"memory: the choice against the fastest feasible mesh, {referee_rounds} interleaved rounds"):
        judged = referee(workload, calibration.config, arms[fastest], referee_rounds, limits, "memory-referee")
    met = not over and chosen in feasible and judged["ratio"] is not None and judged["ratio"] >= TARGET
    console.print(f"  launched over budget: {len(over)}; skipped unlaunched: {skipped}; chose {chosen}, "
                  f"{fmt(judged['ratio'])} of the fastest feasible ({check(met)})")
    peaks = {label: s["peak_memory_mb"] for label, s in stats.items()}
    return {"workload_args": dict(workload.args), "shardings": shardings, "note": MEMORY_FSDP_NOTE,
            "budget_mb": budget, "peaks": peaks, "feasible": feasible, "fastest_feasible": fastest, "chosen": chosen,
            "chosen_feasible": chosen in feasible, "launched_over_budget": over, "skipped": skipped,
            "trials": len(trials), "referee": judged, "met": met, "prediction_by_kind": prediction}


def kind_of(config: dict[str, Any]) -> str:
    """dp, fsdp, tp, pp, fsdp x tp, tp x pp, ...: the degrees above 1 and the sharding on dp."""
    parts = []
    dp = config["world_size"] // (config["tensor_parallel"] * config["pipeline_parallel"])
    if dp > 1:
        parts.append("dp" if config["sharding"] == "ddp" else "fsdp")
    parts += [name for name, key in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel")) if config[key] > 1]
    return " x ".join(parts) or "one rank"


def predicted_from_five(stats: dict[str, dict[str, Any]], draws: int = 5) -> dict[str, Any]:
    """Each mesh's peak predicted by autotune's memory model from 5 trials of other meshes (``draws`` seeded
    draws of the 5), its relative miss; the median miss per mesh kind (target: within 10%)."""
    import random

    from autotune.objectives import MemoryModel, MemoryPoint

    points = {label: MemoryPoint(s["config"], s["peak_memory_mb"]) for label, s in stats.items() if s["peak_memory_mb"]}
    misses: dict[str, list[float]] = {}
    meshes: dict[str, list[str]] = {}
    for label, target in points.items():
        others = [p for other, p in points.items() if other != label]
        for draw in range(draws):
            chosen = random.Random(draw).sample(others, min(5, len(others)))
            prediction = MemoryModel(chosen).predict(target.config)
            if prediction is not None:
                kind = kind_of(dict(target.config))
                misses.setdefault(kind, []).append(abs(prediction.mb - target.peak_mb) / target.peak_mb)
                meshes.setdefault(kind, [])
                if label not in meshes[kind]:
                    meshes[kind].append(label)
    return {kind: {"median_miss": median(values), "met": (median(values) or 1.0) <= 0.10, "meshes": meshes[kind]}
            for kind, values in misses.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 meshes, 1 round, 4-trial studies")
    parser.add_argument("--part", choices=["grid", "choice", "memory", "all"], default="all")
    parser.add_argument("--rounds", type=int, help="interleaved rounds of the grid (default 3; quick 1)")
    parser.add_argument("--referee", type=int, help="interleaved rounds of each referee (default 5; quick 1)")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/parallel_mesh.json)")
    args = parser.parse_args(argv)
    quick = args.quick
    rounds = args.rounds or (1 if quick else 3)
    referee_rounds = args.referee or (1 if quick else 5)
    limits = TRIAL_QUICK if quick else TRIAL
    out = args.out or default_out("parallel_mesh", quick)
    quiet_optuna()
    started = time.monotonic()
    machine = machine_facts()
    warn_if_busy(machine)
    results: dict[str, Any] = {}
    if args.part in ("grid", "choice", "all"):
        results["grid"] = grid_part(quick, rounds, limits)
    if args.part in ("choice", "all"):
        results["choice"] = choice_part(quick, results["grid"], referee_rounds, limits)
    if args.part in ("memory", "all"):
        results["memory"] = memory_part(quick, referee_rounds, limits)
    settings = {"quick": quick, "rounds": rounds, "referee_rounds": referee_rounds, "trial": limits,
                "workload": GPT.entrypoint, "world_size": WORLD, "batch_size": BATCH, "pipeline": PIPELINE}
    write_json(out, "parallel_mesh", settings, results, machine, started)
    console.print(machine_caption(machine))


if __name__ == "__main__":
    main()
