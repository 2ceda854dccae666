"""``traceviz breakdown``: every HTA-style analysis over a set of ranks (traces, parsed
tables or folders of either): tables as CSV and parquet, and their figures.

Each rank is loaded and selected on its own; a rank that fails to load is reported and
skipped (the others still finish).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..analysis.activities import Options
from ..analysis.breakdown import Params
from ..job import products
from ..ingest.topology import job_layout
from ..render.breakdown_figures import breakdown_figures
from ..render.rank_spread import LISTED, spread_lines
from ..table.result import Result


def run(paths: list[str | os.PathLike], options: Options = Options(), *,
        ranks: tuple[int, ...] | None = None, params: Params = Params()) -> Result:
    """The breakdown of every rank of ``paths`` (or of ``ranks``) as files: its tables,
    their figures and the console summary."""
    failed: list[str] = []
    result = products.breakdown(paths, options, ranks, params, failed)
    tables = result.tables()
    notes: list[str] = []
    return Result(tables=tables, figures=breakdown_figures(tables, notes),
                  lines=summary_lines(tables, _stages(paths) if len(result.ranks) > LISTED
                                      else None), notes=notes, failed=failed)


def _share(r: dict, key: str) -> float | None:
    """``r[key]`` as a percent of the rank's span (None when unknown)."""
    span, v = r["kernel_time_ns"], r[key]
    return None if v is None or not span or v != v else 100 * v / span


def _stages(paths: list[str | os.PathLike]) -> dict[int, str] | None:
    """Rank -> pipeline stage of the one job folder ``paths`` name, when its layout is
    known (what a rank's numbers are compared with in the summary)."""
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        return None
    layout, _ = job_layout(Path(paths[0]), Path(paths[0]), None)
    if layout is None or layout.pp <= 1:
        return None
    return {r: str(stage) for r, stage in layout.pp_stages().items()}


def summary_lines(tables: dict, stages: dict[int, str] | None = None) -> list[str]:
    """Per rank the shares of the span and the overlap; beyond
    :data:`~traceviz.render.rank_spread.LISTED` ranks their summary, each rank compared
    with its pipeline stage's (``stages``: rank -> stage) when known (every rank in
    temporal_breakdown.csv)."""
    rows = [r for r in tables["temporal_breakdown"].to_pylist()
            if r["iteration"] is None]  # the whole-trace rows only
    if len(rows) > LISTED:
        ranks = [r["rank"] for r in rows]
        lines = [f"{len(rows)} ranks, summarized (every rank: temporal_breakdown.csv):"]
        for label, values, fmt, atol in (
                ("span", [r["kernel_time_ns"] / 1e6 for r in rows], _ms, 0.0),
                ("compute", [r["compute_pct"] for r in rows], _pct, 1.0),
                ("communication", [_share(r, "comm_ns") for r in rows], _pct, 1.0),
                ("communication: moving data",
                 [_share(r, "comm_transfer_ns") for r in rows], _pct, 1.0),
                ("communication: waiting for their peers",
                 [_share(r, "comm_wait_ns") for r in rows], _pct, 1.0),
                ("idle", [r["idle_pct"] for r in rows], _pct, 1.0),
                ("comm-comp overlap", [r["overlap_pct"] for r in rows], _pct, 1.0)):
            lines += ["  " + line for line in
                      spread_lines(label, ranks, values, fmt, stages, atol=atol)]
        return lines
    lines = []
    for r in rows:
        overlap = r["overlap_pct"]
        split = ""
        if r["comm_ns"] and r["comm_wait_ns"] is not None and r["kernel_time_ns"]:
            split = (f" (communication {_share(r, 'comm_ns'):.2f} %: moving data "
                     f"{_share(r, 'comm_transfer_ns'):.2f} %, waiting for their peers "
                     f"{_share(r, 'comm_wait_ns'):.2f} %)")
        lines.append(
            f"rank {r['rank']}: span {_ms(r['kernel_time_ns'] / 1e6)}; compute "
            f"{_pct(r['compute_pct'])}, non-compute {_pct(r['non_compute_pct'])}{split}, "
            f"idle {_pct(r['idle_pct'])}; comm-comp overlap "
            + ("n/a (no communication)" if overlap is None or overlap != overlap
               else _pct(overlap)))
    return lines


def _pct(v: float) -> str:
    return f"{v:.2f} %"


def _ms(v: float) -> str:
    return f"{v:.3f} ms"
