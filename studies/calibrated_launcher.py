"""A training launcher whose first step is autotune.calibrate().

    python studies/calibrated_launcher.py                  # calibrate (or reuse the study), then train
    python studies/calibrated_launcher.py --n-trials 4 --steps 50

The launcher calibrates on studies/quickstart.yaml, then starts torchrun with the chosen number of ranks;
each rank rebuilds the Calibration from an environment variable and applies it: the environment and
threads per rank, DataLoader keyword arguments, torch.compile, FSDP sharding or DDP with its keyword
arguments, autocast, gradient accumulation with no_sync, and the scaled learning rate.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import autotune
from autotune.workload import study_workload

STUDY = Path(__file__).with_name("quickstart.yaml")


def launch(n_trials: int | None, steps: int) -> int:
    calibration = autotune.calibrate(STUDY, n_trials=n_trials)
    print(f"calibrated: {calibration.summary()}", flush=True)
    # calibration.env(): the study's env: values and the thread variables, there before each rank starts
    env = {**os.environ, **calibration.env(), "AUTOTUNE_CALIBRATION": calibration.to_json()}
    command = [sys.executable, "-m", "torch.distributed.run", *calibration.torchrun_args(),
               "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", __file__, "--train", "--steps", str(steps)]
    return subprocess.run(command, env=env, check=False).returncode


def train(steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    calibration = autotune.Calibration.from_json(os.environ["AUTOTUNE_CALIBRATION"])
    dist.init_process_group("gloo")
    # the chosen count, a threads_per_rank word resolved against this machine's cores shared by its ranks
    torch.set_num_threads(calibration.torch_threads(int(os.environ["LOCAL_WORLD_SIZE"])))
    spec = autotune.load_spec(STUDY)
    workload = study_workload(spec)  # the same MLP the study calibrated
    dataset = workload.dataset()
    sampler = DistributedSampler(dataset, drop_last=True)
    loader = DataLoader(dataset, sampler=sampler, **calibration.dataloader_kwargs())
    model = calibration.apply_activation_checkpointing(workload.model(), workload.checkpoint_modules)
    model = calibration.apply_compile(model)  # before DDP/FSDP wrap it, as the trials did
    sharded = calibration.config.sharding != "ddp"
    if sharded:
        model = calibration.apply_sharding(model, workload.shard_units)
    else:
        model = DistributedDataParallel(model, **calibration.ddp_kwargs())
    optimizer = workload.optimizer(model.parameters(), calibration.lr)
    if dist.get_rank() == 0:
        seen = {name: os.environ.get(name) for name in calibration.env()}
        sharding = calibration.config.sharding
        print(f"rank 0: {torch.get_num_threads()} threads, {sharding}, environment {seen}", flush=True)
    batches = iter(loader)
    for step in range(steps):
        for micro in range(calibration.grad_accum):
            last = micro == calibration.grad_accum - 1
            # Gradients are reduced only on the last micro-batch: forward and backward under no_sync (FSDP:
            # set_requires_gradient_sync).
            if sharded:
                model.set_requires_gradient_sync(last)
            with contextlib.nullcontext() if last or sharded else model.no_sync():
                with calibration.autocast():
                    loss = workload.loss(model, next(batches))
                (loss.float() / calibration.grad_accum).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if dist.get_rank() == 0 and (step % 10 == 0 or step == steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    # Leave without freeing the model: on gloo, freeing the last DDP model joins gloo's threads while this
    # thread holds the GIL, and a thread still dropping its last all-reduce waits for the GIL (torch 2.13).
    # Save checkpoints and flush files before this line.
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", action="store_true", help="(internal) run as a torchrun rank")
    parser.add_argument("--n-trials", type=int, default=None)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    if args.train:
        train(args.steps)
    else:
        sys.exit(launch(args.n_trials, args.steps))


if __name__ == "__main__":
    main()
