#!/usr/bin/env bash
# GPU check: the quickstart study on CUDA, plus one forced fp16 trial; its numbers go to a JSON file.
#
#   benchmarks/gpu_check.sh [--quick] [--out PATH]      (default out: benchmarks/gpu_check.json;
#                                                        --quick: benchmarks/runs/gpu_check.quick.json)
#
# What it runs (from the repository root, with the Python in $PYTHON or `python`):
#   1. studies/quickstart.yaml, copied to benchmarks/runs/gpu_check/, with launcher.device cuda,
#      amp {choices: [off, bf16, fp16]}, pin_memory {choices: [false, true]} and world_size {choices: [1, 2]}
#      (1 only on a one-GPU machine), and on 2+ GPUs sharding {ddp, fsdp} and two NCCL variables in env:
#      (NCCL_ALGO {Ring, Tree}, NCCL_PROTO {Simple, LL128}): `autotune run` (12 trials + confirmation; --quick: 4);
#   2. `autotune trial` with amp=fp16, pin_memory=true and every GPU (up to 2) as ranks, with NCCL_DEBUG=INFO,
#      to show the nccl backend (NCCL's own log lines in the rank log), the GradScaler and autocast dtype
#      (applied.json), and the peak memory (on CUDA autotune reports torch.cuda.max_memory_allocated);
#   3. on 2+ GPUs, the parallel mesh on NCCL with the built-in transformer (autotune.workloads.gpt, bf16):
#      `autotune trial --check-parity` at tensor_parallel 2 and at pipeline_parallel 2 (1f1b, 4 micro-batches),
#      each beside a one-rank run of the same global batch (loss parity over 20 steps; 1e-2 for bf16);
#      on one GPU it says the mesh needs two and skips them (two ranks cannot share a GPU under NCCL);
#   4. a summary: the study's best configuration, its throughput and speed-up over the baseline, each trial's
#      outcome, throughput and peak memory, the fp16 trial's checks and the mesh's parity -> the JSON file.
# Without a CUDA GPU it says so and exits 0, running nothing.
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
QUICK=0
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (use --quick, --out PATH)" >&2; exit 2 ;;
  esac
done
if [[ -z "$OUT" ]]; then
  if [[ $QUICK == 1 ]]; then OUT=benchmarks/runs/gpu_check.quick.json; else OUT=benchmarks/gpu_check.json; fi
fi

NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')"
if [[ "$NGPU" == "0" ]]; then
  echo "gpu_check: no CUDA GPU on this machine ($(hostname); torch $("$PY" -c 'import torch; print(torch.__version__)')); nothing to check"
  exit 0
fi

WORK=benchmarks/runs/gpu_check
rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$OUT")"
N_TRIALS=12
if [[ $QUICK == 1 ]]; then N_TRIALS=4; fi
RANKS=$(( NGPU >= 2 ? 2 : 1 ))
STARTED=$(date +%s)

# 1. the quickstart on CUDA
"$PY" - "$WORK/study.yaml" "$N_TRIALS" "$RANKS" <<'EOF'
import sys
from pathlib import Path

import yaml

path, n_trials, ranks = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
study = yaml.safe_load(Path("studies/quickstart.yaml").read_text())
study["name"] = "gpu-check"
study.pop("storage", None)  # an SQLite file beside the copy
study["launcher"]["device"] = "cuda"
study["search_space"]["amp"] = {"choices": ["off", "bf16", "fp16"]}
study["search_space"]["pin_memory"] = {"choices": [False, True]}
study["search_space"]["world_size"] = {"choices": [1, 2]} if ranks == 2 else 1
if ranks == 2:  # what only matters between GPUs: FSDP sharding and NCCL's algorithm and protocol
    study["search_space"]["sharding"] = {"choices": ["ddp", "fsdp"]}
    study["env"] = {"NCCL_ALGO": {"choices": ["Ring", "Tree"]}, "NCCL_PROTO": {"choices": ["Simple", "LL128"]}}
study["budget"] = {"n_trials": n_trials}
if n_trials < 10:
    study["confirm"] = {"top_k": 1, "repeats": 1}
path.write_text(yaml.safe_dump(study, sort_keys=False))
EOF
echo "gpu_check: $NGPU GPU(s); running the quickstart on CUDA ($N_TRIALS trials)"
"$PY" -m autotune.cli run "$WORK/study.yaml" 2>&1 | tee "$WORK/run.log"
"$PY" -m autotune.cli best "$WORK/study.yaml" --format json > "$WORK/best.json"

# 2. one forced fp16 trial on every GPU (up to 2), NCCL's log on
echo "gpu_check: one fp16 trial with pinned memory on $RANKS rank(s)"
NCCL_DEBUG=INFO "$PY" -m autotune.cli trial "$WORK/study.yaml" --set amp=fp16 --set pin_memory=true \
  --set world_size="$RANKS" --json --dir "$WORK/fp16" > "$WORK/fp16.json"

