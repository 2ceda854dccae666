"""What the report keeps of one rank: its collective calls, its ProfilerStep spans and
its communication / computation time. A few kilobytes per rank, so a job of hundreds of
ranks is summarized one table at a time."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..classify.groups import GROUPS
from ..parse.table import COLLECTIVES
from ..intervals.core import intersect, measure, union
from .calls import RankCalls, rank_calls
from .select import index_in

KINDS = ("COMP", "COMM", "MEM")


@dataclass
class RankSummary:
    """Times in ns on the rank's own clock; interval lengths are of unions, so concurrent
    kernels count once."""

    rank: int
    world_size: int | None
    device_name: str | None
    steps: list[tuple[int, int, int]]  # (iteration, ts, dur) of each ProfilerStep
    first_ts: int                      # earliest GPU activity start
    last_end: int                      # latest GPU activity end
    comm_ns: int                       # |COMM kernels|
    comp_ns: int                       # |COMP kernels|
    overlap_ns: int                    # |COMM ∩ COMP|
    # keyed by ("comm_group", group) and ("collective", type):
    busy_by: dict[tuple[str, str], int]    # |COMM kernels of the key|
    hidden_by: dict[tuple[str, str], int]  # |COMM kernels of the key ∩ COMP|
    calls: RankCalls
    truncated_at: int | None = None    # byte offset where a cut trace ends


def _device_name(meta: dict) -> str | None:
    props = meta.get("device_properties") or []
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("name"):
                return str(p["name"])
    return None


def summarize(table: pa.Table, rank: int) -> RankSummary:
    """The summary of one rank's activity table (``rank``: see :func:`.inputs.rank_of`)."""
    from ..api import metadata

    meta = metadata(table)
    ts = np.asarray(table["ts"].to_numpy(zero_copy_only=False), dtype=np.int64)
    end = ts + np.maximum(pc.fill_null(table["dur"], 0).to_numpy(zero_copy_only=False), 0)
    kind = index_in(table["kind"], KINDS)
    comp = union(ts[kind == 0], end[kind == 0])
    comm_rows = kind == 1
    comm = union(ts[comm_rows], end[comm_rows])
    busy_by, hidden = {}, {}
    for column, labels in (("comm_group", GROUPS), ("collective", COLLECTIVES)):
        codes = index_in(table[column], labels)
        for g in np.unique(codes[comm_rows]).tolist():
            rows = comm_rows & (codes == g)
            gu = union(ts[rows], end[rows])
            key = (column, labels[g] if g >= 0 else "unknown")
            busy_by[key] = int((gu[1] - gu[0]).sum())
            hidden[key] = measure(*intersect(gu, comp))
    steps = [(int(s.get("iteration", -1)), int(s["ts"]), int(s["dur"]))
             for s in meta.get("steps") or [] if s.get("ts") is not None]
    world = meta.get("world_size")
    return RankSummary(
        rank=rank, world_size=int(world) if isinstance(world, int) else None,
        device_name=_device_name(meta), steps=sorted(steps, key=lambda s: s[1]),
        first_ts=int(ts.min()) if ts.size else 0, last_end=int(end.max()) if ts.size else 0,
        comm_ns=int((comm[1] - comm[0]).sum()), comp_ns=int((comp[1] - comp[0]).sum()),
        overlap_ns=measure(*intersect(comm, comp)), busy_by=busy_by,
        hidden_by=hidden, calls=rank_calls(table, rank),
        truncated_at=(meta.get("stats") or {}).get("truncated_at"))
