"""Run ``traceviz pipeline`` over a job: find its micro-batch table (aggregating first
when needed) and its PP groups, then write each group's view."""
from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import TraceVizError
from ..output import write_csv_and_parquet
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


def _rank_extras(folder: Path, ranks: list[int], it: int
                 ) -> tuple[dict[int, int], list[tuple[int, str, int, int]]]:
    """Per rank: the length of ProfilerStep ``it``, and the marks drawn over its row:
    pipeline P2P kernels and the optimizer step's span (clock-synced absolute ns, with
    the offsets the aggregation wrote)."""
    import json

    import traceviz

    from ..parse.table import METADATA_KEY
    from .inputs import is_activity_table

    offsets = {}
    if (folder / "clock_offsets.csv").exists():
        t = pacsv.read_csv(folder / "clock_offsets.csv")
        offsets = dict(zip(t["rank"].to_pylist(), t["offset_ns"].to_pylist()))
    lengths, marks = {}, []
    for path in sorted(folder.glob("*.parquet")):
        if not is_activity_table(path):
            continue
        meta = json.loads((pq.read_schema(path).metadata or {})[METADATA_KEY])
        rank = meta.get("rank")
        if rank not in ranks:
            continue
        for step in meta.get("steps") or []:
            if step.get("iteration") == it:
                lengths[rank] = int(step["dur"])
        t = traceviz.load(path, columns=["ts", "dur", "kind", "comm_group", "collective",
                                          "phase", "iteration"])
        ts = t["ts"].to_numpy(zero_copy_only=False) - offsets.get(rank, 0)
        end = ts + pc.fill_null(t["dur"], 0).to_numpy(zero_copy_only=False)

        def where(col: str, value: str) -> np.ndarray:
            return pc.fill_null(pc.equal(t[col], value), False).to_numpy(
                zero_copy_only=False)

        in_it = pc.fill_null(pc.equal(t["iteration"], it), False).to_numpy(
            zero_copy_only=False)
        p2p = np.flatnonzero(in_it & where("collective", "SendRecv")
                             & where("comm_group", "PP"))
        marks += [(rank, "P2P", a, b) for a, b in zip(ts[p2p].tolist(), end[p2p].tolist())]
        opt = in_it & where("phase", "OPTIMIZER")
        if opt.any():
            marks.append((rank, "optimizer", int(ts[opt].min()), int(end[opt].max())))
    return lengths, marks


GAPS_SCHEMA = pa.schema([("pp_group", pa.int32()), ("kind", pa.string()),
                         ("ns", pa.int64()), ("stage", pa.int32()), ("what", pa.string())])


def gap_text(gap: dict) -> str:
    """One largest gap as a line: its size and what caused it."""
    return f"{gap['ns'] / 1e6:.3f} ms: {gap['what']}"


