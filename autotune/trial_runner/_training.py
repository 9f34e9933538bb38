"""Longer than 350 lines because the Trainer is one object: building a rank's model, data and process group
and the training loop that steps, times and reports them share its state (knob application lives in
_apply.py, memory measuring in _memory.py).

What each rank does: build the workload, apply every knob, train and measure.

Runs inside a rank started by a launcher (torchrun). Rank 0 appends one JSON line per reporting window
to metrics.jsonl; every rank touches the heartbeat file after each step; rank 0 writes done.json at the
end. Errors are written by the caller (worker.py) to errors/rank<N>.json.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autotune.compat import torch_private
from autotune.spec import split_hyperparameters
from autotune.trial_runner._apply import (
    THREAD_ENV,
    apply_checkpointing,
    apply_threads,
    blas_threads,
    shard_model,
)
from autotune.trial_runner._data import eval_loader, train_data
from autotune.trial_runner._memory import MemorySampler
from autotune.trial_runner._pace import Gate
from autotune.trial_runner._plan import APPLIED_FILE, DONE_FILE, HEARTBEAT_FILE, METRICS_FILE, TrialPlan
from autotune.trial_runner._trace import trace_event
from autotune.trial_runner._warmup import Warmup
from autotune.workload import Workload, load_workload

# On the CPU the memory of a rank's tree (PSS) is read at a window boundary at most this often (and at the last).
MEMORY_EVERY_S = 1.0


@dataclass
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    trial_dir: Path

    @classmethod
    def from_env(cls, trial_dir: Path) -> RankContext:
        # torchrun's variables, never SLURM_*: inside an allocation SLURM_PROCID leaks into every rank.
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])),
            trial_dir=trial_dir,
        )


def _to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device, non_blocking) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    return batch


def _batch_len(batch: Any) -> int:
    """The samples in a batch: the first dimension of its first tensor (1 when it holds none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    return 1


class Trainer:
    """Builds one rank's training from a TrialPlan and runs it."""

    def __init__(self, plan: TrialPlan, ctx: RankContext) -> None:
        self.plan = plan
        self.ctx = ctx
        self.config = plan.config
        self.applied: dict[str, Any] = {}
        if self.config.device == "cuda":
            torch.cuda.set_device(ctx.local_rank)
            self.device = torch.device("cuda", ctx.local_rank)
        else:
            self.device = torch.device("cpu")
        self.threads = apply_threads(
            self.config.threads_per_rank, ctx.local_world_size, self.config.num_workers, self.device.type
        )
        self.applied["torch_threads"] = self.threads
        self.applied["threads_per_rank"] = {"setting": self.config.threads_per_rank, "resolved": self.threads}
        self.compile_s: float | None = None
        self.fsdp = False
        self.heartbeat = ctx.trial_dir / HEARTBEAT_FILE

    # -- set-up ------------------------------------------------------------------------------------------
    def init_distributed(self) -> None:
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {}
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device
        dist.init_process_group(
            backend, timeout=datetime.timedelta(seconds=self.plan.startup_timeout_s), **kwargs
        )

    def build(self) -> None:
        plan, cfg = self.plan, self.config
        workload: Workload = load_workload(plan.entrypoint, plan.args, Path(plan.base_dir), cfg.hyperparameters)
        self.workload = workload
        torch.manual_seed(plan.seed)
        model = workload.model()
        if not any(p.requires_grad for p in model.parameters()):
            raise ValueError("the workload's model has no trainable parameters")
        if cfg.activation_checkpointing:
            wrapped = apply_checkpointing(model, workload.checkpoint_modules)
            if wrapped == 0:
                raise ValueError("activation_checkpointing: no module of checkpoint_modules found in the model")
            self.applied["checkpoint_wrappers"] = wrapped
        model.to(self.device)
        if cfg.compile != "off":
            # Compiled in place before DDP/FSDP wrap it (the module tree is unchanged); the compile itself
            # happens lazily in the first step, a warm-up step.
            model.compile(mode=cfg.compile)
        self.ddp: Any = None
        if cfg.sharding != "ddp":
            self.applied["fsdp_units"] = shard_model(model, workload.shard_units, cfg, self.device)
            self.applied["fsdp_reshard_after_forward"] = cfg.sharding == "fsdp"
            self.fsdp = True
        elif self.ctx.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.ddp = DDP(
                model,
                device_ids=[self.ctx.local_rank] if self.device.type == "cuda" else None,
                bucket_cap_mb=cfg.bucket_cap_mb,
                gradient_as_bucket_view=bool(cfg.gradient_as_bucket_view),
                static_graph=bool(cfg.static_graph),
            )
            self.applied["ddp_bucket_bytes_cap"] = self.ddp.bucket_bytes_cap
            self.applied["ddp_gradient_as_bucket_view"] = self.ddp.gradient_as_bucket_view
            self.applied["ddp_static_graph"] = self.ddp.static_graph
            if plan.trace:
                self._trace_allreduce()
        self.model = self.ddp if self.ddp is not None else model
        self._rank_facts(model)
        self.write_applied()  # threads and sharding known now, before a first step that may never finish
        _, _, optimizer_kwargs = split_hyperparameters(cfg.hyperparameters)
        self.optimizer = workload.optimizer(self.model.parameters(), cfg.lr, **optimizer_kwargs)
        self.applied["optimizer_lr"] = [g["lr"] for g in self.optimizer.param_groups]
        if optimizer_kwargs:  # what the optimizer holds, as its param groups say
            group = self.optimizer.param_groups[0]
            self.applied["optimizer_kwargs"] = {k: group.get(k) for k in optimizer_kwargs}
        self.scaler = torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None
        self.applied["grad_scaler"] = self.scaler is not None
        self._build_data(workload)
        self._watch_autocast(model)

    def _build_data(self, workload: Workload) -> None:
        ctx = self.ctx
        self.data = train_data(
            workload.dataset(), self.config, ctx.rank, ctx.world_size, self.plan.seed, workload.collate_fn
        )
        self.loader = self.data.loader
        self.applied["dataloader"] = self.data.applied

    def _rank_facts(self, model: torch.nn.Module) -> None:
        """What every rank applied (threads, environment, compiled forward, sharded parameters), gathered
        to rank 0's applied.json under ``ranks``: a knob that reached only rank 0 shows there."""
        from torch.distributed.tensor import DTensor

        start_env = _start_environment()
        params = list(model.parameters())
        local = sum(
            (p.to_local().numel() if isinstance(p, DTensor) else p.numel()) for p in params
        )
        facts = {
            "rank": self.ctx.rank,
            "torch_threads": torch.get_num_threads(),
            "blas_threads": blas_threads(),
            "thread_env": {name: os.environ.get(name) for name in THREAD_ENV},
            "env": {name: os.environ.get(name) for name in self.config.env},
            # as the process started (a forked rank: as its zygote started), when libraries loaded
            "env_at_start": {name: start_env.get(name) for name in self.config.env},
            "thread_env_at_start": {name: start_env.get(name) for name in THREAD_ENV},
            "compiled": getattr(model, "_compiled_call_impl", None) is not None,
            "dtensor_params": sum(isinstance(p, DTensor) for p in params),
            "local_param_numel": local,
            "param_numel": sum(p.numel() for p in params),
            "ddp": self.ddp is not None,
        }
        gathered: list[Any] = [None] * self.ctx.world_size
        dist.all_gather_object(gathered, facts)
        self.applied["ranks"] = gathered

    def _watch_autocast(self, model: torch.nn.Module) -> None:
        """Record, once, whether autocast is on in the forward pass and with which dtype."""
        device_type = self.device.type

        def hook(module: torch.nn.Module, args: Any) -> None:
            self.applied["autocast_enabled"] = torch.is_autocast_enabled(device_type)
            self.applied["autocast_dtype"] = (
                str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
                if torch.is_autocast_enabled(device_type)
                else None
            )
            handle.remove()

        handle = model.register_forward_pre_hook(hook)

    def _trace_allreduce(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self._allreduce_count = 0

        # No annotations: DDP inspects them, and postponed (string) annotations fail its check.
        def counting_hook(state, bucket):  # type: ignore[no-untyped-def]
            self._allreduce_count += 1
            return default_hooks.allreduce_hook(state, bucket)

        self.ddp.register_comm_hook(None, counting_hook)

    # -- training -----------------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        amp = self.config.amp
        if amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def step(self, batches: Iterator[Any]) -> torch.Tensor:
        """One optimizer step: grad_accum micro-batches, all-reduce only on the last one."""
        cfg = self.config
        non_blocking = cfg.pin_memory and self.device.type == "cuda"
        total = torch.zeros((), device=self.device)
        for micro in range(cfg.grad_accum):
            batch = _to_device(next(batches), self.device, non_blocking)
            last = micro == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if (self.ddp is None or last) else self.ddp.no_sync()
            if self.fsdp and cfg.grad_accum > 1:
                self.model.set_requires_gradient_sync(last)  # FSDP2's no_sync: reduce-scatter on the last only
            with sync:
                with self.autocast():
                    loss = self.workload.loss(self.model, batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    from autotune.workload_check import describe_bad_loss

                    raise TypeError(describe_bad_loss(loss))
                scaled = loss.float() / cfg.grad_accum
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            total += loss.detach().float()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return total / cfg.grad_accum

    def train(self) -> dict[str, Any]:
        plan, cfg, ctx = self.plan, self.config, self.ctx
        limits = plan.limits
        window = limits.window()
        max_steps = limits.trial_steps(cfg.global_batch)
        warmup = Warmup.for_limits(limits, max_steps)
        # A paced run (a confirmation race) trains in blocks of pace_steps after its warm-up, each one released
        # by the tuner through the gate and followed by a stop there, until the tuner ends it.
        gate = Gate(ctx.trial_dir, ctx.rank) if plan.pace_steps else None
        if plan.pace_steps:
            window, max_steps = plan.pace_steps, 1 << 40
        batches = self.data.batches()
        metrics_path = ctx.trial_dir / METRICS_FILE
        reduce_device = self.device

        measured_s = 0.0  # slowest rank's time in measured steps
        measured_samples = 0
        window_loss = torch.zeros((), device=self.device)
        first_step_s: float | None = None
        peak = 0.0
        step = boundary_step = 0
        outcome = "complete"
        reason = f"{max_steps} steps"
        last_loss: float | None = None
        steps_log: dict[str, list[float]] | None = {"step_end": []} if plan.step_times else None
        training_started_at = time.time()
        if ctx.rank == 0:
            trace_event("training_start", training_started_at, trial_dir=str(ctx.trial_dir))
        # A window's time is the wall-clock time since the previous boundary, the boundary's own reduction
        # included: DataLoader workers keep producing while the main loop is not stepping, so timing only
        # the steps would hand a loader-bound configuration free time and make short trials optimistic.
        # The memory is read on a thread of its own (MemorySampler), not at the boundaries: a reading in the
        # loop (PSS of the rank's tree, tens of ms) either costs the window or, left out of it, gives the
        # DataLoader workers free time; with two ranks, a rank waited inside its next window for the other's
        # reading (the HF GPT-2's two-rank short trials read 8-13% below 10x longer runs).
        reads: list[tuple[int, float]] | None = [] if steps_log is not None else None
        memory = MemorySampler(self.device, MEMORY_EVERY_S, reads)
        mark = time.perf_counter()
        step_started = time.perf_counter()
        while step < max_steps:
            loss = self.step(batches)
            step += 1
            memory.step = step
            if step == 1:
                memory.start()  # after the first batch: the DataLoader's workers exist (and are forked)
            os.utime(self.heartbeat)
            if steps_log is not None:
                steps_log["step_end"].append(time.perf_counter())
            if cfg.compile != "off" and step <= 2:
                step_started = self._time_compile(step, step_started, step == max_steps)
            if step == 1:
                first_step_s = time.time() - plan.launched_at if plan.launched_at else None
                # Start-up is over: from now on a collective that takes long is a hang, not a slow start.
                torch_private.set_process_group_timeout(datetime.timedelta(seconds=plan.step_timeout_s))
                if plan.trace and self.ddp is not None:
                    self.applied["allreduce_calls_first_step"] = self._allreduce_count
                self.write_applied()
            start = warmup.measure_from
            measuring = start is not None and step > start
            window_loss += loss
            at_boundary = (
                warmup.boundary(step)
                or (start is not None and step >= start and (step - start) % window == 0)
                or step == max_steps
            )
            if not at_boundary:
                continue
            now = time.perf_counter()
            probing = warmup.warming and step > warmup.min_steps  # a probe window is timed like a measured one
            window_time, mark = (now - mark if measuring or probing else 0.0), now
            window_steps_done, boundary_step = step - boundary_step, step
            last_boundary = step == max_steps
            if self.device.type == "cuda" or last_boundary:  # CUDA: a counter; the last: the final figure
                if last_boundary:
                    memory.stop()
                peak = memory.read()
                mark = time.perf_counter()
            else:
                peak = memory.peak
            # One small reduction per window: slowest rank's time, largest memory, non-finite flag; mean loss.
            local_loss = (window_loss / max(1, window_steps_done)).float()
            finite = bool(torch.isfinite(local_loss))
            maxes = torch.tensor([window_time, peak, 0.0 if finite else 1.0], device=reduce_device)
            dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
            loss_sum = torch.tensor([local_loss.item() if finite else 0.0], device=reduce_device)
            dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
            slowest, peak_all, nonfinite = (float(x) for x in maxes.tolist())
            mean_loss = float(loss_sum.item()) / ctx.world_size
            if nonfinite:
                outcome = "diverged"
                reason = f"loss became NaN/inf by step {step}"
                break
            last_loss = mean_loss
            if warmup.warming:
                probe = window_steps_done * cfg.global_batch / slowest if probing and slowest > 0 else None
                warmup.offer(step, probe)
                if not warmup.warming:
                    self.applied["warmup"] = warmup.record()
                    self.write_applied()
            elif measuring:
                window_samples = window_steps_done * cfg.global_batch
                measured_s += slowest
                measured_samples += window_samples
                if ctx.rank == 0:
                    record = {
                        "step": step,
                        "samples": step * cfg.global_batch,
                        "elapsed_s": round(time.time() - plan.launched_at, 4) if plan.launched_at else 0.0,
                        "window_throughput_samples_s": window_samples / slowest if slowest > 0 else 0.0,
                        "throughput_samples_s": measured_samples / measured_s if measured_s > 0 else 0.0,
                        "loss": mean_loss,
                        "peak_memory_mb": round(peak_all, 2),
                        "time_to_first_step_s": round(first_step_s or 0.0, 4),
                        "warmup_steps": warmup.measure_from,
                        "settled": warmup.settled,
                    }
                    with metrics_path.open("a") as f:
                        f.write(json.dumps(record) + "\n")
            if gate is not None and (measuring or step == warmup.measure_from):
                if not gate.wait(gate.blocks + 1 if measuring else 0):  # the warm-up's end, then each block's
                    reason = f"paced: {gate.blocks} block(s)"
                    break  # the race is over: evaluate and finish as a trial does
                mark = time.perf_counter()  # the stop at the gate is no part of the next block
            window_loss = torch.zeros((), device=self.device)
        memory.stop()
        if "warmup" not in self.applied:
            self.applied["warmup"] = warmup.record()
        if steps_log is not None:
            steps_log["memory_read_step"] = [float(at) for at, _ in reads or []]
            steps_log["memory_read_s"] = [took for _, took in reads or []]
            _write_json(ctx.trial_dir / f"steps.rank{ctx.rank}.json", steps_log)
        if plan.trace and self.ddp is not None:
            self.applied["allreduce_calls_total"] = self._allreduce_count
            self.applied["steps"] = step
        summary = {
            "outcome": outcome,
            "reason": reason,
            "steps": step,
            "samples": step * cfg.global_batch,
            "training_s": measured_s,
            "loss": last_loss,
            "peak_memory_mb": peak,
            "time_to_first_step_s": first_step_s,
            "compile_s": self.compile_s,
            "threads_per_rank": self.threads,
            # wall-clock span of the training loop (epoch seconds), so launch overhead = wall - span
            "training_span_s": time.time() - training_started_at,
        }
        if ctx.rank == 0:
            trace_event("training", training_started_at, time.time(), trial_dir=str(ctx.trial_dir))
        # after the span: not training; skipped where the study does not use it (trial.evaluate)
        summary["eval_loss"] = self.evaluate() if outcome == "complete" and plan.evaluate else None
        return summary

    def evaluate(self) -> float | None:
        """The held-out loss at the trial's end, when the workload has an ``eval_dataset``.

        Every rank evaluates its share (``_data.eval_loader``: a DistributedSampler in order, or its share of a
        stream), without gradients, under the trial's autocast; the result is the mean loss over
        all ranks' samples (each batch's loss weighted by its size).
        """
        workload, cfg, ctx = self.workload, self.config, self.ctx
        if workload.eval_dataset is None:
            return None
        loader = eval_loader(workload.eval_dataset(), cfg.batch_size, ctx.rank, ctx.world_size, workload.collate_fn)
        if loader is None:
            return None
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss * samples, samples
        self.model.eval()
        try:
            with torch.no_grad():
                for batch in loader:
                    batch = _to_device(batch, self.device, False)
                    with self.autocast():
                        loss = workload.loss(self.model, batch)
                    n = _batch_len(batch)
                    totals[0] += loss.detach().double() * n
                    totals[1] += n
                    os.utime(self.heartbeat)
        finally:
            self.model.train()
        dist.all_reduce(totals)
        loss_sum, count = (float(x) for x in totals.tolist())
        return loss_sum / count if count > 0 and math.isfinite(loss_sum) else None

    def _time_compile(self, step: int, started: float, last: bool) -> float:
        """compile_s: the first step (where torch.compile compiles) less the second (compiled already).
        Both are warm-up steps or the first is; neither enters the throughput."""
        now = time.perf_counter()
        if step == 1:
            self._first_step_s = now - started
            if last:
                self.compile_s = self._first_step_s
        else:
            self.compile_s = max(0.0, self._first_step_s - (now - started))
        if self.compile_s is not None:
            self.applied["compile_s"] = round(self.compile_s, 4)
            self.write_applied()
        return time.perf_counter()

    def write_applied(self) -> None:
        """Rank 0 records what it applied (DataLoader, DDP, autocast, checkpointing, lr) in applied.json."""
        if self.ctx.rank == 0:
            _write_json(self.ctx.trial_dir / APPLIED_FILE, self.applied)

    def finish(self, summary: dict[str, Any]) -> None:
        """Rank 0 writes applied.json and then done.json, the sign of a finished run."""
        if self.ctx.rank == 0:
            self.write_applied()
            _write_json(self.ctx.trial_dir / DONE_FILE, summary)


def _start_environment() -> dict[str, str]:
    """This process's environment as it was exec'ed (/proc/self/environ), before anything changed it."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
