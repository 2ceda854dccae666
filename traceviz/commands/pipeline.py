"""``traceviz pipeline``: the pipeline schedule of a job's PP groups, measured vs ideal
(:mod:`traceviz.analysis.pipeline`), from its traces or tables (parsed first when
needed), or from a folder of PP-Schedule-Visualization timer dumps."""
from __future__ import annotations

import os
from pathlib import Path

from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.diagnose.diagnosis import diagnosis_of
from ..analysis.diagnose.waits import SPLIT_COLUMNS, job_comm
from ..analysis.microbatches import COLUMNS
from ..analysis.pipeline import GroupView, PipelineViews, pipeline_view, pipeline_views
from ..errors import TraceVizError
from ..ingest.tables import ensure_tables, rank_tables
from ..ingest.timer_dump import NAME, find_dumps, read_group
from ..ingest.topology import job_layout
from ..render.figures import Figure
from ..render.pipeline_figure import Mark, draw, gap_text, gaps_html, page, stages_html
from ..table.schema import is_activity_table
from .result import Result

READ_COLUMNS = tuple(dict.fromkeys(COLUMNS + CALL_COLUMNS + SPLIT_COLUMNS))


def _add_view(res: Result, g: GroupView, title: str, stem: str) -> None:
    """One group's figure, page and summary lines into ``res``."""
    view, group = g.view, g.ranks
    stage = {r: p for p, r in enumerate(group)}
    rel = [Mark(stage[r], kind, a - view.origin, b - view.origin) for r, kind, a, b in g.marks
           if r in stage]
    panels = [("measured", view.measured)] + (
        [(f"ideal (median step times, P2P {view.p2p_ns / 1e3:.0f} µs)", view.ideal)]
        if view.ideal else [])
    res.figures[f"{stem}.png"] = Figure(draw, panels, group, title, rel)
    res.texts[f"{stem}.html"] = page(panels, group, title,
                                     stages_html(view.stages) + gaps_html(view.gaps), rel)
    st = view.stages.to_pylist()
    crit = next(s for s in st if s["critical"])
    res.lines.append(f"{title}: makespan {st[0]['makespan_ns'] / 1e6:.2f} ms measured, "
                     f"{st[0]['ideal_makespan_ns'] / 1e6:.2f} ms ideal; critical stage "
                     f"{crit['stage']} (rank {crit['rank']})")
    for s in st:
        whole = (f", {s['iteration_bubble_pct']:.1f} % of the whole iteration"
                 if s["iteration_bubble_pct"] is not None else "")
        res.lines.append(
            f"  stage {s['stage']} rank {s['rank']}: bubble {s['bubble_pct']:.1f} % (ideal "
            f"{s['ideal_bubble_pct']:.1f} %, analytic {s['analytic_bubble_pct']:.1f} %"
            f"{whole}); warm-up {s['warmup_steps']}, steady {s['steady_pairs']} pairs, "
            f"cool-down {s['cooldown_steps']}")
    res.lines += [f"  largest gap: {gap_text(gap)}" for gap in view.gaps]


def views_result(views: PipelineViews) -> Result:
    """The files and lines of ``views``: per group a figure, a page, its rows of the
    stage and gap tables and summary lines."""
    res = Result(tables={"pipeline_stages": views.stages, "pipeline_gaps": views.gaps},
                 notes=list(views.notes), data={"views": [g.view for g in views.groups]})
    for g in views.groups:
        if g.iteration is None:
            _add_view(res, g, f"PP group of TPxCPxDP rank {g.index} (ranks {g.ranks}), from "
                      "timer dumps", f"pipeline_timers_group{g.index}")
        else:
            _add_view(res, g, f"PP group {g.index} (ranks {g.ranks}), ProfilerStep "
                      f"{g.iteration}", f"pipeline_group{g.index}_iter{g.iteration}")
    return res


def _timer_dump_views(root: Path, all_groups: bool) -> PipelineViews:
    """The views from PP-Schedule-Visualization's timer dumps (one PP group per
    TPxCPxDP rank; by default rank 0, as its plot.py draws)."""
    ids = sorted({int(m.group(3)) for p in find_dumps(root) if (m := NAME.match(p.name))})
    views = []
    for i in ids if all_groups else ids[:1]:
        g = read_group(root, i)
        views.append(GroupView(i, g.ranks, None,
                               pipeline_view(g.rows, g.ranks, g.vpp, g.total_ns), []))
    return PipelineViews(views, [])


def folder_views(root: Path, folder: Path, vpp: int | None, iteration: int | None,
                 all_groups: bool, topology, failed: list[str]) -> PipelineViews | None:
    """The views of one folder of rank tables (None when it lacks ``iteration``); the
    ranks that cannot be read go to ``failed``."""
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    tables = {rank: t for rank, _, t in rank_tables(files, READ_COLUMNS, failed)}
    jc = job_comm(tables)  # synced clocks, every communication kernel's wait / transfer
    ranks = {a.rank: a for a in jc.acts}
    del tables
    layout, note = job_layout(root, folder, topology)
    if layout is None:
        raise TraceVizError(f"{folder}: {note}; pass --topology")
    every = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    diag = diagnosis_of(jc, every if ranks and layout.world >= max(ranks) + 1 else None)
    return pipeline_views(ranks, diag, every, iteration, vpp, all_groups, str(folder))


def views_of(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
             all_groups: bool = False, topology: str | os.PathLike | None = None,
             failed: list[str] | None = None) -> PipelineViews:
    """The views (from timer dumps when ``root`` holds them, else from its rank tables:
    the first profiled iteration, or ``iteration`` wherever it was profiled). ``vpp``
    None: as the tables were classified (found from the traces)."""
    root = Path(root)
    if find_dumps(root):
        return _timer_dump_views(root, all_groups)
    failed = [] if failed is None else failed
    found: PipelineViews | None = None
    for folder in ensure_tables(root, topology=topology, vpp=vpp):
        views = folder_views(root, folder, vpp, iteration, all_groups, topology, failed)
        if views is not None:
            found = views if found is None else PipelineViews(
                found.groups + views.groups, found.notes + views.notes)
            if iteration is None:
                break
    if found is None:
        raise TraceVizError(f"{root}: no ProfilerStep {iteration} among its profiled "
                            "iterations")
    return found


def run(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
        all_groups: bool = False, topology: str | os.PathLike | None = None) -> Result:
    """The views of :func:`views_of` as files (:func:`views_result`)."""
    failed: list[str] = []
    res = views_result(views_of(root, vpp, iteration, all_groups, topology, failed))
    res.failed = failed
    return res
