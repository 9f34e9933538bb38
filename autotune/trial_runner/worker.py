"""The per-rank program: ``python -m autotune.trial_runner.worker TRIAL_DIR`` (started by a launcher).

Parse, build, train, finish — then leave with ``os._exit`` rather than wait on interpreter teardown
(gloo and DataLoader teardown were seen to hang). Any error is written to errors/rank<N>.json first.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

from autotune.trial_runner._rank import (
    die_with_parents,
    kill_own_children,
    redirect_output,
    write_error,
    write_pid,
)


def main(argv: list[str]) -> None:
    trial_dir = Path(argv[1])
    rank = int(os.environ.get("RANK", "0"))
    log = redirect_output(trial_dir, rank)
    faulthandler.enable(file=log, all_threads=True)
    write_pid(trial_dir, rank)
    code = 1
    try:
        from autotune.trial_runner._plan import TrialPlan
        from autotune.trial_runner._training import RankContext, Trainer, reset_peak_rss

        plan = TrialPlan.read(trial_dir)
        die_with_parents(plan.tuner_pid)
        reset_peak_rss()
        trainer = Trainer(plan, RankContext.from_env(trial_dir))
        trainer.init_distributed()
        trainer.build()
        trainer.finish(trainer.train())
        code = 0
    except BaseException as error:
        write_error(trial_dir, rank, error)
    finally:
        kill_own_children()
        if code == 0:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
