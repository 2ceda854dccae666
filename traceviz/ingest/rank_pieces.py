"""The map steps of a job's analyses on workers (:func:`map_ranks`): each rank's piece
of the job's path and diagnosis (:mod:`traceviz.analysis.critical_path.pieces`), each
rank's communication part for the aggregation and the diagnosis without advice
(:func:`comm_parts`), its summary for the report (:func:`summaries`), its op model
(:func:`rank_op_models`), its share of the breakdown (:func:`breakdown_parts`) and its
activities (:func:`rank_activities`), made where its tables are read, on local worker
processes or a Dask cluster's workers (:mod:`.workers`). What comes back to this
process is that share, never the rank's tables. A rank whose worker dies (twice), or
whose table cannot be read, is named, not dropped silently: it is left out of the job
and listed with its reason.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..analysis.activities import Options, RankActivities, activities
from ..analysis.breakdown import BreakdownPart, breakdown_part
from ..analysis.critical_path.pieces import PieceOptions, RankPiece, SharedValues, rank_piece
from ..analysis.ops import RankOps, rank_ops
from ..analysis.rank_summary import RankSummary, summarize
from ..analysis.diagnose.waits import CommPart, comm_part
from ..errors import TraceVizError
from ..progress import progress
from ..table.cores import usable_cores
from ..table.io import read_table
from ..table.parked import RANKS_PER_TRIM, release_free_memory
from . import workers
from .tables import load_table, missing_columns, slim

# below this many ranks the pieces are made here: starting worker processes (each
# imports numpy, pyarrow and numba, ~1 s) costs more than it saves
LOCAL_MIN_RANKS = 32


def _read_pair(gpu: str, cpu: str) -> tuple[pa.Table, pa.Table] | str:
    """A rank's GPU and CPU tables (their process groups cut, :func:`~.tables.slim`),
    or the one line saying why one cannot be read."""
    try:
        return slim(read_table(Path(gpu))), slim(read_table(Path(cpu)))
    except TraceVizError as exc:
        return str(exc)


def piece_of_files(task: tuple[int, str, str], options: PieceOptions) -> RankPiece | str:
    """The piece of one rank from its GPU and CPU table files (runs in a worker), or the
    one line saying why a table cannot be read."""
    rank, gpu, cpu = task
    tables = _read_pair(gpu, cpu)
    return tables if isinstance(tables, str) else rank_piece(rank, *tables, options)


def ops_of_files(task: tuple[int, str, str], peak_tflops: float | None) -> RankOps | str:
    """One rank's op model (:func:`~traceviz.analysis.ops.rank_ops`) from its GPU and
    CPU table files (runs in a worker), or the one line saying why a table cannot be
    read."""
    _, gpu, cpu = task
    tables = _read_pair(gpu, cpu)
    return tables if isinstance(tables, str) else rank_ops(*tables, peak_tflops)


def rank_op_models(files: list[tuple[int, Path, Path]], peak_tflops: float | None,
                   on: Workers, failed: list[str]) -> list[RankOps]:
    """The op model of every (rank, GPU table, CPU table) of ``files``
    (:func:`ops_of_files`), made on ``on``, in the files' order; the ranks that cannot
    be read go to ``failed``."""
    return map_ranks(ops_of_files, [(int(r), os.fspath(g), os.fspath(c))
                                    for r, g, c in files], (peak_tflops,), on, failed)


@dataclass(frozen=True)
class Workers:
    """Where the per-rank work runs: on the Dask cluster ``scheduler`` (``tcp://HOST:PORT``
    or ``"local"``), else on ``jobs`` local processes (0: one per core; 1: in this
    process). Jobs of fewer than :data:`LOCAL_MIN_RANKS` ranks run here unless a
    scheduler is named."""

    jobs: int = 1
    scheduler: str | None = None

    def processes(self, ranks: int) -> int:
        """How many local processes make ``ranks`` pieces (1: this process)."""
        if ranks < LOCAL_MIN_RANKS:
            return 1
        return max(1, min(self.jobs or usable_cores(), ranks))


def map_ranks(work: Callable, tasks: list[tuple], args: tuple, on: Workers,
              failed: list[str], keep: Callable[[Any], Any] = lambda r: r) -> list:
    """``work(task, *args)`` of every task (its rank first, the file it reads second)
    on the workers ``on``, in the tasks' order, each result passed through ``keep`` as
    it arrives (to share what results state alike; a terminal sees a bar). A result
    that is a string is a rank the work could not read (one line): it goes to
    ``failed``, as does a rank whose worker died (twice). Nothing read at all raises the
    first reason."""
    order = {t: k for k, t in enumerate(tasks)}
    done: list[tuple[int, Any]] = []
    finished = workers.run(work, tasks, args, jobs=on.processes(len(tasks)),
                           scheduler=on.scheduler)
    for k, f in enumerate(progress(finished, "reading ranks", len(tasks))):
        if k % RANKS_PER_TRIM == RANKS_PER_TRIM - 1:
            release_free_memory()  # what carried the results here: back to the system
        rank, path = f.task[:2]
        if f.died is not None:
            failed.append(f"{path}: rank {rank} left out: the process reading it "
                          f"{f.died}; run again with fewer --jobs, or check the table")
        elif isinstance(f.result, str):
            failed.append(f.result)
        else:
            done.append((order[f.task], keep(f.result)))
    if not done and failed:  # nothing to diagnose: say why, not "no rank"
        raise TraceVizError(f"no rank could be read: {failed[0]}"
                            + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))
    done.sort(key=lambda kv: kv[0])
    return [r for _, r in done]


@dataclass
class RankMap:
    """The map step :func:`~traceviz.analysis.critical_path.paths.job_path` takes,
    on ``workers``: called with (rank, GPU table file, CPU table file) each, it returns
    the ranks' pieces in that order; ranks whose worker died or whose tables cannot be
    read are in ``failed`` (one line each) and have no piece. ``work``: what makes a
    piece from its files, or says why it cannot (a module-level function)."""

    workers: Workers = Workers()
    failed: list[str] = field(default_factory=list)
    work: Callable[[tuple[int, str, str], PieceOptions], RankPiece | str] = piece_of_files

    def __call__(self, tables: list, options: PieceOptions) -> list[RankPiece]:
        tasks = [(int(r), os.fspath(g), os.fspath(c)) for r, g, c in tables]
        tables.clear()
        return map_ranks(self.work, tasks, (options,), self.workers, self.failed,
                         SharedValues().share)


def _read(path: str, columns: tuple[str, ...], optional: tuple[str, ...] = ()) -> Any:
    """``columns`` of the table ``path`` (its process groups cut, :func:`~.tables.slim`),
    or the one line saying why it cannot be read or lacks one of them not named
    ``optional``."""
    try:
        table = slim(load_table(Path(path), columns))
    except TraceVizError as exc:
        return str(exc)
    lacking = missing_columns(Path(path), table, columns, optional)
    return lacking if lacking is not None else table


def _per_table(work: Callable, files: list[tuple[int, Path]], args: tuple, on: Workers,
               failed: list[str], keep: Callable[[Any], Any] = lambda r: r) -> list:
    """:func:`map_ranks` of ``work`` over the (rank, table file) ``files``."""
    return map_ranks(work, [(int(r), os.fspath(p)) for r, p in files], args, on, failed,
                     keep)


def comm_of_file(task: tuple[int, str], columns: tuple[str, ...]) -> CommPart | str:
    """What the aggregation takes of one rank (runs in a worker): its table's
    :class:`~traceviz.analysis.diagnose.waits.CommPart` (``columns`` of the table read,
    its collectives' ends kept for the clock sync), or the one line saying why the
    table cannot be read."""
    rank, path = task
    table = _read(path, columns)
    return table if isinstance(table, str) else comm_part(table, rank)


def activities_of_file(task: tuple[int, str], columns: tuple[str, ...]
                       ) -> RankActivities | str:
    """One rank's activities (on its own clock) from ``columns`` of its table (runs in
    a worker), or the one line saying why the table cannot be read."""
    rank, path = task
    table = _read(path, columns)
    return table if isinstance(table, str) else activities(table, rank=rank)


def rank_activities(files: list[tuple[int, Path]], columns: tuple[str, ...], on: Workers,
                    failed: list[str]) -> list[RankActivities]:
    """The activities of every (rank, table file) in ``files``
    (:func:`activities_of_file`), made on ``on``, in the files' order; the ranks that
    cannot be read go to ``failed``."""
    shared = SharedValues()
    return _per_table(activities_of_file, files, (columns,), on, failed,
                      shared.share_acts)


def summary_of_file(task: tuple[int, str], columns: tuple[str, ...]) -> RankSummary | str:
    """One rank's :class:`~traceviz.analysis.rank_summary.RankSummary` from ``columns``
    of its table (runs in a worker), or the one line saying why the table cannot be
    read."""
    rank, path = task
    table = _read(path, columns)
    return table if isinstance(table, str) else summarize(table, rank)


def summaries(files: list[tuple[int, Path]], columns: tuple[str, ...], on: Workers,
              failed: list[str]) -> list[RankSummary]:
    """The :class:`~traceviz.analysis.rank_summary.RankSummary` of every (rank, table
    file) in ``files`` (:func:`summary_of_file`), made on ``on``, in the files' order;
    the ranks that cannot be read go to ``failed``."""
    return _per_table(summary_of_file, files, (columns,), on, failed)


def comm_parts(files: list[tuple[int, Path]], columns: tuple[str, ...], on: Workers,
               failed: list[str]) -> list[CommPart]:
    """The :class:`~traceviz.analysis.diagnose.waits.CommPart` of every (rank, table
    file) in ``files`` (:func:`comm_of_file`), made on ``on``, in the files' order; the
    ranks that cannot be read go to ``failed``."""
    shared = SharedValues()
    return _per_table(comm_of_file, files, (columns,), on, failed, shared.share_comm)


def breakdown_of_file(task: tuple[int, str], columns: tuple[str, ...],
                      optional: tuple[str, ...], options: Options,
                      chosen: tuple[int, ...] | None) -> BreakdownPart | str:
    """One rank's :class:`~traceviz.analysis.breakdown.BreakdownPart` from ``columns``
    of its table (runs in a worker; its activities where it is ``chosen``), or the one
    line saying why the table cannot be read."""
    rank, path = task
    table = _read(path, columns, optional)
    return table if isinstance(table, str) else breakdown_part(table, options, rank,
                                                               chosen)


def breakdown_parts(files: list[tuple[int, Path]], columns: tuple[str, ...],
                    optional: tuple[str, ...], options: Options,
                    chosen: tuple[int, ...] | None, on: Workers, failed: list[str]
                    ) -> list[BreakdownPart]:
    """The :class:`~traceviz.analysis.breakdown.BreakdownPart` of every (rank, table
    file) in ``files`` (:func:`breakdown_of_file`; activities of the ``chosen`` ranks
    only, None: of every rank), made on ``on``, in the files' order; the ranks that
    cannot be read go to ``failed``."""
    shared = SharedValues()
    return _per_table(breakdown_of_file, files, (columns, optional, options, chosen),
                      on, failed,
                     lambda part: _shared_part(shared, part))


def _shared_part(shared: SharedValues, part: BreakdownPart) -> BreakdownPart:
    """``part``, its activities' values the copies ``shared`` keeps (in place)."""
    if part.acts is not None:
        shared.share_acts(part.acts)
    return part
