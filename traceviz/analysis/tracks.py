"""What the Perfetto export draws for one rank, computed from its activity table:

* steps: one span per micro-batch step (iteration, phase, micro-batch, chunk: first
  kernel start to last kernel end) and one per stretch of optimizer work between steps;
* communication: every COMM kernel with its group, collective, process group, Seq, group
  size, operation size S (nccl-tests', :func:`.calls.operation_bytes`) and bus bandwidth
  from its own kernel time (GB/s = bytes/ns);
* collectives in flight: a counter of COMM kernels running, at every change.

Times are int ns on the rank's clock minus ``offset_ns``; -1 / None where unknown.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..intervals import grouped_span
from ..table.arrays import codes_of, index_in, ints, unique_rows
from ..table.schema import COLLECTIVES, COMM, KINDS, OPTIMIZER, PHASES
from .calls import factors, operation_bytes

COLUMNS = ("ts", "dur", "kind", "name", "stream", "iteration", "phase", "microbatch",
           "chunk", "comm_group", "collective", "pg_name", "seq", "group_size",
           "msg_in_bytes", "msg_out_bytes")


def _text(table: pa.Table, name: str) -> list:
    codes, values = codes_of(table[name])
    texts: list[str | None] = [*values, None]
    return [texts[c] for c in codes.tolist()]


@dataclass
class Steps:
    """Step spans (arrays of one length), in start order; micro-batch and chunk are -1
    for an optimizer span."""

    iteration: np.ndarray
    phase: list[str]
    microbatch: np.ndarray
    chunk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kernels: np.ndarray


@dataclass
class RankTracks:
    """Everything the export draws of one rank (see the module doc)."""

    rank: int
    steps: Steps
    comm_rows: np.ndarray       # rows of the table that are COMM kernels
    group: list                 # per row: comm_group name or None
    collective: list            # per row: collective name or None
    process_group: list         # per row: pg_name or None
    seq: np.ndarray
    group_size: np.ndarray
    nbytes: np.ndarray          # S per row, -1 unknown
    busbw: np.ndarray           # GB/s per row, NaN unknown
    in_flight: tuple[np.ndarray, np.ndarray]  # (time, COMM kernels running from then)
    ts: np.ndarray              # every row
    end: np.ndarray
    stream: np.ndarray
    name: list
    kind: list
    phase: list
    microbatch: np.ndarray


def rank_tracks(table: pa.Table, rank: int, offset_ns: int = 0) -> RankTracks:
    """The tracks of one rank's activity table (see the module doc)."""
    ts = ints(table["ts"]) - offset_ns
    end = ts + np.maximum(ints(table["dur"], 0), 0)
    kind = index_in(table["kind"], KINDS)
    phase = index_in(table["phase"], PHASES)
    it, mb, chunk = (ints(table[c]) for c in ("iteration", "microbatch", "chunk"))
    rows = np.flatnonzero((mb >= 0) | (phase == OPTIMIZER))
    rows = rows[np.argsort(ts[rows], kind="stable")]
    in_step = mb[rows] >= 0
    # optimizer work is one span per stretch between micro-batch steps (zero_grad before
    # the forward and the step after the backward are two spans, not one over both)
    stretch = np.cumsum(np.r_[0, (phase[rows][1:] == OPTIMIZER)
                              & (phase[rows][:-1] != OPTIMIZER)])
    keys = np.stack([it[rows], phase[rows], np.where(in_step, mb[rows], -1),
                     np.where(in_step, chunk[rows], -1), np.where(in_step, -1, stretch)],
                    axis=1)
    uniq, grp = unique_rows(keys)
    lo, hi = grouped_span(ts[rows], end[rows], grp, uniq.shape[0])
    count = np.bincount(grp, minlength=uniq.shape[0])
    order = np.argsort(lo, kind="stable")
    steps = Steps(uniq[order, 0], [PHASES[p] for p in uniq[order, 1].tolist()],
                  uniq[order, 2], uniq[order, 3], lo[order], hi[order], count[order])
    comm = np.flatnonzero(kind == COMM)
    coll = index_in(table["collective"], COLLECTIVES)
    size = ints(table["group_size"])
    nbytes = operation_bytes(coll, ints(table["msg_in_bytes"]), ints(table["msg_out_bytes"]),
                             size)
    factor = factors(coll, size)
    with np.errstate(divide="ignore", invalid="ignore"):
        busbw = np.where((nbytes >= 0) & (end > ts) & np.isfinite(factor),
                         nbytes * factor / np.maximum(end - ts, 1), np.nan)
    t = np.concatenate([ts[comm], end[comm]])
    delta = np.concatenate([np.ones(comm.size, np.int64), -np.ones(comm.size, np.int64)])
    flight = np.lexsort((delta, t))
    return RankTracks(
        rank=rank, steps=steps, comm_rows=comm, group=_text(table, "comm_group"),
        collective=[COLLECTIVES[c] if c >= 0 else None for c in coll.tolist()],
        process_group=_text(table, "pg_name"), seq=ints(table["seq"]), group_size=size,
        nbytes=nbytes, busbw=busbw, in_flight=(t[flight], np.cumsum(delta[flight])),
        ts=ts, end=end, stream=ints(table["stream"]), name=_text(table, "name"),
        kind=_text(table, "kind"), phase=_text(table, "phase"), microbatch=mb)
