"""``traceviz pipeline``: the pipeline schedule of a job's PP groups, measured vs ideal
(:mod:`traceviz.analysis.pipeline`), from its traces or tables (parsed first when
needed), or from a folder of PP-Schedule-Visualization timer dumps."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.diagnose.diagnosis import diagnosis_of
from ..analysis.diagnose.waits import SPLIT_COLUMNS, job_comm
from ..analysis.microbatches import COLUMNS, microbatch_table
from ..analysis.pipeline import PipelineView, pipeline_view, stage_marks, step_length
from ..errors import TraceVizError
from ..ingest.tables import ensure_tables, rank_tables
from ..ingest.timer_dump import NAME, find_dumps, read_group
from ..ingest.topology import job_layout
from ..render.figures import Figure
from ..render.pipeline_figure import Mark, draw, gap_text, gaps_html, page, stages_html
from ..table.schema import is_activity_table
from .result import Result

GAPS_SCHEMA = pa.schema([("pp_group", pa.int32()), ("kind", pa.string()),
                         ("ns", pa.int64()), ("stage", pa.int32()), ("what", pa.string())])


def _add_view(res: Result, view: PipelineView, group: list[int], i: int, title: str,
              stem: str, marks: list[tuple[int, str, int, int]]) -> None:
    """One group's figure, page, summary lines and table rows into ``res``."""
    stage = {r: p for p, r in enumerate(group)}
    rel = [Mark(stage[r], kind, a - view.origin, b - view.origin) for r, kind, a, b in marks
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
    res.lines += [f"  largest gap: {gap_text(g)}" for g in view.gaps]
    stages = view.stages.append_column("pp_group", pa.array([i] * view.stages.num_rows,
                                                            pa.int32()))
    gaps = pa.Table.from_pylist([{"pp_group": i, **g} for g in view.gaps], schema=GAPS_SCHEMA)
    res.data.setdefault("views", []).append(view)
    for name, table in (("pipeline_stages", stages), ("pipeline_gaps", gaps)):
        have = res.tables.get(name)
        res.tables[name] = table if have is None else pa.concat_tables([have, table])


def _from_timer_dumps(root: Path, all_groups: bool) -> Result:
    """The view from PP-Schedule-Visualization's timer dumps (one PP group per
    TPxCPxDP rank; by default rank 0, as its plot.py draws)."""
    ids = sorted({int(m.group(3)) for p in find_dumps(root) if (m := NAME.match(p.name))})
    res = Result()
    for i in ids if all_groups else ids[:1]:
        g = read_group(root, i)
        view = pipeline_view(g.rows, g.ranks, g.vpp, g.total_ns)
        title = f"PP group of TPxCPxDP rank {i} (ranks {g.ranks}), from timer dumps"
        _add_view(res, view, g.ranks, i, title, f"pipeline_timers_group{i}", [])
    return res


def _from_tables(root: Path, folder: Path, vpp: int | None, iteration: int | None,
                 all_groups: bool, topology, res: Result) -> bool:
    """Add the views of one folder of rank tables; False when it lacks ``iteration``."""
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    tables = {rank: t for rank, _, t in rank_tables(
        files, tuple(dict.fromkeys(COLUMNS + CALL_COLUMNS + SPLIT_COLUMNS)), res.failed)}
    jc = job_comm(tables)  # synced clocks, every communication kernel's wait / transfer
    ranks = {a.rank: a for a in jc.acts}
    del tables
    rows = microbatch_table(list(ranks.values())).to_pylist()
    its = sorted({r["iteration"] for r in rows})
    if not its:
        raise TraceVizError(f"{folder}: no micro-batches found (no forward / backward steps)")
    it = iteration if iteration is not None else its[0]
    if it not in its:
        return False
    rows = [r for r in rows if r["iteration"] == it]
    layout, note = job_layout(root, folder, topology)
    if layout is None:
        raise TraceVizError(f"{folder}: {note}; pass --topology")
    have = {r["rank"] for r in rows}
    every = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    groups = [g for g in every if set(g) <= have]
    if not groups:
        raise TraceVizError(f"{folder}: no PP group has all its ranks")
    diag = diagnosis_of(jc, every if layout.world >= max(ranks) + 1 else None)
    strag = diag.stragglers.to_pylist()
    first = focus_group(groups, [s["rank"] for s in strag] + diag.chain_ranks())
    if not all_groups and first:
        res.notes.append(f"PP group {groups.index(first)} (ranks {first}) shown: "
                         + ("it holds straggler rank "
                            f"{next(s['rank'] for s in strag if s['rank'] in first)}"
                            if any(s["rank"] in first for s in strag) else
                            "the iteration's chain of waits runs through it")
                         + " (--all-groups draws every group)")
    for i, grp in enumerate(groups if all_groups else [first or groups[0]]):
        i = groups.index(grp)
        if vpp is None:  # as the tables were classified (found from the traces)
            found = {(ranks[r].meta.get("classification") or {}).get("vpp") or 1 for r in grp}
            if len(found) > 1:
                raise TraceVizError(f"{folder}: the stages of PP group {grp} were parsed with "
                                    f"different vpp {sorted(found)}; parse again with --vpp")
            vpp = found.pop()
        lengths = {r: step_length(ranks[r].meta, it) for r in grp}
        marks = [(r, *m) for r in grp for m in stage_marks(ranks[r], it)]
        view = pipeline_view(rows, grp, vpp, {r: n for r, n in lengths.items() if n}, strag)
        title = f"PP group {i} (ranks {grp}), ProfilerStep {it}"
        _add_view(res, view, grp, i, title, f"pipeline_group{i}_iter{it}", marks)
    return True


def focus_group(groups: list[list[int]], ranks: list[int]) -> list[int] | None:
    """The PP group to show first: the one holding the first of ``ranks`` (the
    stragglers, worst first, then the ranks the chains of waits run through) that is in
    one; None when none is."""
    for r in ranks:
        for g in groups:
            if r in g:
                return g
    return None


def run(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
        all_groups: bool = False, topology: str | os.PathLike | None = None) -> Result:
    """The views (from timer dumps when ``root`` holds them, else from its rank tables:
    the first profiled iteration, or ``iteration`` wherever it was profiled). ``vpp``
    None: as the tables were classified (found from the traces)."""
    root = Path(root)
    if find_dumps(root):
        return _from_timer_dumps(root, all_groups)
    res = Result()
    found = False
    for folder in ensure_tables(root, topology=topology, vpp=vpp):
        found |= _from_tables(root, folder, vpp, iteration, all_groups, topology, res)
        if found and iteration is None:
            break
    if not found:
        raise TraceVizError(f"{root}: no ProfilerStep {iteration} among its profiled "
                            "iterations")
    return res