def _write_view(view, group: list[int], i: int, title: str, stem: Path,
                marks: list[tuple[int, str, int, int]], lines: list[str]
                ) -> tuple[pa.Table, pa.Table]:
    """Figures of one group's view; appends its summary lines, returns its stage table
    and its gaps table."""
    from ..render.pipeline_figure import Mark, draw, write_html

    stage = {r: p for p, r in enumerate(group)}
    rel = [Mark(stage[r], kind, a - view.origin, b - view.origin) for r, kind, a, b in marks
           if r in stage]
    panels = [("measured", view.measured)] + (
        [(f"ideal (median step times, P2P {view.p2p_ns / 1e3:.0f} µs)", view.ideal)]
        if view.ideal else [])
    draw(panels, group, stem.with_suffix(".png"), title, rel)
    write_html(panels, group, stem.with_suffix(".html"), title,
               _html_table(view.stages) + _html_gaps(view.gaps), rel)
    st = view.stages.to_pylist()
    crit = next(s for s in st if s["critical"])
    lines.append(f"{title}: makespan {st[0]['makespan_ns'] / 1e6:.2f} ms measured, "
                 f"{st[0]['ideal_makespan_ns'] / 1e6:.2f} ms ideal; critical stage "
                 f"{crit['stage']} (rank {crit['rank']})")
    for s in st:
        whole = (f", {s['iteration_bubble_pct']:.1f} % of the whole iteration"
                 if s["iteration_bubble_pct"] is not None else "")
        lines.append(f"  stage {s['stage']} rank {s['rank']}: bubble "
                     f"{s['bubble_pct']:.1f} % (ideal {s['ideal_bubble_pct']:.1f} %, "
                     f"analytic {s['analytic_bubble_pct']:.1f} %{whole}); warm-up "
                     f"{s['warmup_steps']}, steady {s['steady_pairs']} pairs, cool-down "
                     f"{s['cooldown_steps']}")
    lines += [f"  largest gap: {gap_text(g)}" for g in view.gaps]
    gaps = pa.Table.from_pylist([{"pp_group": i, **g} for g in view.gaps], schema=GAPS_SCHEMA)
    return view.stages.append_column("pp_group", pa.array([i] * view.stages.num_rows,
                                                          pa.int32())), gaps


def _html_gaps(gaps: list[dict]) -> str:
    items = "".join(f"<li>{html.escape(gap_text(g))}</li>" for g in gaps)
    return f"<h2>Largest gaps against the ideal schedule</h2><ul>{items}</ul>" if gaps else ""


def _write_tables(views: list[tuple[pa.Table, pa.Table]], outdir: Path) -> None:
    """``pipeline_stages`` and ``pipeline_gaps`` (.csv and .parquet) of every view."""
    write_csv_and_parquet(pa.concat_tables([s for s, _ in views]), outdir, "pipeline_stages")
    write_csv_and_parquet(pa.concat_tables([g for _, g in views]), outdir, "pipeline_gaps")


def _run_timer_dumps(root: Path, outdir: Path, all_groups: bool) -> list[str]:
    """The view from PP-Schedule-Visualization's timer dumps (one PP group per
    TPxCPxDP rank; by default rank 0, as its plot.py draws)."""
    from .timer_dump import NAME, find_dumps, read_group

    ids = sorted({int(NAME.match(p.name).group(3)) for p in find_dumps(root)})
    lines, views = [], []
    for i in ids if all_groups else ids[:1]:
        g = read_group(root, i)
        view = pipeline_view(g.rows, g.ranks, g.vpp, g.total_ns)
        title = f"PP group of TPxCPxDP rank {i} (ranks {g.ranks}), from timer dumps"
        views.append(_write_view(view, g.ranks, i, title,
                                 outdir / f"pipeline_timers_group{i}", [], lines))
    _write_tables(views, outdir)
    lines.append(f"wrote pipeline_stages / pipeline_gaps (.csv, .parquet) and the figures "
                 f"to {outdir}")
    return lines


def run(root: Path, outdir: Path, vpp: int = 1, iteration: int | None = None,
        all_groups: bool = False, topology: str | os.PathLike | None = None) -> list[str]:
    """Write the views (from timer dumps when ``root`` holds them, else from traces);
    returns the lines to print."""
    from .aggregate_job import job_layout
    from .timer_dump import find_dumps

    if find_dumps(root):
        return _run_timer_dumps(root, outdir, all_groups)
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
        views = []
        for i, group in enumerate(groups if all_groups else groups[:1]):
            lengths, marks = _rank_extras(path.parent, group, it)
            view = pipeline_view(rows, group, vpp, lengths)
            title = f"PP group {i} (ranks {group}), ProfilerStep {it}"
            views.append(_write_view(view, group, i, title,
                                     outdir / f"pipeline_group{i}_iter{it}", marks, lines))
        _write_tables(views, outdir)
    lines.append(f"wrote pipeline_stages / pipeline_gaps (.csv, .parquet) and the figures "
                 f"to {outdir}")
    return lines
