"""One rank's collective calls, built from its COMM activities.

A call is the set of kernels of one process group with one ``Seq`` (a coalesced call has
several; their sizes add up). Kernels without a sequence number are one call each,
numbered by their order within the group on this rank. Kernels without a process group
belong to the unknown group ``""`` (matched across ranks by order alone).

Point-to-point transfers (``SendRecv`` on the pipeline group) are calls of their own that
are never matched across ranks: their sequence numbers count per peer, not per group.

Sizes follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the buffer of an all-reduce,
the total input of a reduce-scatter, the total output of an all-gather, one rank's send
buffer of an all-to-all, the buffer of a broadcast / reduce / send / receive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..table.arrays import codes_of, index_in, ints, unique_rows
from ..table.schema import COLLECTIVES, GROUPS

COLUMNS = ("kind", "collective", "comm_group", "pg_name", "seq", "group_size",
           "msg_in_bytes", "msg_out_bytes", "ts", "dur", "iteration")
_ONE_WAY = {"Broadcast", "Reduce", "SendRecv"}
_HALF = {"AllGather", "ReduceScatter", "AllToAll", "Gather", "Scatter"}


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``collective`` on ``n`` ranks (NaN: none)."""
    if collective == "AllReduce":
        return 2.0 * (n - 1) / n if n > 0 else np.nan
    if collective in _HALF:
        return (n - 1) / n if n > 0 else np.nan
    if collective in _ONE_WAY:
        return 1.0
    return np.nan


FACTOR_TABLE = np.array([[busbw_factor(c, n) if n else np.nan for n in range(1025)]
                         for c in COLLECTIVES] + [[np.nan] * 1025])


