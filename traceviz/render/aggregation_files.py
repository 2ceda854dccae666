"""The files of the aggregation (``traceviz aggregate``; Megatron-TraceViz's outputs):
its micro-batch and category tables, clock offsets, per-rank CSVs and figures, and the
pipeline-group and model-group timelines."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.aggregation import Aggregation
from ..analysis.diagnose.diagnosis import Diagnosis
from ..topology.layout import Layout
from .breakdown_figures import representative
from .figures import Figure
from ..table.result import Result
from .timeline import overlap_bars, time_window, timeline
from .words import on_one_clock

RANK_FIGURES = 64  # ranks up to which "auto" draws every rank's figures


def figure_ranks(mb: pa.Table, ranks: list[int], which: str, diag: Diagnosis | None = None
                 ) -> set[int]:
    """The ranks that get per-rank figures: ``all``, ``none``, or ``auto``: every rank up
    to :data:`RANK_FIGURES` ranks, else the stragglers and the ranks the iterations'
    chains of waits run through (``diag``), and the representative ones by the idle time
    of their micro-batch steps (:func:`traceviz.render.breakdown_figures.representative`)."""
    if which == "all" or (which == "auto" and len(ranks) <= RANK_FIGURES):
        return set(ranks)
    if which == "none":
        return set()
    idle = dict.fromkeys(ranks, 0)
    for r, v in zip(mb["rank"].to_pylist(), mb["idle_ns"].to_pylist()):
        idle[r] += v or 0
    outliers = set()
    if diag is not None:
        outliers = set(diag.stragglers["rank"].to_pylist()) | set(diag.chain_ranks(4))
    return {r for r, _ in representative(idle)} | (outliers & set(ranks))


def aggregation_files(agg: Aggregation, layout: Layout | None, layout_note: str | None,
                      figures: bool = True, rank_figures: str = "auto") -> Result:
    """The tables, per-rank CSVs and figures of ``agg`` by file name; per-rank figures
    for :func:`figure_ranks` (``rank_figures``), group figures where the ``layout`` is
    known (``layout_note``: why it is not)."""
    mb, spans, cats, alignment = (agg.microbatches, agg.category_spans, agg.ranks,
                                  agg.alignment)
    if alignment == "synced" and not on_one_clock(agg.clocks):
        alignment = "individual"  # nothing was synced (one rank): each its own clock
    res = Result(tables={"microbatches": mb, "category_spans": spans},
                 csv={"clock_offsets.csv": agg.clock_offsets}, notes=list(agg.notes),
                 value=agg)
    diag = agg.diagnosis
    drawn = figure_ranks(mb, [rc.rank for rc in cats], rank_figures, diag) if figures \
        else set()
    if figures and len(drawn) < len(cats):
        res.notes.append(f"figures for {len(drawn)} of {len(cats)} ranks and their PP "
                         "groups and model replicas (the stragglers, the ranks the chains of "
                         "waits run through, the least and most idle in their micro-batch "
                         "steps and p5-p95 between; --rank-figures all draws every rank); "
                         "the tables have every rank")
    for rc in cats:
        r = rc.rank
        mine = mb.filter(pc.equal(mb["rank"], r))
        res.csv[f"rank_{r:04d}/Rank{r}_commcompOverlap_analysis.csv"] = mine
        res.csv[f"rank_{r:04d}/Rank{r}_statistics.csv"] = spans.filter(
            pc.equal(spans["rank"], r))
        if r in drawn:
            res.figures[f"rank_{r:04d}/overlapping_timeline.png"] = Figure(
                timeline, [("", [rc])], f"Rank {r} timeline", alignment)
            res.figures[f"rank_{r:04d}/comm_comp_overlap_combined_rank{r}.png"] = Figure(
                overlap_bars, mine.to_pylist(), r)
    if layout_note:
        res.notes.append(f"{layout_note}; PP and model-group figures skipped")
    if layout is None or not figures:
        return res
    by_rank = {rc.rank: rc for rc in cats}
    if layout.world < max(by_rank) + 1:
        res.notes.append(f"topology has {layout.world} ranks but rank {max(by_rank)} "
                         "exists; group figures skipped")
        return res
    pipes = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    every = len(drawn) == len(cats)  # else only the groups of the ranks drawn
    for i, grp in enumerate(pipes):
        have = [by_rank[r] for r in grp if r in by_rank]
        if len(have) < 2 or not (every or drawn & set(grp)):
            continue
        name = "_".join(str(r) for r in grp)
        res.figures[f"PP_group_{i}/pp_group_{i}_ranks_{name}_{alignment}.png"] = Figure(
            timeline, [("", have)], f"PP group {i} (ranks {grp}, {alignment} time)",
            alignment)
    for g, members in layout.model_replicas().items():
        have = [by_rank[r] for r in members if r in by_rank]
        if not have or not (every or drawn & set(members)):
            continue
        window = time_window(have)
        panels = [(f"PP group {i}: ranks {grp}", [by_rank[r] for r in grp if r in by_rank])
                  for i, grp in enumerate(pipes) if set(grp) <= set(members)]
        panels = [p for p in panels if p[1]]
        stem = f"Model_Group_{g}/Model_Group_{g}"
        if panels:
            res.figures[f"{stem}_all_pp_groups_concatenated.png"] = Figure(
                timeline, panels, f"Model group {g}: its pipeline groups ({alignment} time)",
                alignment, window=window)
        res.figures[f"{stem}_all_ranks_combined.png"] = Figure(
            timeline, [("", have)],
            f"Model group {g}: all ranks combined ({len(have)} ranks)", alignment,
            window=window)
    return res
