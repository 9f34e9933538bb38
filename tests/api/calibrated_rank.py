"""One training step with a Calibration's helpers, as a user's rank runs it: a real gloo process group, the
model wrapped in DDP with ``ddp_kwargs()``, the optimizer at ``lr`` and ``autocast()``. Prints what it saw
as one JSON line.

It runs as its own process and leaves with ``os._exit`` after ``destroy_process_group()``: each backward
pass leaves a Python object in the state gloo's threads capture, and freeing the last DDP model while the
interpreter holds the GIL joins a gloo thread that waits for the GIL (torch 2.13 on CPU) — inside the test
process that hung the whole suite.

    python calibrated_rank.py STUDY.yaml STORE_FILE   (the calibration's JSON on stdin)
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import autotune
from autotune.workload import study_workload


def main() -> None:
    study, store = sys.argv[1], sys.argv[2]
    calibration = autotune.Calibration.from_json(sys.stdin.read())
    workload = study_workload(autotune.load_spec(study))
    x, y = next(iter(DataLoader(workload.dataset(), **calibration.dataloader_kwargs())))
    dist.init_process_group("gloo", store=dist.FileStore(store, 1), rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(workload.model(), **calibration.ddp_kwargs())
    optimizer = workload.optimizer(model.parameters(), calibration.lr)
    before = [p.detach().clone() for p in model.parameters()]
    with calibration.autocast():
        autocast = torch.is_autocast_enabled("cpu")
        loss = workload.loss(model, (x, y))
    loss.float().backward()
    optimizer.step()
    seen = {
        "bucket_bytes_cap": model.bucket_bytes_cap,
        "lr": optimizer.param_groups[0]["lr"],
        "autocast": autocast,
        "loss": float(loss),
        "updated": any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True)),
    }
    print(json.dumps(seen), flush=True)
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
