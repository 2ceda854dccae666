"""Run ``traceviz aggregate`` over a job: every folder of parsed rank tables (one per
profiled iteration), its tables, per-rank figures and group figures.

Output, in each folder of the batch output (``<root>/traceviz/<iteration folder>/``):

* ``microbatches.csv|parquet``, ``category_spans.csv|parquet``, ``clock_offsets.csv``;
* ``rank_XXXX/``: ``Rank{r}_commcompOverlap_analysis.csv``, ``Rank{r}_statistics.csv``,
  ``overlapping_timeline.png``, ``comm_comp_overlap_combined_rank{r}.png`` (rank 0 too);
* ``PP_group_{i}/pp_group_{i}_ranks_{r1_r2_..}_{alignment}.png`` per pipeline group;
* ``Model_Group_{g}/Model_Group_{g}_all_pp_groups_concatenated.png`` (a panel per PP
  group, one time axis) and ``Model_Group_{g}_all_ranks_combined.png`` per replica.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceVizError
from ..output import write_csv, write_csv_and_parquet
from .aggregate import (COLUMNS, category_spans, microbatch_table,
                        rank_activities)
from .calls import COLUMNS as CALL_COLUMNS
from .clocks import ClockSync, collective_ends, synchronize
from .inputs import is_activity_table, rank_tables



@dataclass
class FolderResult:
    """What one folder (iteration) produced."""

    folder: Path
    ranks: list[int]
    sync: ClockSync
    written: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _load(folder: Path) -> tuple[dict[int, pa.Table], list[str]]:
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    failed: list[str] = []
    columns = tuple(dict.fromkeys(COLUMNS + CALL_COLUMNS))
    return {rank: t for rank, _, t in rank_tables(files, columns, failed)}, failed


def job_layout(root: Path, folder: Path, topology: str | os.PathLike | None):
    from ..discover import find_topology_file
    from ..topology.model import from_file, from_traces

    if topology:
        return from_file(topology), None
    found = find_topology_file(folder) or find_topology_file(root)
    if found:
        return from_file(found), None
    try:
        return from_traces(folder), None
    except TraceVizError as exc:
        return None, f"no topology ({exc})"


def aggregate_folder(root: Path, folder: Path, alignment: str = "synced",
                     topology: str | os.PathLike | None = None,
                     figures: bool = True) -> FolderResult:
    """Tables and figures of one folder of rank tables (see the module doc)."""
    from ..render.timeline import overlap_bars, time_window, timeline

    tables, failed = _load(folder)
    if not tables:
        raise TraceVizError(f"{folder}: no parsed rank tables (run 'traceviz batch' first)")
    sync = synchronize({r: collective_ends(t) for r, t in tables.items()})
    ranks = [rank_activities(r, tables[r], sync if alignment == "synced" else None)
             for r in sorted(tables)]
    result = FolderResult(folder, sorted(tables), sync, failed=failed)
    mb, spans = microbatch_table(ranks), category_spans(ranks)
    for name, table in (("microbatches", mb), ("category_spans", spans)):
        result.written += write_csv_and_parquet(table, folder, name)
    result.written.append(write_csv(sync.table(), folder / "clock_offsets.csv"))
    by_rank = {ra.rank: ra for ra in ranks}
    for ra in ranks:
        r = ra.rank
        out = folder / f"rank_{r:04d}"
        mine = mb.filter(pc.equal(mb["rank"], r))
        result.written += [
            write_csv(mine, out / f"Rank{r}_commcompOverlap_analysis.csv"),
            write_csv(spans.filter(pc.equal(spans["rank"], r)), out / f"Rank{r}_statistics.csv")]
        if figures:
            result.written += [
                timeline([("", [ra])], out / "overlapping_timeline.png",
                         f"Rank {r} timeline", alignment),
                overlap_bars(mine.to_pylist(), r, out / f"comm_comp_overlap_combined_rank{r}.png")]
    layout, note = job_layout(root, folder, topology)
    if note:
        result.notes.append(f"{note}; PP and model-group figures skipped")
    if layout is None or not figures:
        return result
    if layout.world < max(by_rank) + 1:
        result.notes.append(f"topology has {layout.world} ranks but rank {max(by_rank)} "
                            "exists; group figures skipped")
        return result
    pipes = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    for i, group in enumerate(pipes):
        have = [by_rank[r] for r in group if r in by_rank]
        if len(have) < 2:
            continue
        name = "_".join(str(r) for r in group)
        result.written.append(timeline(
            [("", have)], folder / f"PP_group_{i}" / f"pp_group_{i}_ranks_{name}_{alignment}.png",
            f"PP group {i} (ranks {group}, {alignment} time)", alignment))
    for g, members in layout.model_replicas().items():
        have = [by_rank[r] for r in members if r in by_rank]
        if not have:
            continue
        window = time_window(have)
        panels = [(f"PP group {i}: ranks {grp}", [by_rank[r] for r in grp if r in by_rank])
                  for i, grp in enumerate(pipes) if set(grp) <= set(members)]
        panels = [p for p in panels if p[1]]
        out = folder / f"Model_Group_{g}"
        if panels:
            result.written.append(timeline(
                panels, out / f"Model_Group_{g}_all_pp_groups_concatenated.png",
                f"Model group {g}: its pipeline groups ({alignment} time)", alignment,
                window=window))
        result.written.append(timeline(
            [("", have)], out / f"Model_Group_{g}_all_ranks_combined.png",
            f"Model group {g}: all ranks combined ({len(have)} ranks)", alignment,
            window=window))
    return result


def rank_folders(out: Path) -> list[Path]:
    """Folders under ``out`` that hold parsed rank tables."""
    return sorted({p.parent for p in out.rglob("rank_*.parquet")})


def run(root: str | os.PathLike, outdir: str | os.PathLike | None = None, *,
        alignment: str = "synced", topology: str | os.PathLike | None = None,
        jobs: int = 0, figures: bool = True, quiet: bool = False,
        vpp: int = 1) -> list[FolderResult]:
    """Aggregate every folder of rank tables under ``outdir`` (default: the batch output
    of ``root``), parsing the traces first where no table exists yet."""
    from .. import runner

    root = Path(root)
    out = runner.output_root(root, outdir)
    if root.is_dir() and not rank_folders(root) and not rank_folders(out):
        runner.run(root, out, jobs=jobs, topology=topology, quiet=quiet, vpp=vpp)
    folders = rank_folders(root) or rank_folders(out)
    if not folders:
        raise TraceVizError(f"{root}: no traces or parsed rank tables found")
    return [aggregate_folder(root, f, alignment, topology, figures) for f in folders]
