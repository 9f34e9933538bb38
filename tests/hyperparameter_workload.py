"""A held-out workload whose build() takes arguments of its own, for the hyperparameter tests.

``build(width, dropout, activation, record)`` builds a one-hidden-layer net of that width, dropout and
activation, trained with SGD whose ``momentum``/``nesterov`` are the optimizer factory's keyword
arguments. It refuses values it does not know (an unknown activation, a width below 1), and with
``record`` (a folder) every call of build(), of the model factory and of the optimizer factory appends a
JSON line saying what it received and what it built: the tests compare those lines, written inside the
trial's ranks, with what the study recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

import autotune

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


class Net(nn.Module):
    def __init__(self, width: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.hidden = nn.Linear(8, width)
        self.act = ACTIVATIONS[activation]()
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(self.act(self.hidden(x))))


class Points(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int, offset: int = 0) -> None:
        self.n, self.offset = n, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.offset + i)
        x = torch.randn(8, generator=g)
        return x, torch.sin(x[:2]).sum(0, keepdim=True)


def _record(folder: str, **fields: Any) -> None:
    if folder:
        line = {"pid": os.getpid(), "rank": os.environ.get("RANK"), **fields}
        with (Path(folder) / "calls.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")


def build(width: int, dropout: float = 0.0, activation: str = "relu", record: str = "") -> autotune.Workload:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    _record(record, call="build", width=width, dropout=dropout, activation=activation)

    def model() -> nn.Module:
        net = Net(width, dropout, activation)
        _record(record, call="model", width=net.hidden.out_features, dropout=net.drop.p,
                activation=type(net.act).__name__.lower())
        return net

    def optimizer(params: Any, lr: float, *, momentum: float = 0.0, nesterov: bool = False) -> Any:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0)
        group = opt.param_groups[0]
        _record(record, call="optimizer", lr=group["lr"], momentum=group["momentum"])
        return opt

    return autotune.Workload(
        model=model,
        dataset=lambda: Points(512),
        eval_dataset=lambda: Points(96, offset=10_000),
        loss=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]),
        optimizer=optimizer,
        base_lr=0.05,
        base_batch_size=16,
    )