def factors(collective: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Vectorized :func:`busbw_factor` (``collective`` indexes COLLECTIVES, -1 unknown;
    ``size`` the group size, unknown or above 1024: computed one by one)."""
    out = FACTOR_TABLE[collective, np.clip(size, 0, 1024)]
    big = np.flatnonzero(size > 1024)
    for i in big.tolist():
        out[i] = busbw_factor(COLLECTIVES[collective[i]], int(size[i])) \
            if collective[i] >= 0 else np.nan
    return out


@dataclass
class RankCalls:
    """The calls of one rank, one row per call; times in ns on the rank's own clock."""

    rank: int
    groups: list[str]       # process group names; "" is the unknown group
    group: np.ndarray       # index into ``groups``
    number: np.ndarray      # Seq, else order within the group on this rank
    collective: np.ndarray  # index into COLLECTIVES, -1 unknown
    comm_group: np.ndarray  # index into GROUPS
    size: np.ndarray        # ranks in the process group, -1 unknown
    nbytes: np.ndarray      # operation size S (bytes), -1 unknown
    start: np.ndarray       # first kernel start
    end: np.ndarray         # last kernel end
    busy: np.ndarray        # sum of the kernels' durations
    kernels: np.ndarray     # kernels in the call
    iteration: np.ndarray   # ProfilerStep of the first kernel, -1 none
    p2p: np.ndarray         # bool: point-to-point (never matched)

    def __len__(self) -> int:
        return self.start.shape[0]

    def table(self, offset_ns: int = 0) -> pa.Table:
        """One row per call: rank, process group, call number, collective, parallel group,
        group size, S (bytes, null unknown), start / end (ns, minus ``offset_ns``), summed
        kernel time, kernels, iteration, point-to-point, and bus bandwidth from the
        summed kernel time (GB/s, null unknown)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            busbw = np.where((self.nbytes >= 0) & (self.busy > 0),
                             self.nbytes * factors(self.collective, self.size)
                             / np.maximum(self.busy, 1), np.nan)
        return pa.table({
            "rank": pa.array(np.full(len(self), self.rank), pa.int32()),
            "process_group": pa.array([self.groups[g] or None for g in self.group.tolist()],
                                      pa.string()),
            "number": pa.array(self.number, pa.int64()),
            "collective": pa.array([COLLECTIVES[c] if c >= 0 else None
                                    for c in self.collective.tolist()], pa.string()),
            "comm_group": pa.array([GROUPS[g] for g in self.comm_group.tolist()], pa.string()),
            "group_size": pa.array(self.size, pa.int64(), mask=self.size < 0),
            "bytes": pa.array(self.nbytes, pa.int64(), mask=self.nbytes < 0),
            "start_ns": pa.array(self.start - offset_ns, pa.int64()),
            "end_ns": pa.array(self.end - offset_ns, pa.int64()),
            "busy_ns": pa.array(self.busy, pa.int64()),
            "kernels": pa.array(self.kernels, pa.int64()),
            "iteration": pa.array(self.iteration, pa.int64()),
            "p2p": pa.array(self.p2p, pa.bool_()),
            "busbw_gbps": pa.array(busbw, pa.float64(), mask=np.isnan(busbw))})


def operation_bytes(collective: np.ndarray, in_bytes: np.ndarray, out_bytes: np.ndarray,
                    size: np.ndarray) -> np.ndarray:
    """nccl-tests' S per kernel from Kineto's message sizes (-1 unknown)."""
    gather, scatter = COLLECTIVES.index("AllGather"), COLLECTIVES.index("ReduceScatter")
    first = np.where(in_bytes >= 0, in_bytes, out_bytes)
    s = np.where(collective == gather,
                 np.where(out_bytes >= 0, out_bytes,
                          np.where((in_bytes >= 0) & (size > 0), in_bytes * size, -1)),
                 first)
    return np.where((collective == scatter) & (in_bytes < 0) & (out_bytes >= 0) & (size > 0),
                    out_bytes * size, s)


def rank_calls(table: pa.Table, rank: int) -> RankCalls:
    """The calls of one rank's activity table (see the module doc)."""
    comm = table.filter(pc.equal(table["kind"], "COMM"))
    coll = index_in(comm["collective"], COLLECTIVES)
    cgroup = index_in(comm["comm_group"], GROUPS)
    cgroup = np.where(cgroup < 0, GROUPS.index("OTHER"), cgroup)
    gcode, gnames = codes_of(comm["pg_name"])
    groups = [str(g) for g in gnames] + [""]
    gcode = np.where(gcode < 0, len(groups) - 1, gcode)
    ts, dur = ints(comm["ts"]), np.maximum(ints(comm["dur"], 0), 0)
    seq, size = ints(comm["seq"]), ints(comm["group_size"])
    in_b, out_b = ints(comm["msg_in_bytes"]), ints(comm["msg_out_bytes"])
    p2p = (coll == COLLECTIVES.index("SendRecv")) & (cgroup == GROUPS.index("PP"))
    # order within the group by start: the call number where there is no Seq
    order = np.lexsort((ts, gcode))
    first = np.searchsorted(gcode[order], gcode[order], side="left")
    ordinal = np.empty(order.size, dtype=np.int64)
    ordinal[order] = np.arange(order.size) - first
    by_seq = (seq >= 0) & ~p2p
    number = np.where(by_seq, seq, ordinal)
    # a call: (group, number) for sequenced kernels; one call per other kernel
    unique_key = np.where(by_seq, -1, np.arange(ts.size))
    keys = np.stack([gcode, number, unique_key], axis=1)
    _, call = unique_rows(keys)
    n = int(call.max()) + 1 if call.size else 0
    head = np.full(n, -1, dtype=np.int64)  # the call's first kernel (by start)
    by_start = np.argsort(ts, kind="stable")
    head[call[by_start[::-1]]] = by_start[::-1]
    end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(end, call, ts + dur)
    op_bytes = operation_bytes(coll, in_b, out_b, size)
    nbytes = np.zeros(n, dtype=np.int64)
    np.add.at(nbytes, call, np.maximum(op_bytes, 0))
    unknown = np.zeros(n, dtype=np.int64)
    np.add.at(unknown, call, op_bytes < 0)
    return RankCalls(
        rank=rank, groups=groups, group=gcode[head], number=number[head],
        collective=coll[head], comm_group=cgroup[head], size=size[head],
        nbytes=np.where(unknown > 0, -1, nbytes), start=ts[head], end=end,
        busy=np.bincount(call, weights=dur, minlength=n).astype(np.int64),
        kernels=np.bincount(call, minlength=n), iteration=ints(comm["iteration"])[head],
        p2p=p2p[head])
