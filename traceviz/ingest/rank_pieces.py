"""The map step of a job's path and diagnosis on workers: each rank's piece
(:mod:`traceviz.analysis.critical_path.pieces`) made where its tables are read, on
local worker processes or a Dask cluster's workers (:mod:`.workers`). What comes back
to this process is the piece: the rank's activities, communication kernels and graph
arrays, never its tables. A rank whose worker dies (twice) is named, not dropped
silently: it is left out of the job and listed in :attr:`RankMap.failed`.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.critical_path.pieces import PieceOptions, RankPiece, SharedValues, rank_piece
from ..errors import TraceVizError
from ..table.cores import usable_cores
from ..table.io import read_table
from . import workers
from .tables import slim

# below this many ranks the pieces are made here: starting worker processes (each
# imports numpy, pyarrow and numba, ~1 s) costs more than it saves
LOCAL_MIN_RANKS = 32


def piece_of_files(task: tuple[int, str, str], options: PieceOptions) -> RankPiece:
    """The piece of one rank from its GPU and CPU table files (runs in a worker)."""
    rank, gpu, cpu = task
    return rank_piece(rank, slim(read_table(Path(gpu))), slim(read_table(Path(cpu))),
                      options)


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


@dataclass
class RankMap:
    """The map step :func:`~traceviz.analysis.critical_path.paths.job_path` takes,
    on ``workers``: called with (rank, GPU table file, CPU table file) each, it returns
    the ranks' pieces in that order; ranks whose worker died are in ``failed`` (one
    line each) and have no piece. ``work``: what makes a piece from its files (a
    module-level function)."""

    workers: Workers = Workers()
    failed: list[str] = field(default_factory=list)
    work: Callable[[tuple[int, str, str], PieceOptions], RankPiece] = piece_of_files

    def __call__(self, tables: list, options: PieceOptions) -> list[RankPiece]:
        tasks = [(int(r), os.fspath(g), os.fspath(c)) for r, g, c in tables]
        tables.clear()
        order = {t: k for k, t in enumerate(tasks)}
        done: list[tuple[int, RankPiece]] = []
        shared = SharedValues()
        for f in workers.run(self.work, tasks, (options,),
                             jobs=self.workers.processes(len(tasks)),
                             scheduler=self.workers.scheduler):
            rank, gpu, _ = f.task
            if f.died is not None:
                self.failed.append(f"{gpu}: rank {rank} left out: the process reading it "
                                   f"{f.died}; run again with fewer --jobs, or check "
                                   "the table")
                continue
            done.append((order[f.task], shared.share(f.result)))
        if not done and self.failed:  # nothing to diagnose: say why, not "no rank"
            raise TraceVizError(f"no rank could be read: {self.failed[0]}"
                                + (f" (and {len(self.failed) - 1} more)"
                                   if len(self.failed) > 1 else ""))
        done.sort(key=lambda kv: kv[0])
        return [p for _, p in done]
