"""One rank's share of the job graph, made where its tables are read: the map step of
the job's path and diagnosis (:func:`rank_piece`). A piece holds the rank's activities
and communication kernels (for the matching across ranks), its graph's nodes and edges
(for the join) and whatever ``also`` makes of its tables; no table. The matching, the
clock sync and the join run over the pieces (:func:`.paths.job_path`), wherever they
were made: the same numbers from one process, local processes or a cluster's workers.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ...errors import TraceVizError
from ...table.schema import metadata
from ..activities import RankActivities
from ..diagnose.waits import CommPart, comm_part
from ..host_device import rank_events
from . import job as J
from . import rank_graph as R
from .tables import phases_of


def rank_label(rank: int) -> str:
    return f"rank {rank}" if rank >= 0 else "rank n/a"


def window_of(ev, ann: str | None, inst: int, notes: list[str], exact: bool = False
              ) -> R.Window:
    """The window of ``ann`` / ``inst``; without an annotation, the ProfilerStep
    instance, or the whole trace when it has no ProfilerStep (said in ``notes``)."""
    if ann is None:
        if any(R.DEFAULT_ANNOTATION in t for t in ev.names):
            ann = R.DEFAULT_ANNOTATION
        else:
            if not any("whole trace" in n for n in notes):
                notes.append("no ProfilerStep in the trace: the whole trace is analysed "
                             "(pick a window with --annotation)")
            ann = ""
    return R.window(ev, ann, inst, exact)


@dataclass(frozen=True)
class PieceOptions:
    """How every rank's piece is cut: the window (annotation, instance, ``exact``: see
    :func:`~.rank_graph.window`), whether the clocks are to be solved (the collectives'
    ends kept), and ``also``: a function of a rank's (GPU, CPU) tables whose result the
    piece carries (a module-level function: it travels to the workers by name)."""

    annotation: str | None = None
    instance: int = 0
    exact: bool = False
    with_ends: bool = True
    also: Callable[[pa.Table, pa.Table], Any] | None = None


@dataclass
class RankPiece:
    """One rank's share of the job (see the module doc). ``join`` is None where the rank
    has no window (``notes`` say why: the rank is left out of the graph, not of the
    matching)."""

    rank: int
    comm: CommPart
    stage: Any                        # the table's classification stage (None unknown)
    phases: np.ndarray | None         # per GPU-table row (:func:`.tables.phases_of`)
    n_rows: int                       # rows of the GPU table
    join: J.JoinPiece | None
    notes: list[str] = field(default_factory=list)
    also: Any = None


class SharedValues:
    """One copy of what many ranks' pieces state alike, once the pieces are in one
    process: their metadata's values (the devices' properties, the classification, the
    groups' descriptions: lists of dicts, ~200 objects a rank) and their names lists.
    Each piece made on a worker brings its own copies (~80 KB of objects a rank, 330 MB
    at 4,096 ranks). Values are compared by their JSON; the pieces only read them."""

    def __init__(self) -> None:
        self.values: dict[bytes, Any] = {}

    def one(self, value: Any) -> Any:
        """The copy of ``value`` kept for every piece that states it."""
        if not isinstance(value, (dict, list)) or not value:
            return value
        try:
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON: kept as it is
            return value
        return self.values.setdefault(key, value)

    def share(self, piece: RankPiece) -> RankPiece:
        """``piece``, its values replaced by the copies kept (in place: as each piece
        arrives, before the next)."""
        self.share_comm(piece.comm)
        if piece.join is not None:
            ev = piece.join.rank.events
            ev.names = self.one(ev.names)
        return piece

    def share_comm(self, part: CommPart) -> CommPart:
        """``part``, its activities' values replaced by the copies kept (in place)."""
        self.share_acts(part.acts)
        return part

    def share_acts(self, acts: RankActivities) -> RankActivities:
        """``acts``, its values (metadata, names) replaced by the copies kept (in
        place)."""
        acts.meta = {k: self.one(v) for k, v in acts.meta.items()}
        acts.names = self.one(acts.names)
        acts.launch_names = self.one(acts.launch_names)
        return acts


def rank_piece(rank: int, gpu: pa.Table, cpu: pa.Table, options: PieceOptions) -> RankPiece:
    """The piece of the rank ``rank`` from its GPU and CPU tables."""
    comm = comm_part(gpu, rank, options.with_ends)
    stage = (metadata(gpu).get("classification") or {}).get("stage")
    also = options.also(gpu, cpu) if options.also is not None else None
    ev = rank_events(gpu, cpu)
    del cpu
    ev.rank = rank  # numbered as every command numbers a table that states no rank
    notes: list[str] = []
    piece = RankPiece(rank, comm, stage, phases_of(gpu), gpu.num_rows, None, notes, also)
    try:
        w = window_of(ev, options.annotation, options.instance, notes, options.exact)
    except TraceVizError as e:
        notes.append(f"{rank_label(rank)} left out: {e}")
        return piece
    rg = R.build(ev, w)
    del ev
    piece.join = J.join_piece(rg, J.kernel_info(gpu))
    rg.release()  # its graph's arrays are the piece's now
    return piece
