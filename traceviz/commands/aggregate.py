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
from dataclasses import dataclass
from pathlib import Path

from ..job import Job
from ..render.aggregation_files import aggregation_files
from ..render.words import clock_words
from ..table.result import Result


@dataclass
class Aggregated:
    """Where ``traceviz aggregate`` wrote: the folders' common parent (absolute) and
    each folder's clock alignment (by absolute path)."""

    root: Path
    alignment: dict[Path, str]


def aggregate_folder(job: Job, folder: Path, alignment: str = "synced",
                     figures: bool = True, rank_figures: str = "auto") -> Result:
    """Tables and figures of one folder of rank tables of ``job`` (see the module doc),
    paths relative to ``folder``."""
    agg, failed, layout, layout_note = job.aggregation_run(alignment, folder)
    res = aggregation_files(agg, layout, layout_note, figures, rank_figures)
    res.failed = failed
    res.lines.append(f"{folder}: {len(agg.ranks)} rank{'s' * (len(agg.ranks) != 1)}; "
                     f"{clock_words(len(agg.ranks), agg.clocks)}")
    return res


def run(root: Job | str | os.PathLike, outdir: str | os.PathLike | None = None, *,
        alignment: str = "synced", topology: str | os.PathLike | None = None,
        jobs: int = 0, figures: bool = True, quiet: bool | None = None,
        vpp: int | None = None, rank_figures: str = "auto", scheduler: str | None = None
        ) -> Result:
    """Every folder of rank tables of ``root`` (a job, or its path: parsed into
    ``outdir`` first when it has none), each one's outputs in that folder: paths relative to the
    folders' common parent, ``value`` (:class:`Aggregated`)."""
    job = Job.of(root, topology, vpp, tables=outdir, jobs=jobs, quiet=quiet,
                 scheduler=scheduler)
    folders = job.folders
    common = Path(os.path.commonpath([os.path.abspath(f) for f in folders]))
    out = Result(value=Aggregated(common, {}))
    for folder in folders:
        res = aggregate_folder(job, folder, alignment, figures, rank_figures)
        under = Path(os.path.relpath(os.path.abspath(folder), common))
        for kind in ("tables", "csv", "figures"):
            getattr(out, kind).update({os.fspath(under / name): v
                                       for name, v in getattr(res, kind).items()})
        out.lines += res.lines
        out.notes += res.notes
        out.failed += res.failed
        out.value.alignment[Path(os.path.abspath(folder))] = res.value.alignment
    return out
