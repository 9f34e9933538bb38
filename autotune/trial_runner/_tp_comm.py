"""The tensor-parallel collectives' exposed time inside a rank (step anatomy's ``tp_comm_exposed_s``).

Under the usual plan (colwise then rowwise) a step's tensor-parallel communication is two all-reduces a pair:
a rowwise module's output in the forward (its partial sums made whole: DTensor's output hook), and a colwise
module's input gradient in the backward (the partial gradients of a replicated input). Neither can overlap the
computation that needs its result, so each is timed where it happens:

- forward: from the rowwise module's own forward's end (a forward hook placed before DTensor's) to the end of
  DTensor's output hook, the all-reduce waited for there (it is the next operation's first need anyway);
- backward: from the moment the gradient of the colwise module's DTensor input is ready to the moment the
  local input's gradient is (a tensor hook on each side of DTensor's input conversion), the all-reduce waited
  for there.

Each reading is two ``time.perf_counter()`` calls; on CUDA the laps are device events like the step's others.
A module is told colwise or rowwise by its weight's placement (``Shard(0)``: colwise, ``Shard(1)``: rowwise),
so a plan applied by the workload's own hook is measured too.
"""

from __future__ import annotations

from typing import Any

import torch

from autotune.trial_runner._anatomy import TP_COMM, StepLaps


def _wait(value: Any) -> None:
    """Wait for ``value``'s pending functional collective, if it has one (a tensor with ``trigger_wait``: the
    wrapper stays, and with it the autograd graph)."""
    trigger = getattr(value, "trigger_wait", None)
    if callable(trigger) and isinstance(value, torch.Tensor):
        trigger()


def _style(module: torch.nn.Module) -> str | None:
    """colwise or rowwise: how the module's weight is split over the mesh's ``tp`` axis (under FSDP2 x TP the
    weight's mesh is (dp, tp), its placement on tp the one that counts); None when it is not split over tp."""
    from torch.distributed.tensor import DTensor, Shard

    weight = getattr(module, "weight", None)
    names = weight.device_mesh.mesh_dim_names or () if isinstance(weight, DTensor) else ()
    if not isinstance(weight, DTensor) or "tp" not in names:
        return None
    placement = weight.placements[names.index("tp")]
    if type(placement) is Shard:
        return "colwise" if placement.dim == 0 else "rowwise" if placement.dim == 1 else None
    return None


def watch_tp_comm(model: torch.nn.Module, laps: StepLaps) -> int:
    """Time the tensor-parallel collectives of every colwise and rowwise module of ``model`` into ``laps``;
    returns how many modules are watched."""
    watched = 0
    for module in model.modules():
        style = _style(module)
        if style == "rowwise":
            _watch_rowwise(module, laps)
        elif style == "colwise":
            _watch_colwise(module, laps)
        else:
            continue
        watched += 1
    return watched


def _watch_rowwise(module: torch.nn.Module, laps: StepLaps) -> None:
    marks: list[Any] = []

    def computed(_module: Any, _inputs: Any, output: Any) -> None:
        marks.append(laps.mark())

    def reduced(_module: Any, _inputs: Any, output: Any) -> None:
        _wait(output)
        if marks:
            laps.lap(TP_COMM, marks.pop())

    module.register_forward_hook(computed, prepend=True)
    module.register_forward_hook(reduced)


def _watch_colwise(module: torch.nn.Module, laps: StepLaps) -> None:
    marks: list[Any] = []

    def local_input(_module: Any, args: Any) -> Any:  # before DTensor's input hook
        if not args or not isinstance(args[0], torch.Tensor) or not args[0].requires_grad:
            return None
        x = args[0].view_as(args[0])  # a node of this module's own, whose gradient is the all-reduced one

        def reduced(grad: torch.Tensor) -> None:
            _wait(grad)
            if marks:
                laps.lap(TP_COMM, marks.pop())
                marks.clear()

        x.register_hook(reduced)
        return (x, *args[1:])

    def distributed_input(_module: Any, args: Any) -> None:  # after it: the DTensor input
        from torch.distributed.tensor import DTensor

        if args and isinstance(args[0], DTensor) and args[0].requires_grad:
            args[0].register_hook(lambda grad: marks.append(laps.mark()))

    module.register_forward_pre_hook(local_input, prepend=True)
    module.register_forward_pre_hook(distributed_input)
