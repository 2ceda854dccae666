"""``traceviz aggregate``: every folder of parsed rank tables of a job (one per profiled
iteration; traces are parsed first when there are none): its micro-batch and category
tables, clock offsets, per-rank figures and group figures.

Output, in each folder of rank tables:

* ``microbatches.csv|parquet``, ``category_spans.csv|parquet``, ``clock_offsets.csv``;
* ``rank_XXXX/``: ``Rank{r}_commcompOverlap_analysis.csv``, ``Rank{r}_statistics.csv``,
  ``overlapping_timeline.png``, ``comm_comp_overlap_combined_rank{r}.png``;
* ``PP_group_{i}/pp_group_{i}_ranks_{r1_r2_..}_{alignment}.png`` per pipeline group;
* ``Model_Group_{g}/Model_Group_{g}_all_pp_groups_concatenated.png`` (a panel per PP
  group, one time axis) and ``Model_Group_{g}_all_ranks_combined.png`` per replica.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.activities import activities
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.clocks import collective_ends, synchronize
from ..analysis.diagnose.diagnosis import Diagnosis, diagnosis_of
from ..analysis.diagnose.ledger import Pipelines
from ..analysis.diagnose.waits import SPLIT_COLUMNS, attach, job_comm, split_rows
from ..analysis.microbatches import (
    COLUMNS,
    categorized,
    category_spans,
    microbatch_table,
)
from ..errors import TraceVizError
from ..ingest.tables import ensure_tables, rank_tables
from ..ingest.topology import job_layout
from ..render.breakdown_figures import representative
from ..render.figures import Figure
from ..render.timeline import overlap_bars, time_window, timeline
from ..table.schema import is_activity_table, metadata
from .result import Result

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


def aggregate_folder(root: Path, folder: Path, alignment: str = "synced",
                     topology: str | os.PathLike | None = None,
                     figures: bool = True, rank_figures: str = "auto") -> Result:
    """Tables and figures of one folder of rank tables (see the module doc); paths are
    relative to ``folder``; per-rank figures for :func:`figure_ranks` (``rank_figures``).
    ``data``: folder, ranks, sync."""
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    failed: list[str] = []
    columns = tuple(dict.fromkeys(COLUMNS + CALL_COLUMNS + SPLIT_COLUMNS))
    tables = {rank: t for rank, _, t in rank_tables(files, columns, failed)}
    if not tables:
        raise TraceVizError(f"{folder}: no parsed rank tables (run 'traceviz batch' first)")
    sync = synchronize({r: collective_ends(t) for r, t in tables.items()})
    notes = [f"note: rank {r}: its trace is cut at byte {cut}; what it ran after the cut is "
             "missing" for r, t in sorted(tables.items())
             if (cut := (metadata(t).get("stats") or {}).get("truncated_at")) is not None]
    linked = sync.linked()
    if alignment == "synced" and len(tables) > 1 and not linked.all():
        unlinked = sync.ranks[~linked].tolist()
        if not linked.any():
            alignment = "global"
            notes.append("note: clocks not synced: no collective of a known process group "
                         "links the ranks; tables and figures use each rank's own clock")
        else:
            notes.append(f"note: clocks of ranks {unlinked} not synced (no collective links "
                         "them to another rank): they keep their own clock")
    # wait / transfer: every call's members on synced clocks, whatever the figures use
    jc = job_comm(tables, {r: sync.offset_of(r) for r in tables},
                  len(tables) > 1 and bool(linked.any()))
    layout, layout_note = job_layout(root, folder, topology)
    groups = (layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"] if layout is not None
              and layout.world >= max(tables) + 1 else None)
    diag = diagnosis_of(jc, groups)
    pipelines = Pipelines.of(groups or [], 0)
    ranks = jc.acts if alignment == "synced" else [
        attach(activities(tables[r], rank=r), *split_rows(jc, r, tables[r].num_rows))
        for r in sorted(tables)]
    del tables, jc
    cats = [categorized(a, pipelines) for a in ranks]
    mb, spans = microbatch_table(ranks), category_spans(cats)
    res = Result(tables={"microbatches": mb, "category_spans": spans},
                 csv={"clock_offsets.csv": sync.table()},
                 data={"folder": folder, "ranks": [a.rank for a in ranks], "sync": sync},
                 failed=failed)
    res.notes += notes
    res.data["alignment"] = alignment
    drawn = figure_ranks(mb, [rc.rank for rc in cats], rank_figures, diag) if figures \
        else set()
    if figures and len(drawn) < len(cats):
        res.notes.append(f"note: figures for {len(drawn)} of {len(cats)} ranks and their PP "
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
        res.notes.append(f"note: {layout_note}; PP and model-group figures skipped")
    if layout is None or not figures:
        return res
    by_rank = {rc.rank: rc for rc in cats}
    if layout.world < max(by_rank) + 1:
        res.notes.append(f"note: topology has {layout.world} ranks but rank {max(by_rank)} "
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


def run(root: str | os.PathLike, outdir: str | os.PathLike | None = None, *,
        alignment: str = "synced", topology: str | os.PathLike | None = None,
        jobs: int = 0, figures: bool = True, quiet: bool | None = None,
        vpp: int | None = None, rank_figures: str = "auto") -> list[Result]:
    """One result per folder of rank tables of ``root`` (parsed into ``outdir`` first
    when ``root`` has none); each is written into its own folder
    (``result.data["folder"]``)."""
    root = Path(root)
    folders = ensure_tables(root, outdir, jobs=jobs, topology=topology, vpp=vpp, quiet=quiet)
    return [aggregate_folder(root, f, alignment, topology, figures, rank_figures)
            for f in folders]
