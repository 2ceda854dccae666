"""Each analysis of a job or trace from its files: the tables loaded (traces parsed first
where needed, :mod:`.tables`), the layout found (:mod:`.topology`), and the typed result
of :mod:`traceviz.analysis` returned. The commands write these results to files; the
notebook API (:class:`traceviz.Job`) returns them.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from ..analysis.activities import Options
from ..analysis.aggregation import READ_COLUMNS as AGGREGATION_COLUMNS  # steps + calls
from ..analysis.aggregation import Aggregation, aggregation_of
from ..analysis.breakdown import READ_COLUMNS, READ_OPTIONAL, Breakdown, Params, breakdown_of
from ..analysis.critical_path import rank_graph as R
from ..analysis.critical_path.paths import (
    CriticalPath,
    HtaPath,
    job_critical_path,
    rank_path,
)
from ..analysis.diagnose.diagnosis import diagnosis_of
from ..analysis.diagnose.waits import job_comm
from ..analysis.memory import JobMemory, rank_memory
from ..analysis.ops import rank_ops
from ..analysis.ops_summary import OpModel, op_model
from ..analysis.pipeline import GroupView, PipelineViews, pipeline_view, pipeline_views
from ..errors import TraceVizError, UsageError
from ..table.schema import is_activity_table
from ..topology.layout import Layout
from .tables import (
    ensure_tables,
    input_files,
    load_with_cpu,
    load_with_memory,
    one_rank_with_cpu,
    rank_tables,
    tables_folder,
)
from .timer_dump import NAME, find_dumps, read_group
from .topology import job_layout


def breakdown(paths: list[str | os.PathLike], options: Options = Options(),
              ranks: tuple[int, ...] | None = None, params: Params = Params(),
              failed: list[str] | None = None) -> Breakdown:
    """The breakdown of every rank of ``paths`` (traces, tables or folders of either), or
    of ``ranks``; the ranks that cannot be read go to ``failed``."""
    failed = [] if failed is None else failed
    loaded = ((rank, table) for rank, _, table in rank_tables(
        input_files(paths), READ_COLUMNS, failed, READ_OPTIONAL))
    return breakdown_of(loaded, options, ranks, params, failed)


def aggregation(root: Path, folder: Path, alignment: str = "synced",
                topology: str | os.PathLike | None = None
                ) -> tuple[Aggregation, list[str], Layout | None, str | None]:
    """The aggregation of one folder of rank tables, the ranks that could not be read
    (one line each), the job's layout and why it is not known (None when it is)."""
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    failed: list[str] = []
    tables = {rank: t for rank, _, t in rank_tables(files, AGGREGATION_COLUMNS, failed)}
    if not tables:
        raise TraceVizError(f"{folder}: no parsed rank tables (run 'traceviz batch' first)")
    layout, layout_note = job_layout(root, folder, topology)
    groups = (layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"] if layout is not None
              and layout.world >= max(tables) + 1 else None)
    return aggregation_of(tables, alignment, groups), failed, layout, layout_note


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


def _folder_views(root: Path, folder: Path, vpp: int | None, iteration: int | None,
                 all_groups: bool, topology, failed: list[str]) -> PipelineViews | None:
    """The views of one folder of rank tables (None when it lacks ``iteration``); the
    ranks that cannot be read go to ``failed``."""
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    # the aggregation's columns: steps and calls
    tables = {rank: t for rank, _, t in rank_tables(files, AGGREGATION_COLUMNS, failed)}
    jc = job_comm(tables)  # synced clocks, every communication kernel's wait / transfer
    ranks = {a.rank: a for a in jc.acts}
    del tables
    layout, note = job_layout(root, folder, topology)
    if layout is None:
        raise TraceVizError(f"{folder}: {note}; pass --topology")
    every = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    diag = diagnosis_of(jc, every if ranks and layout.world >= max(ranks) + 1 else None)
    return pipeline_views(ranks, diag, every, iteration, vpp, all_groups, str(folder))


def pipeline(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
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
        views = _folder_views(root, folder, vpp, iteration, all_groups, topology, failed)
        if views is not None:
            found = views if found is None else PipelineViews(
                found.groups + views.groups, found.notes + views.notes)
            if iteration is None:
                break
    if found is None:
        raise TraceVizError(f"{root}: no ProfilerStep {iteration} among its profiled "
                            "iterations")
    return found


def _ranks(path: Path, rank: int | None) -> list[tuple[pa.Table, pa.Table]]:
    one = one_rank_with_cpu(path, rank)
    return [one] if one else [(g, c) for _, g, c in load_with_cpu(tables_folder(path,
                                                                               cpu=True))]


def ops(path: str | os.PathLike, *, rank: int | None = None,
        peak_tflops: float | None = None) -> OpModel:
    """The op model of ``path`` (one trace / table, ``--rank`` of a job, or a job)."""
    return op_model([rank_ops(g, c, peak_tflops) for g, c in _ranks(Path(path), rank)])


def memory(path: str | os.PathLike, *, rank: int | None = None) -> tuple[JobMemory, list[str]]:
    """Where GPU memory goes on ``path`` (a trace, a table, ``rank`` of a job, or a job):
    its ranks' allocator events (:mod:`traceviz.analysis.memory`), and a line for each
    rank whose trace has none. A one-line error when no rank has any."""
    ranks, missing, seen = [], [], 0
    for r, g, c, m in load_with_memory(Path(path), rank):  # one rank's tables at a time
        seen += 1
        if m is None:
            missing.append(f"rank {r}: no allocator events in its trace")
        else:
            ranks.append(rank_memory(m, g, c, r))
    if rank is not None and not seen:
        raise TraceVizError(f"{path}: no rank {rank} among its traces")
    if not ranks:
        raise TraceVizError(f"{path}: no allocator events ([memory]) in the trace(s): "
                            "profile with torch.profiler.profile(profile_memory=True) (with "
                            "record_shapes=True and with_modules=True the blocks are tied "
                            "to their ops and modules)")
    return JobMemory(ranks), missing


def _window_args(iteration: int | None, annotation: str | None, instance: int
                 ) -> tuple[str | None, int]:
    """(annotation, instance); annotation None: ProfilerStep, else the whole trace."""
    if iteration is not None:
        if annotation:
            raise UsageError("give --iteration or --annotation, not both")
        return f"{R.DEFAULT_ANNOTATION}#{iteration}", 0
    return annotation, instance


def critical_path(path: str | os.PathLike, *, iteration: int | None = None,
                  annotation: str | None = None, instance: int = 0, rank: int | None = None,
                  hta_compat: bool = False, what_if: tuple[str, ...] = (),
                  clock_sync: bool = True
                  ) -> tuple[HtaPath | CriticalPath, Path | None, Path | None]:
    """The critical path of ``path``: one rank (a trace, a table, or ``rank`` of a job)
    or the job (:mod:`traceviz.analysis.critical_path.paths`); with the rank's trace
    (None: a table) or the job's folder of tables it came from."""
    path = Path(path)
    ann, inst = _window_args(iteration, annotation, instance)
    exact = iteration is not None  # ProfilerStep#1 is not ProfilerStep#10
    one = one_rank_with_cpu(path, rank)
    if one:
        trace = path if path.is_file() and path.suffix != ".parquet" else None
        return rank_path(*one, ann, inst, hta_compat, list(what_if), exact), trace, None
    if hta_compat:
        raise UsageError("--hta-compat is for one rank (HTA analyses one rank); add --rank N")
    folder = tables_folder(path, cpu=True)
    return job_critical_path(load_with_cpu(folder), ann, inst, list(what_if), clock_sync,
                             exact, str(folder)), None, folder
