"""``traceviz breakdown``: every HTA-style analysis over a set of ranks (traces, parsed
tables or folders of either): tables as CSV and parquet, and their figures.

Each rank is loaded and selected on its own; a rank that fails to load is reported and
skipped (the others still finish).
"""
from __future__ import annotations

import os

from ..analysis.activities import Options, RankActivities, activities
from ..analysis.breakdown import COLUMNS, OPTIONAL_COLUMNS, Params, breakdown_tables
from ..analysis.diagnose.waits import (
    SPLIT_COLUMNS,
    CommRows,
    attach,
    comm_rows,
    job_split,
)
from ..errors import TraceVizError
from ..ingest.tables import input_files, rank_tables
from ..render.breakdown_figures import breakdown_figures
from .result import Result

_COLUMNS = tuple(dict.fromkeys(COLUMNS + SPLIT_COLUMNS))


def run(paths: list[str | os.PathLike], options: Options = Options(), *,
        ranks: tuple[int, ...] | None = None, params: Params = Params()) -> Result:
    """Load, select and analyse every rank of ``paths``."""
    selected: list[RankActivities] = []
    failed: list[str] = []
    comm: dict[int, CommRows] = {}
    for rank, _, table in rank_tables(input_files(paths), _COLUMNS, failed,
                                      OPTIONAL_COLUMNS + SPLIT_COLUMNS):
        acts = activities(table, options, rank=rank)
        comm[acts.rank] = comm_rows(table)
        del table  # the activities hold only the buffers they read, not the whole table
        if ranks is None or acts.rank in ranks:
            selected.append(acts)
    if not selected:
        raise TraceVizError("no rank could be analysed" + (
            ": " + "; ".join(failed) if failed else " (check --ranks)"))
    selected.sort(key=lambda a: a.rank)
    if len(comm) > 1:  # wait / transfer: every member of a call on synced clocks
        split, _ = job_split(comm)
        for acts in selected:
            attach(acts, *split[acts.rank])
    del comm
    tables = breakdown_tables(selected, params, options.hta_compat)
    notes: list[str] = []
    return Result(tables=tables, figures=breakdown_figures(tables, notes),
                  lines=summary_lines(tables), notes=notes,
                  data={"ranks": [a.rank for a in selected]}, failed=failed)


def summary_lines(tables: dict) -> list[str]:
    """Per rank the shares of the span and the overlap."""
    lines = []
    for r in tables["temporal_breakdown"].to_pylist():
        if r["iteration"] is not None:  # the whole-trace rows only
            continue
        overlap = r["overlap_pct"]
        span = r["kernel_time_ns"]
        split = ""
        if r["comm_ns"] and r["comm_wait_ns"] is not None and span:
            split = (f" (communication {100 * r['comm_ns'] / span:.2f} %: moving data "
                     f"{100 * r['comm_transfer_ns'] / span:.2f} %, waiting for their peers "
                     f"{100 * r['comm_wait_ns'] / span:.2f} %)")
        lines.append(
            f"rank {r['rank']}: span {span / 1e6:.3f} ms; compute "
            f"{r['compute_pct']:.2f} %, non-compute {r['non_compute_pct']:.2f} %{split}, "
            f"idle {r['idle_pct']:.2f} %; comm-comp overlap "
            + ("n/a (no communication)" if overlap is None or overlap != overlap
               else f"{overlap:.2f} %"))
    return lines
