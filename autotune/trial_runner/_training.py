"""What each rank does: build the workload, apply every knob, train and measure.

Runs inside a rank started by a launcher (torchrun). The loop reads like a training script: a step, the
heartbeat, and at a window's end :meth:`WindowMeter.window_end` (the window accounting: _meter.py). Rank 0
appends a window record per measured window to metrics.jsonl and writes applied.json as it learns what it
applied and done.json at the end (records: _records.py); every rank touches the heartbeat file after each
step. Errors are written by the caller (worker.py) to errors/rank<N>.json. Building the model is _build.py,
the data _data.py, the knobs _apply.py.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autotune.compat import torch_private
from autotune.spec import split_hyperparameters
from autotune.trial_runner._anatomy import DATA, FORWARD_BACKWARD, OPTIMIZER, StepLaps, timing_hook
from autotune.trial_runner._apply import start_rank
from autotune.trial_runner._build import (
    RankContext,
    gather_rank_facts,
    init_distributed,
    rank_device,
    watch_autocast,
    wrap_model,
)
from autotune.trial_runner._data import batch_len, eval_loader, loader_facts, to_device, train_data
from autotune.trial_runner._mesh import average_gradients
from autotune.trial_runner._meter import MEMORY_EVERY_S, WindowMeter
from autotune.trial_runner._noise import NoiseMeter, noise_source
from autotune.trial_runner._pace import Gate
from autotune.trial_runner._plan import APPLIED_FILE, DONE_FILE, HEARTBEAT_FILE, TrialPlan
from autotune.trial_runner._records import DoneRecord, write_record
from autotune.trial_runner._tp_comm import watch_tp_comm
from autotune.trial_runner._trace import trace_event
from autotune.workload import load_workload

__all__ = ["MEMORY_EVERY_S", "RankContext", "Trainer"]


class Trainer:
    """Builds one rank's training from a TrialPlan and runs it."""

    def __init__(self, plan: TrialPlan, ctx: RankContext) -> None:
        self.plan, self.ctx, self.config = plan, ctx, plan.config
        self.device = rank_device(self.config, ctx)
        self.applied = start_rank(self.config, ctx.local_world_size, self.device.type)
        self.threads = torch.get_num_threads()  # as start_rank set them
        self.compile_s: float | None = None
        self._first_step_s = 0.0
        self.heartbeat = ctx.trial_dir / HEARTBEAT_FILE

    # -- set-up ------------------------------------------------------------------------------------------
    def init_distributed(self) -> None:
        init_distributed(self.device, self.plan.startup_timeout_s)

    def build(self) -> None:
        plan, cfg, ctx = self.plan, self.config, self.ctx
        self.workload = load_workload(plan.entrypoint, plan.args, Path(plan.base_dir), cfg.hyperparameters)
        torch.manual_seed(plan.seed)
        wrapped = wrap_model(self.workload, cfg, ctx, self.device, self.applied)
        self.model: Any = wrapped.model  # DDP, an FSDP2 module, the bare model, or this rank's part of the mesh
        self.ddp, self.fsdp = wrapped.ddp, wrapped.fsdp
        self.mesh, self.pipeline, self.replicate = wrapped.mesh, wrapped.pipeline, wrapped.replicate
        synced = self.ddp is not None or self.replicate
        self.laps = StepLaps(self.device, sync=None if self.fsdp else synced, on=plan.step_anatomy,
                             pipeline=self.pipeline.timer if self.pipeline is not None else None,
                             tp=self.mesh is not None and self.mesh.tp > 1)
        if self.mesh is not None and self.mesh.tp > 1:
            watch_tp_comm(wrapped.module, self.laps)
        source, _ = noise_source(cfg)  # the gradient noise scale's two batch sizes (_noise.py), or None
        self.noise = NoiseMeter(cfg, source, self.device, ctx.rank) if source is not None else None
        if self.noise is not None and source == "grad_accum":
            self.noise.watch_parameters(wrapped.module)
        if self.ddp is not None and (plan.step_anatomy or plan.trace or self.noise is not None):
            self.ddp.register_comm_hook(None, timing_hook(self.laps, self.noise))  # counts the all-reduces, too
        self.applied.ranks = gather_rank_facts(wrapped.module, cfg, ctx, self.ddp is not None, self.mesh)
        self.write_applied()  # threads and sharding known now, before a first step that may never finish
        _, _, optimizer_kwargs = split_hyperparameters(cfg.hyperparameters)
        self._parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = self.workload.optimizer(self.model.parameters(), cfg.lr, **optimizer_kwargs)
        self.applied.optimizer_lr = [g["lr"] for g in self.optimizer.param_groups]
        if optimizer_kwargs:  # what the optimizer holds, as its param groups say
            group = self.optimizer.param_groups[0]
            self.applied.optimizer_kwargs = {k: group.get(k) for k in optimizer_kwargs}
        self.scaler = torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None
        self.applied.grad_scaler = self.scaler is not None
        # the ranks of one dp coordinate (a tensor- and pipeline-parallel group) read the same batches
        self.dp_rank, self.dp_size = (self.mesh.coords["dp"], self.mesh.dp) if self.mesh else (ctx.rank, ctx.world_size)
        self.data = train_data(
            self.workload.dataset(), cfg, self.dp_rank, self.dp_size, plan.seed, self.workload.collate_fn
        )
        self.applied.dataloader = loader_facts(self.data)
        watched = self.pipeline.modules[0] if self.pipeline is not None else wrapped.module
        watch_autocast(watched, self.device.type, self.applied)

    # -- training -----------------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        amp = self.config.amp
        if amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def step(self, batches: Iterator[Any]) -> torch.Tensor:
        """One optimizer step: grad_accum micro-batches, all-reduce only on the last one; its parts timed."""
        cfg, laps = self.config, self.laps
        non_blocking = cfg.pin_memory and self.device.type == "cuda"
        total = torch.zeros((), device=self.device)
        for micro in range(cfg.grad_accum):
            start = laps.mark()
            batch = to_device(next(batches), self.device, non_blocking)
            start = laps.lap(DATA, start)
            last = micro == cfg.grad_accum - 1
            sync = contextlib.nullcontext() if (self.ddp is None or last) else self.ddp.no_sync()
            if self.fsdp and cfg.grad_accum > 1 and self.pipeline is None:
                self.model.set_requires_gradient_sync(last)  # FSDP2's no_sync: reduce-scatter on the last only
            with sync:
                loss = self._backward(batch)
            start = laps.lap(FORWARD_BACKWARD, start)
            if loss is not None:
                total += loss.detach().float()
        if self.ddp is not None:
            laps.backward_done(start)
        if self.replicate and self.mesh is not None:  # the mesh's dp axis under ddp: gradients averaged here, exposed
            average_gradients(self._parameters, self.mesh)
            start = laps.lap_sync(start)
        if self.noise is not None:  # the step's gradients are complete: their norms (before the optimizer)
            self.noise.end_step(self._parameters, self.scaler.get_scale() if self.scaler is not None else None)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        laps.lap(OPTIMIZER, start)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return total / cfg.grad_accum

    def _backward(self, batch: Any) -> torch.Tensor | None:
        """Forward and backward of one micro-step: its loss (None on a pipeline stage that holds none)."""
        if self.pipeline is not None:
            with self.autocast():
                return self.pipeline.micro_step(batch)
        loss = self._loss(batch)
        scaled = loss.float() / self.config.grad_accum
        if self.scaler is not None:
            self.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        return loss

    def _loss(self, batch: Any) -> torch.Tensor:
        with self.autocast():
            loss = self.workload.loss(self.model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            from autotune.workload_check import describe_bad_loss

            raise TypeError(describe_bad_loss(loss))
        return loss

    def train(self) -> DoneRecord:
        """Step until the trial's steps are done, the loss diverged, or a paced run is told to finish."""
        plan, ctx = self.plan, self.ctx
        meter = WindowMeter(plan, ctx.trial_dir, ctx.rank, ctx.world_size, self.device, self.laps, self.noise,
                            holds_loss=self.pipeline is None or self.pipeline.is_last)
        # A paced run (a confirmation race) trains in blocks of pace_steps after its warm-up, each one released
        # by the tuner through the gate and followed by a stop there, until the tuner ends it.
        gate = Gate(ctx.trial_dir, ctx.rank) if plan.pace_steps else None
        data = self.data.batches()
        outcome, reason = "complete", f"{meter.max_steps} steps"
        started_at = time.time()
        if ctx.rank == 0:
            trace_event("training_start", started_at, trial_dir=str(ctx.trial_dir))
        step_started = time.perf_counter()
        while meter.step < meter.max_steps:
            step = meter.count(self.step(data))
            os.utime(self.heartbeat)
            meter.log_step_end()
            if self.config.compile != "off" and step <= 2:
                step_started = self._time_compile(step, step_started, step == meter.max_steps)
            if step == 1:
                self._first_step(meter)
            if not meter.at_boundary():
                continue
            end = meter.window_end()
            if end.diverged:
                outcome, reason = "diverged", f"loss became NaN/inf by step {step}"
                break
            if end.measure_start:  # what the warm-up built (a compiled graph, DDP's buckets, the optimizer's
                gc.freeze()  # state) leaves the collector's scans too, as start-up's did (worker.py)
                self.applied.gc_frozen = gc.get_freeze_count()
            if end.warmup_ended:
                self.applied.warmup = meter.warmup.record()
                self.write_applied()
            if gate is not None and (end.measured or end.measure_start):
                if not gate.wait(gate.blocks + 1 if end.measured else 0):  # the warm-up's end, then each block's
                    reason = f"paced: {gate.blocks} block(s)"
                    break  # the race is over: evaluate and finish as a trial does
                meter.restart_clock()  # the stop at the gate is no part of the next block
        return self._done(meter, outcome, reason, started_at)

    def _first_step(self, meter: WindowMeter) -> None:
        plan = self.plan
        meter.first_step_s = time.time() - plan.launched_at if plan.launched_at else None
        # Start-up is over: from now on a collective that takes long is a hang, not a slow start.
        torch_private.set_process_group_timeout(datetime.timedelta(seconds=plan.step_timeout_s))
        if plan.trace and self.ddp is not None:
            self.applied.allreduce_calls_first_step = self.laps.allreduce_calls
        self.write_applied()

    def _done(self, meter: WindowMeter, outcome: str, reason: str, started_at: float) -> DoneRecord:
        """The run's summary (done.json), after the loop: the warm-up's record, the trace, the evaluation."""
        ctx = self.ctx
        meter.close()
        if self.applied.warmup is None:
            self.applied.warmup = meter.warmup.record()
        if meter.step_ends is not None:
            steps_log = {
                "step_end": meter.step_ends,
                "memory_read_step": [float(at) for at, _ in meter.reads or []],
                "memory_read_s": [took for _, took in meter.reads or []],
            }
            (ctx.trial_dir / f"steps.rank{ctx.rank}.json").write_text(json.dumps(steps_log, indent=2))
        if self.plan.trace and self.ddp is not None:
            self.applied.allreduce_calls_total = self.laps.allreduce_calls
            self.applied.steps = meter.step
        done = DoneRecord(
            outcome=outcome,
            reason=reason,
            steps=meter.step,
            samples=meter.step * self.config.global_batch,
            training_s=meter.measured_s,
            loss=meter.last_loss,
            peak_memory_mb=meter.peak,
            time_to_first_step_s=meter.first_step_s,
            compile_s=self.compile_s,
            threads_per_rank=self.threads,
            training_span_s=time.time() - started_at,
        )
        if ctx.rank == 0:
            trace_event("training", started_at, time.time(), trial_dir=str(ctx.trial_dir))
        # after the span: not training; skipped where the study does not use it (trial.evaluate)
        done.eval_loss = self.evaluate() if outcome == "complete" and self.plan.evaluate else None
        return done

    def evaluate(self) -> float | None:
        """The held-out loss at the trial's end, when the workload has an ``eval_dataset``.

        Every rank evaluates its share (:func:`eval_loader`: a map-style set's DistributedSampler in order, which
        repeats a few samples so that the shares are equal; a stream's share, every sample once), without
        gradients, under the trial's autocast; the result is the mean loss over all ranks' samples (each batch's
        loss weighted by its size). Under the mesh the shares are the dp replicas'; a pipeline evaluates through
        its schedule's forward, its last stage's ranks holding the loss.
        """
        workload, cfg = self.workload, self.config
        if workload.eval_dataset is None:
            return None
        loader = eval_loader(workload.eval_dataset(), cfg.batch_size, self.dp_rank, self.dp_size, workload.collate_fn)
        if loader is None:
            return None
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss * samples, samples
        self.model.eval()
        try:
            with torch.no_grad():
                for batch in loader:
                    if self.pipeline is not None and batch_len(batch) != cfg.batch_size:
                        continue  # the pipeline's micro-batches keep their training shape: a short batch is left out
                    batch = to_device(batch, self.device, False)
                    with self.autocast():
                        if self.pipeline is not None:  # forward only; the loss on the last stage (else None)
                            loss = self.pipeline.micro_step(batch, train=False)
                        else:
                            loss = workload.loss(self.model, batch)
                    os.utime(self.heartbeat)
                    if loss is not None:
                        n = batch_len(batch)
                        totals[0] += loss.detach().double() * n
                        totals[1] += n
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
            self.applied.compile_s = round(self.compile_s, 4)
            self.write_applied()
        return time.perf_counter()

    def write_applied(self) -> None:
        """Rank 0 records what it applied (DataLoader, DDP, autocast, checkpointing, lr) in applied.json."""
        if self.ctx.rank == 0:
            write_record(self.ctx.trial_dir / APPLIED_FILE, self.applied)

    def finish(self, done: DoneRecord) -> None:
        """Rank 0 writes applied.json and then done.json, the sign of a finished run."""
        if self.ctx.rank == 0:
            self.write_applied()
            write_record(self.ctx.trial_dir / DONE_FILE, done)
