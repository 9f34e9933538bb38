"""The per-rank program: ``python -m autotune.trial_runner.worker TRIAL_DIR`` (started by a launcher).

Parse, build, train, finish — then leave with ``os._exit`` rather than wait on interpreter teardown
(gloo and DataLoader teardown were seen to hang). Any error is written to errors/rank<N>.json first.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import sys
import time
from pathlib import Path

from autotune.compat import torch_private
from autotune.trial_runner._rank import (
    die_with_parents,
    kill_own_children,
    make_scratch,
    redirect_output,
    write_error,
    write_pid,
)
from autotune.trial_runner._trace import trace_event, traced


def main(argv: list[str]) -> None:
    started = time.time()
    trial_dir = Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))
    trace_event("rank_start", started, rank=rank, trial_dir=str(trial_dir))
    log = redirect_output(trial_dir, rank)
    faulthandler.enable(file=log, all_threads=True)
    write_pid(trial_dir, rank)
    make_scratch(trial_dir, rank)
    code = 1
    try:
        from autotune.trial_runner._memory import reset_peak_rss
        from autotune.trial_runner._plan import TrialPlan
        from autotune.trial_runner._training import RankContext, Trainer

        plan = TrialPlan.read(trial_dir)
        die_with_parents(plan.tuner_pid)
        reset_peak_rss()
        trainer = Trainer(plan, RankContext.from_env(trial_dir))
        with traced("rank_init_distributed", rank=rank, trial_dir=str(trial_dir)):
            trainer.init_distributed()
        with traced("rank_build", rank=rank, trial_dir=str(trial_dir)):
            trainer.build()
        # Start-up's objects (torch's modules, the model, the data) leave the garbage collector's scans: the
        # first full collection of a rank otherwise walks them all, a 0.3-0.6 s stall that fell in the first
        # measured window of a 50-step quickstart trial and read its throughput 5-8% low.
        gc.freeze()
        trainer.applied.gc_frozen = gc.get_freeze_count()
        trainer.finish(trainer.train())
        code = 0
    except BaseException as error:
        # From here on a DataLoader worker's death must not raise again (torch's SIGCHLD handler would, from
        # inside write_error, and the rank's error record would be lost).
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        write_error(trial_dir, rank, _dataloader_worker_failure(error) or error)
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # killing our workers below is no error
        kill_own_children()
        if code == 0:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _dataloader_worker_failure(error: BaseException) -> BaseException | None:
    """torch's error for a DataLoader worker of this rank that died, if one did: the cause of what the rank
    then hit. A reset connection or an EOF while receiving a batch can come a moment before the dead worker
    is seen, so those wait up to a second for it."""
    if "torch" not in sys.modules:
        return None
    deadline = time.monotonic() + (1.0 if isinstance(error, (OSError, EOFError)) else 0.0)
    while True:
        try:
            failure = torch_private.dataloader_worker_failure()
        except Exception:
            return None
        if failure is not None:
            return failure
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv)
