"""What the report keeps of one rank: its collective calls, its iteration windows and
its communication / computation time. A few kilobytes per rank, so a job of hundreds of
ranks is summarized one table at a time."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..table.arrays import index_in, ints
from ..table.schema import COLLECTIVES, COMM, GROUPS, KINDS, metadata
from .activities import activities
from .calls import RankCalls, rank_calls
from .iterations import windows
from .overlap import comm_by_key, comm_comp


@dataclass
class RankSummary:
    """Times in ns on the rank's own clock; interval lengths are of unions, so concurrent
    kernels count once."""

    rank: int
    world_size: int | None
    device_name: str | None
    # (iteration, start, length) of each ProfilerStep's window on the GPU (:mod:`.iterations`)
    steps: list[tuple[int, int, int]]
    first_ts: int                      # earliest GPU activity start
    last_end: int                      # latest GPU activity end
    span_ns: int                       # the iterations' windows (the ledger's), summed
    # of the kernels the ProfilerSteps launched, whole (every kernel without steps):
    comm_ns: int                       # |COMM kernels|
    comp_ns: int                       # |COMP kernels|
    overlap_ns: int                    # |COMM ∩ COMP|
    # the same kernels, keyed by ("comm_group", group) and ("collective", type):
    busy_by: dict[tuple[str, str], int]    # |COMM kernels of the key|
    hidden_by: dict[tuple[str, str], int]  # |COMM kernels of the key ∩ COMP|
    calls: RankCalls
    truncated_at: int | None = None    # byte offset where a cut trace ends
    backward: bool = False             # a backward pass was traced


def _device_name(meta: dict) -> str | None:
    props = meta.get("device_properties") or []
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("name"):
                return str(p["name"])
    return None


def summarize(table: pa.Table, rank: int) -> RankSummary:
    """The summary of one rank's activity table (``rank``: see
    :func:`traceviz.ingest.tables.rank_of`)."""
    meta = metadata(table)
    ts = ints(table["ts"])
    end = ts + np.maximum(ints(table["dur"], 0), 0)
    kind = index_in(table["kind"], KINDS)
    # busy and hidden time per group / collective are shares of the iterations: the
    # kernels the ProfilerSteps launched, whole (the GPU runs on after the CPU's step
    # ends), over the iterations' windows (the ledger's); every kernel without steps
    win = windows(activities(table, rank=rank))
    stepped = win.cpu_start >= 0
    steps = list(zip(win.iteration[stepped].tolist(), win.start[stepped].tolist(),
                     (win.end - win.start)[stepped].tolist()))
    index = np.arange(ts.shape[0])
    if steps:
        index = np.flatnonzero(ints(table["iteration"]) >= 0)
    in_ts, in_end = ts[index], end[index]
    # the rank's overlap over the same kernels as its groups': one number per rank
    whole = comm_comp(in_ts, in_end, kind[index], np.zeros(index.size, np.int64), 1)
    busy_by, hidden = {}, {}
    for column, labels in (("comm_group", GROUPS), ("collective", COLLECTIVES)):
        codes = index_in(table[column], labels)[index]
        values = np.unique(codes[kind[index] == COMM])
        cc = comm_by_key(in_ts, in_end, kind[index], np.searchsorted(values, codes),
                         values.size)
        for k, g in enumerate(values.tolist()):
            key = (column, labels[g] if g >= 0 else "unknown")
            busy_by[key] = int(cc.comm[k])
            hidden[key] = int(cc.overlap[k])
    world = meta.get("world_size")
    return RankSummary(
        rank=rank, world_size=int(world) if isinstance(world, int) else None,
        device_name=_device_name(meta), steps=sorted(steps, key=lambda s: s[1]),
        first_ts=int(ts.min()) if ts.size else 0, last_end=int(end.max()) if ts.size else 0,
        span_ns=int((win.end - win.start).sum()),
        comm_ns=int(whole.comm[0]), comp_ns=int(whole.comp[0]),
        overlap_ns=int(whole.overlap[0]), busy_by=busy_by, hidden_by=hidden,
        calls=rank_calls(table, rank),
        truncated_at=(meta.get("stats") or {}).get("truncated_at"),
        backward=bool(((meta.get("classification") or {}).get("phases") or {}).get("BWD")))