# 3. the parallel mesh on NCCL: tensor parallel and pipeline parallel, each checked against one rank
cat > "$WORK/mesh.yaml" <<'EOF'
name: gpu-check-mesh
workload: {entrypoint: autotune.workloads.gpt:build, args: {dim: 256, heads: 8, layers: 4, seq: 128}}
launcher: {device: cuda}
search_space: {batch_size: 16, amp: bf16}
trial: {max_steps: 20, max_seconds: 300}
EOF
for CASE in tp pp; do
  if [[ $RANKS -lt 2 ]]; then
    echo "gpu_check: the $CASE mesh needs 2 GPUs (this machine has $NGPU); skipped"
    echo '{"skipped": "needs 2 GPUs"}' > "$WORK/mesh_$CASE.json"
    continue
  fi
  if [[ $CASE == tp ]]; then SETS=(--set tensor_parallel=2); else
    SETS=(--set pipeline_parallel=2 --set pipeline_schedule=1f1b --set pipeline_microbatches=4); fi
  echo "gpu_check: the $CASE mesh on 2 GPUs beside one rank (--check-parity)"
  "$PY" -m autotune.cli trial "$WORK/mesh.yaml" --set world_size=2 "${SETS[@]}" --check-parity --json \
    --dir "$WORK/mesh_$CASE" > "$WORK/mesh_$CASE.json" || true
done

# 4. the numbers
"$PY" - "$WORK" "$OUT" "$STARTED" "$RANKS" <<'EOF'
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import optuna
import torch

work, out, started, ranks = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
storage = f"sqlite:///{(work / 'gpu-check.db').resolve()}"
study = optuna.load_study(study_name="gpu-check", storage=storage)
trials = [
    {
        "number": t.number,
        "role": t.user_attrs.get("role"),
        "outcome": t.user_attrs.get("outcome"),
        "config": t.user_attrs.get("config_key"),
        "throughput_samples_s": t.user_attrs.get("throughput_samples_s"),
        "peak_memory_mb": t.user_attrs.get("peak_memory_mb"),
        "time_to_first_step_s": t.user_attrs.get("time_to_first_step_s"),
        "wall_s": t.user_attrs.get("wall_s"),
    }
    for t in study.get_trials(deepcopy=False)
]
fp16 = json.loads((work / "fp16.json").read_text())
fp16_dir = work / "fp16"
applied = json.loads((fp16_dir / "applied.json").read_text()) if (fp16_dir / "applied.json").exists() else {}
rank0 = (fp16_dir / "rank0.log").read_text(errors="replace") if (fp16_dir / "rank0.log").exists() else ""
record = {
    "benchmark": "gpu_check",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "duration_s": round(time.time() - started, 1),
    "machine": {
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "cuda": torch.version.cuda,
        "nproc": len(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "python": platform.python_version(),
    },
    "results": {
        "best": json.loads((work / "best.json").read_text()),
        "trials": trials,
        "outcomes": {o: sum(t["outcome"] == o for t in trials) for o in {t["outcome"] for t in trials}},
        "fp16_trial": {
            "outcome": fp16.get("outcome"),
            "reason": fp16.get("reason"),
            "ranks": ranks,
            "throughput_samples_s": fp16.get("throughput_samples_s"),
            "peak_memory_mb (max_memory_allocated)": fp16.get("peak_memory_mb"),
            "grad_scaler": applied.get("grad_scaler"),
            "autocast_dtype": applied.get("autocast_dtype"),
            "pin_memory": (applied.get("dataloader") or {}).get("pin_memory"),
            "nccl_in_rank0_log": "NCCL INFO" in rank0,
        },
        "mesh": {},  # tp, pp: the parity of each (or why it did not run)
    },
}
for case in ("tp", "pp"):
    text = (work / f"mesh_{case}.json").read_text()
    answer = json.loads(text) if text.strip() else {"failed": "no answer (see the trial folder)"}
    record["results"]["mesh"][case] = answer.get("parity", answer)
out.write_text(json.dumps(record, indent=2, default=str) + "\n")
checks = record["results"]["fp16_trial"]
print(json.dumps(checks, indent=2))
ok = checks["outcome"] == "complete" and checks["grad_scaler"] is True and checks["autocast_dtype"] == "float16"
ok = ok and (ranks == 1 or checks["nccl_in_rank0_log"])
mesh = record["results"]["mesh"]
print(json.dumps(mesh, indent=2))
ok = ok and (ranks == 1 or all(m.get("ok") is True for m in mesh.values()))
print(f"gpu_check: wrote {out}; fp16/GradScaler/nccl/mesh parity checks {'passed' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
EOF
