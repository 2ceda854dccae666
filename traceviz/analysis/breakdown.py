"""``traceviz breakdown``: every HTA-style analysis over a set of ranks, written as CSV
and parquet tables plus figures.

Inputs are trace files, parsed tables (``.parquet``) or folders holding either; each
rank is loaded and selected on its own, and a rank that fails to load is reported and
skipped (the others still finish).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ..errors import TraceVizError
from ..output import write_csv_and_parquet
from .idle import idle_breakdown
from .kernels import top_kernels
from .launch import launch_stats_summary
from .queue import memory_bw_summary, queue_length_summary
from .inputs import input_files, rank_tables
from .select import COLUMNS, OPTIONAL_COLUMNS, Activities, Options, select
from .temporal import kernel_type_breakdown, sweep, temporal_breakdown


@dataclass
class Result:
    """The analyses' tables by name, the ranks analysed and the inputs that failed."""

    tables: dict[str, pa.Table]
    ranks: list[Activities]
    failed: list[str] = field(default_factory=list)


def run(paths: list[str | os.PathLike], options: Options = Options(), *,
        ranks: tuple[int, ...] | None = None, kernel_wait_ns: int = 30_000,
        runtime_cutoff_ns: int = 50_000, launch_delay_cutoff_ns: int = 100_000,
        num_kernels: int = 10, duration_ratio: float = 0.8) -> Result:
    """Load, select and analyse every rank of ``paths``."""
    selected: list[Activities] = []
    failed: list[str] = []
    for _, _, table in rank_tables(input_files(paths), COLUMNS, failed, OPTIONAL_COLUMNS):
        acts = select(table, options)
        if ranks is None or acts.rank in ranks:
            selected.append(acts)
    if not selected:
        raise TraceVizError("no rank could be analysed" + (
            ": " + "; ".join(failed) if failed else " (check --ranks)"))
    selected.sort(key=lambda a: a.rank)
    sweeps = [sweep(a) for a in selected]  # one sweep per rank feeds both tables
    tables = {
        "temporal_breakdown": temporal_breakdown(sweeps),
        "kernel_type_breakdown": kernel_type_breakdown(sweeps),
        "top_kernels": top_kernels(selected, num_kernels, duration_ratio, options.hta_compat),
        "idle_time_breakdown": idle_breakdown(selected, kernel_wait_ns),
        "launch_stats": launch_stats_summary(selected, runtime_cutoff_ns,
                                             launch_delay_cutoff_ns),
        "queue_length_summary": queue_length_summary(selected),
        "memory_bw_summary": memory_bw_summary(selected, options.hta_compat),
    }
    return Result(tables, selected, failed)


def write(result: Result, outdir: str | os.PathLike) -> list[Path]:
    """Each table as ``<name>.csv`` and ``<name>.parquet``, and the figures."""
    from ..render.breakdown_figures import draw_all

    outdir = Path(outdir)
    written = []
    for name, table in result.tables.items():
        written += write_csv_and_parquet(table, outdir, name)
    return written + draw_all(result.tables, outdir)


def summary(result: Result) -> str:
    """A few lines: per rank the shares of the span, and the overlap."""
    lines = []
    for r in result.tables["temporal_breakdown"].to_pylist():
        if r["iteration"] != -1:
            continue
        overlap = r["overlap_pct"]
        lines.append(
            f"rank {r['rank']}: span {r['kernel_time_ns'] / 1e6:.3f} ms; compute "
            f"{r['compute_pct']:.2f} %, non-compute {r['non_compute_pct']:.2f} %, idle "
            f"{r['idle_pct']:.2f} %; comm-comp overlap "
            + ("n/a (no communication)" if overlap is None or overlap != overlap
               else f"{overlap:.2f} %"))
    for msg in result.failed:
        lines.append(f"skipped: {msg}")
    return "\n".join(lines)
