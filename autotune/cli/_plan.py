"""`autotune plan`: the study's best configurations predicted at another scale, with their intervals."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.errors import UsageError
from autotune.objectives import ScalePlan, study_scale_plan
from autotune.scale import SyncGrowth
from autotune.tuner import read_study
from autotune.workload_check import load_spec


def load_plan(
    study_file: str, nodes: int, ranks_per_node: int, storage: str | None = None, top: int = 3,
    sync_growth: str | None = None,
) -> tuple[str, ScalePlan]:
    growth = parse_sync_growth(sync_growth) if sync_growth is not None else None
    overrides = [f"storage={storage}"] if storage else []
    spec = load_spec(study_file, overrides=overrides, check_workload=False)
    study = read_study(spec)  # reading a stored study imports no workload
    return spec.name, study_scale_plan(study, spec, nodes=nodes, ranks_per_node=ranks_per_node, top=top,
                                       growth=growth)


def parse_sync_growth(text: str) -> SyncGrowth:
    """``--sync-growth STEP,PER_DOUBLING`` as a profile; a :class:`UsageError` (exit 2) naming the option."""
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise ValueError("two numbers")
        return SyncGrowth(float(parts[0]), float(parts[1]))
    except ValueError as e:
        detail = "" if str(e) == "two numbers" or "could not convert" in str(e) else f" ({e})"
        raise UsageError(
            f"--sync-growth {text!r}: give two numbers STEP,PER_DOUBLING, e.g. --sync-growth 0.82,0.15 "
            f"(the sync across N > 2 nodes is STEP + PER_DOUBLING x log2(N/2) times the 2-node sync){detail}"
        ) from None


def print_plan(console: Console, name: str, plan: ScalePlan) -> None:
    by = "goodput" if plan.noise_scale is not None else "throughput"
    console.print(
        f"[bold]{escape(name)}[/] at {plan.nodes} node(s) x {plan.ranks_per_node} rank(s) per node "
        f"({plan.ranks} ranks), best by predicted {by} (90% intervals)",
        highlight=False,
        soft_wrap=True,
    )
    table = Table(box=None, header_style="dim")
    for column in ("#", "samples/s", "interval", "batch_size", "grad_accum", "global batch"):
        table.add_column(column, no_wrap=True, justify="right" if column != "#" else "left")
    if plan.noise_scale is not None:
        table.add_column("efficiency", justify="right")
        table.add_column("goodput", justify="right")
    table.add_column("configuration", min_width=24)
    for i, option in enumerate(plan.options, 1):
        p = option.plan
        row = [
            str(i),
            f"{p.throughput.value:,.0f}",
            f"{p.throughput.low:,.0f}-{p.throughput.high:,.0f}",
            str(p.batch_size),
            str(p.grad_accum),
            str(p.global_batch),
        ]
        if plan.noise_scale is not None and p.goodput is not None:
            row += [f"{p.efficiency:.2f}", f"{p.goodput.value:,.0f} ({p.goodput.low:,.0f}-{p.goodput.high:,.0f})"]
        row.append(escape(option.config.short()) + (" [dim](pooled fit)[/]" if option.pooled else ""))
        table.add_row(*row)
    console.print(table, crop=False)
    if plan.noise_scale is not None:
        console.print(f"gradient noise scale {plan.noise_scale:,.0f} samples (the trials' median)", highlight=False)
    reaches = sorted({o.reach.describe() for o in plan.options})
    for text in reaches:
        console.print(f"reach: {escape(text)}", highlight=False, soft_wrap=True)
    for text in sorted({a for o in plan.options for a in o.assumptions}):
        console.print(f"[yellow]assumes[/] {escape(text)}", highlight=False, soft_wrap=True)
    if plan.skipped:
        console.print(
            f"[dim]{len(plan.skipped)} configuration famil{'y' if len(plan.skipped) == 1 else 'ies'} "
            "had too few scales to fit on their own[/]",
            highlight=False,
        )


def plan_payload(name: str, plan: ScalePlan) -> dict[str, Any]:
    """The plan as plain data (``--json``)."""

    def interval(i: Any) -> dict[str, float] | None:
        return None if i is None else {"value": i.value, "low": i.low, "high": i.high}

    return {
        "study": name,
        "nodes": plan.nodes,
        "ranks_per_node": plan.ranks_per_node,
        "gradient_noise_scale": plan.noise_scale,
        "options": [
            {
                "batch_size": o.plan.batch_size,
                "grad_accum": o.plan.grad_accum,
                "global_batch": o.plan.global_batch,
                "throughput_samples_s": interval(o.plan.throughput),
                "efficiency": o.plan.efficiency,
                "goodput_samples_s": interval(o.plan.goodput),
                "config": o.config.knobs(),
                "lr": o.config.lr,
                "reach": o.reach.describe(),
                "inside_measured_scales": o.reach.inside,
                "readings": o.readings,
                "assumptions": list(o.assumptions),
                "pooled": o.pooled,
            }
            for o in plan.options
        ],
    }
