"""Run ``traceviz pipeline`` over a job: find its micro-batch table (aggregating first
when needed) and its PP groups, then write each group's view."""
from __future__ import annotations

import html
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import TraceVizError
from ..output import atomic_path, write_parquet
from .pipeline import pipeline_view


def _tables(root: Path, vpp: int, topology) -> list[Path]:
    from . import aggregate_job
    from .. import runner

    found = sorted(root.rglob("microbatches.parquet"))
    if not found:
        aggregate_job.run(root, figures=False, topology=topology, quiet=True, vpp=vpp)
        found = sorted(runner.output_root(root, None).rglob("microbatches.parquet"))
    if not found:
        raise TraceVizError(f"{root}: no micro-batches found (no forward / backward steps)")
    return found


def _html_table(table: pa.Table) -> str:
    rows = table.to_pylist()
    head = "".join(f"<th>{html.escape(k)}</th>" for k in table.column_names)
    body = "".join("<tr>" + "".join(
        f"<td>{v:.2f}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>"
        for v in r.values()) + "</tr>" for r in rows)
    return f"<h2>Per stage</h2><table><tr>{head}</tr>{body}</table>"


def run(root: Path, outdir: Path, vpp: int = 1, iteration: int | None = None,
        all_groups: bool = False, topology: str | os.PathLike | None = None) -> list[str]:
    """Write the views; returns the lines to print."""
    from ..render.pipeline_figure import draw, write_html
    from .aggregate_job import job_layout

    lines = []
    for path in _tables(root, vpp, topology):
        rows = pq.read_table(path).to_pylist()
        its = sorted({r["iteration"] for r in rows})
        it = iteration if iteration is not None else its[0]
        if it not in its:
            raise TraceVizError(f"{path.parent}: no ProfilerStep {it} (it has {its})")
        rows = [r for r in rows if r["iteration"] == it]
        layout, note = job_layout(root, path.parent, topology)
        if layout is None:
            raise TraceVizError(f"{path.parent}: {note}; pass --topology")
        have = {r["rank"] for r in rows}
        groups = [g for g in layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
                  if set(g) <= have]
        if not groups:
            raise TraceVizError(f"{path.parent}: no PP group has all its ranks")
        tables = []
        for i, group in enumerate(groups if all_groups else groups[:1]):
            view = pipeline_view(rows, group, vpp)
            tables.append(view.stages.append_column(
                "pp_group", pa.array([i] * view.stages.num_rows, pa.int32())))
            title = f"PP group {i} (ranks {group}), ProfilerStep {it}"
            panels = [("measured", view.measured)] + (
                [(f"ideal (median step times, P2P {view.p2p_ns / 1e3:.0f} µs)", view.ideal)]
                if view.ideal else [])
            stem = outdir / f"pipeline_group{i}_iter{it}"
            draw(panels, group, stem.with_suffix(".png"), title)
            write_html(panels, group, stem.with_suffix(".html"), title,
                       _html_table(view.stages))
            st = view.stages.to_pylist()
            crit = next(s for s in st if s["critical"])
            lines.append(f"{title}: makespan {st[0]['makespan_ns'] / 1e6:.2f} ms measured, "
                         f"{st[0]['ideal_makespan_ns'] / 1e6:.2f} ms ideal; critical stage "
                         f"{crit['stage']} (rank {crit['rank']})")
            for s in st:
                lines.append(f"  stage {s['stage']} rank {s['rank']}: bubble "
                             f"{s['bubble_pct']:.1f} % (ideal {s['ideal_bubble_pct']:.1f} %, "
                             f"analytic {s['analytic_bubble_pct']:.1f} %)")
        table = pa.concat_tables(tables)
        with atomic_path(outdir / "pipeline_stages.csv") as tmp:
            pacsv.write_csv(table, tmp)
        write_parquet(table, outdir / "pipeline_stages.parquet")
    lines.append(f"wrote pipeline_stages.csv, .parquet and the figures to {outdir}")
    return lines
