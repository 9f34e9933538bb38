"""How soon `autotune run` reaches its first trial: the command's start to the first rank, and a whole 1-trial run.

Before the first trial `autotune run` imports and checks the workload (for a real model, its library: transformers
takes ~5 s here) and its warm launcher's zygote imports torch (3.4 s). This runs `autotune run STUDY --n-trials 1
--set confirm.top_k=0` on a fresh copy of each study file with `AUTOTUNE_TRACE` (the real code's spans,
autotune/trial_runner/_trace.py) and reads, per run: the command's start to the tuner's start (`tuner_run`), to
the first rank's start (`rank_start`), and the whole run's wall time. `--tree NAME=PATH` runs another source tree
(PYTHONPATH; this checkout's own code is `this`) in alternate rounds, the order flipped every round.

    python benchmarks/startup.py                                  # the quickstart and the GPT-2, 4 rounds
    python benchmarks/startup.py --tree before=/path/to/other/checkout
    python benchmarks/startup.py --quick                          # smoke run: the quickstart, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    REPO,
    RUNS,
    console,
    default_out,
    fmt,
    machine_caption,
    machine_facts,
    median,
    print_table,
    stage,
    warn_if_busy,
    write_json,
)

STUDIES = {"quickstart": REPO / "studies" / "quickstart.yaml", "hf_gpt2": REPO / "studies" / "hf_gpt2.yaml"}
#: What a study file's workload needs beside it (studies/hf_gpt2.yaml's entrypoint is a file next to it).
NEIGHBOURS = {"hf_gpt2": ["hf_gpt2.py"]}


def run_once(study: str, tree: Path | None, folder: Path) -> dict[str, Any]:
    """One `autotune run` of a fresh copy of ``study`` in ``folder``, traced; its times from the command's start."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    source = STUDIES[study]
    shutil.copy(source, folder / source.name)
    for name in NEIGHBOURS.get(study, []):
        shutil.copy(source.parent / name, folder / name)
    trace = folder / "trace.jsonl"
    env = {**os.environ, "AUTOTUNE_TRACE": str(trace)}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "autotune.cli", "run", source.name, "--n-trials", "1", "--set", "confirm.top_k=0"]
    started = time.time()
    with (folder / "run.log").open("wb") as log:
        code = subprocess.run(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              timeout=600).returncode
    wall = time.time() - started
    events = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()] if trace.exists() else []
    ranks = [e["start"] for e in events if e["span"] == "rank_start"]
    tuner = [e["start"] for e in events if e["span"] == "tuner_run"]
    if code != 0:
        console.print(f"  [red]autotune run exited {code}[/]: see {folder / 'run.log'}")
    return {"rc": code, "wall_s": round(wall, 3),
            "to_tuner_s": round(tuner[0] - started, 3) if tuner else None,
            "to_first_rank_s": round(min(ranks) - started, 3) if ranks else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: the quickstart, 1 round")
    parser.add_argument("--rounds", type=int, help="runs per study and tree (default 4; quick 1)")
    parser.add_argument("--studies", nargs="+", choices=sorted(STUDIES), help="default: both (quick: quickstart)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="another source tree, run in alternate rounds (this checkout is 'this')")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/startup.json)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 4)
    if rounds < 1:
        parser.error("--rounds: give 1 or more")
    studies = args.studies or (["quickstart"] if args.quick else ["quickstart", "hf_gpt2"])
    trees: dict[str, Path | None] = {}
    for item in args.tree:
        name, sep, path = item.partition("=")
        if not sep or not name or not Path(path).is_dir():
            parser.error(f"--tree {item!r}: give NAME=PATH, PATH a source checkout")
        trees[name] = Path(path).resolve()
    trees["this"] = REPO  # this checkout, whatever autotune the environment has installed
    out = args.out or default_out("startup", args.quick)
    machine = machine_facts()
    warn_if_busy(machine)
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    labels = list(trees)
    with stage(f"{rounds} round(s) x {len(studies)} study file(s) x {len(labels)} tree(s)"):
        for r in range(rounds):
            for study in studies:
                for label in labels if r % 2 == 0 else labels[::-1]:
                    found = run_once(study, trees[label], RUNS / "startup" / f"{study}-{label}-{r}")
                    runs.append({"round": r, "study": study, "tree": label, **found})
                    console.print(f"  {study} {label} #{r + 1}: first rank at {fmt(found['to_first_rank_s'])} s, "
                                  f"whole run {fmt(found['wall_s'])} s")
    rows = []
    summary = []
    for study in studies:
        for label in labels:
            mine = [x for x in runs if x["study"] == study and x["tree"] == label and x["rc"] == 0]
            row = {"study": study, "tree": label, "runs": len(mine),
                   "to_tuner_s": median([x["to_tuner_s"] for x in mine if x["to_tuner_s"] is not None]),
                   "to_first_rank_s": median([x["to_first_rank_s"] for x in mine if x["to_first_rank_s"] is not None]),
                   "wall_s": median([x["wall_s"] for x in mine])}
            summary.append(row)
            rows.append([study, label, row["runs"], row["to_tuner_s"], row["to_first_rank_s"], row["wall_s"]])
    print_table("`autotune run --n-trials 1` (no confirmation): seconds from the command's start, medians",
                ["study", "tree", "runs", "to the tuner's start", "to the first rank", "whole run"], rows,
                caption=machine_caption(machine))
    write_json(out, "startup", {"quick": args.quick, "rounds": rounds, "studies": studies,
                                "trees": {k: str(v) for k, v in trees.items()}},
               {"summary": summary, "runs": runs}, machine, started)
    if any(x["rc"] != 0 for x in runs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
