"""The time ledger: where each rank's iteration goes, in parts that add up to its span.

**Window.** The iteration windows of :mod:`..iterations` (a rank's iteration where the
GPU runs it).

**Parts.** Every instant of the window goes to exactly one part, the first that holds:

1. ``compute``: a compute kernel runs;
2. ``memory``: a memory copy / set runs;
3. ``transfer_<group>``: a communication kernel of that parallel group moves data (its
   *transfer*, :mod:`.waits`) with no compute or memory under it: exposed transfer.
   Data-parallel gradient reductions (reduce-scatter / all-reduce on the DP or EDP
   group) are ``grad_sync`` instead: the exposed gradient sync;
4. ``comm_unsplit``: a communication kernel whose wait / transfer split is unknown
   (one rank alone, members missing, clocks not synced);
5. ``bubble``: a kernel waits on the pipeline schedule: a pipeline-group kernel (send /
   receive) waits for its peer stage, or a collective waits for a member on another
   stage (of any pipeline: the embedding, gradient-norm and job-wide reductions after
   the last backward wait for the first stage, which the schedule makes end last: the
   pipeline's drain, not a rank's delay);
6. ``wait_rank``: a collective waits for its last member on the rank's own stage (a
   rank doing the same work, late: see :mod:`.diagnosis` for why), or a kernel that
   moves no payload (handshake, barrier) synchronises;
7. ``cpu_bound``: no GPU activity, and the next activity to start had not been launched
   yet (from the gap's start until its launch call returned): the GPU waited for the CPU;
8. ``idle``: the rest (no activity although the next one was launched: a stream or
   event dependency, launch latency).

Per rank and iteration the parts sum to ``span_ns`` exactly. The exposed waits are also
given per waited-for rank (:func:`ledger` ``waits``). Times are int64 ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...intervals import grouped_top_times, union
from ...table.arrays import unique_rows
from ...table.schema import COMM, GROUPS, MEM, collective, group
from ..activities import RankActivities
from ..iterations import Windows, windows

TRANSFER_PARTS = tuple(f"transfer_{g.lower()}" for g in GROUPS)
PARTS = ("compute", "memory") + TRANSFER_PARTS + ("grad_sync", "comm_unsplit", "bubble",
                                                  "wait_rank", "cpu_bound", "idle")
LEDGER_SCHEMA = pa.schema(
    [("rank", pa.int32()), ("iteration", pa.int32()), ("start_ns", pa.int64()),
     ("span_ns", pa.int64())] + [(f"{p}_ns", pa.int64()) for p in PARTS]
    + [("cpu_start_ns", pa.int64()), ("cpu_span_ns", pa.int64())])
WAITS_SCHEMA = pa.schema([("rank", pa.int32()), ("iteration", pa.int32()),
                          ("part", pa.string()), ("group", pa.string()),
                          ("waited_for_rank", pa.int32()), ("exposed_ns", pa.int64())])
_COMPUTE, _MEMORY = 0, 1
_TRANSFER0 = 2
_GRAD, _UNSPLIT = _TRANSFER0 + len(GROUPS), _TRANSFER0 + len(GROUPS) + 1
_WAIT0 = _UNSPLIT + 1  # waits: one level per (bubble?, group, waited-for rank) label


@dataclass
class RankLedger:
    """One rank's ledger rows (per window) and its exposed waits by waited-for rank."""

    rank: int
    windows: Windows
    parts: np.ndarray               # int64[windows, len(PARTS)]
    waits: list[tuple[int, str, str, int, int]]  # (iteration, part, group, rank, ns)


@dataclass
class Pipelines:
    """Each rank's pipeline (PP group) and stage; -1 unknown. Indexed by rank."""

    pipe: np.ndarray
    stage: np.ndarray

    @classmethod
    def of(cls, groups: list[list[int]], world: int) -> Pipelines:
        """From the PP groups (ranks in stage order)."""
        size = max([world] + [r + 1 for g in groups for r in g])
        pipe, stage = np.full(size, -1, np.int64), np.full(size, -1, np.int64)
        for i, g in enumerate(groups):
            pipe[g], stage[g] = i, np.arange(len(g))
        return cls(pipe, stage)

    def other_stage(self, rank: int, others: np.ndarray) -> np.ndarray:
        """Whether each of ``others`` (ranks, -1 none) sits on another stage than
        ``rank`` (of its pipeline or another: stage s of every pipeline runs the same
        layers at the same point of the schedule)."""
        n = self.pipe.size
        if not 0 <= rank < n or self.pipe[rank] < 0:
            return np.zeros(others.shape[0], bool)
        ok = (others >= 0) & (others < n)
        at = np.where(ok, others, 0)
        return ok & (self.pipe[at] >= 0) & (self.stage[at] != self.stage[rank])


def rank_ledger(acts: RankActivities, pipelines: Pipelines) -> RankLedger:
    """The ledger of one rank (see the module doc): its activities with their
    communication split attached (:func:`.waits.attach`; without one, every
    communication kernel's split is unknown)."""
    win = windows(acts)
    nw = win.start.size
    # the levels of each activity's intervals: compute / memory, and for communication
    # its transfer and its wait (or the whole kernel, split unknown)
    ts, end = acts.ts, acts.end
    level = np.full(len(acts), _COMPUTE, np.int64)  # an activity of unknown kind too
    level[acts.kind == MEM] = _MEMORY
    level[acts.kind == COMM] = -1
    starts, ends, levels = [ts[level >= 0]], [end[level >= 0]], [level[level >= 0]]
    p = np.flatnonzero(acts.kind == COMM)
    wait_end = (acts.wait_end[p] if acts.wait_end is not None
                else np.full(p.size, -1, np.int64))
    waited_for = (acts.waited_for[p] if acts.waited_for is not None
                  else np.full(p.size, -1, np.int64))
    grp = np.where(acts.group[p] >= 0, acts.group[p], group("OTHER"))
    grad = (np.isin(grp, (group("DP"), group("EDP")))
            & np.isin(acts.collective[p], (collective("ReduceScatter"),
                                           collective("AllReduce"))))
    transfer_level = np.where(grad, _GRAD, _TRANSFER0 + grp)
    known = wait_end >= 0
    starts += [np.where(known, wait_end, ts[p]), ts[p][known]]
    ends += [end[p], wait_end[known]]
    # wait labels: (pipeline?, group, waited-for rank) in order of first appearance
    # waiting on a pipeline peer: a pipeline-group kernel, or a collective whose last
    # member sits on another stage of this rank's pipeline (the schedule, not a slower
    # rank, made it late: the first stage ends its backward last)
    pipe = (grp == group("PP")) | pipelines.other_stage(acts.rank, waited_for)
    label_keys = np.stack([np.where(pipe, 0, 1), grp, waited_for], axis=1)[known]
    labels, label = unique_rows(label_keys)
    levels += [np.where(known, transfer_level, _UNSPLIT), _WAIT0 + label]
    n_levels = _WAIT0 + labels.shape[0]
    s, e, lv = (np.concatenate(x) for x in (starts, ends, levels))
    # each interval into the windows it overlaps, clipped to them
    s, e, lv, key = _into_windows(s, e, lv, win)
    top = grouped_top_times(s, e, lv, key, nw, n_levels)
    out = np.zeros((nw, len(PARTS)), np.int64)
    out[:, :_WAIT0] = top[:, :_WAIT0]
    bubble, wait_rank = PARTS.index("bubble"), PARTS.index("wait_rank")
    waits = []
    for j, (is_other, g, who) in enumerate(labels.tolist()):
        col = top[:, _WAIT0 + j]
        out[:, wait_rank if is_other else bubble] += col
        for w in np.flatnonzero(col).tolist():
            waits.append((int(win.iteration[w]), "wait_rank" if is_other else "bubble",
                          GROUPS[g], who, int(col[w])))
    span = win.end - win.start
    gap = span - out.sum(axis=1)
    cpu = _cpu_bound(acts, win)
    out[:, PARTS.index("cpu_bound")] = np.minimum(cpu, gap)
    out[:, PARTS.index("idle")] = gap - np.minimum(cpu, gap)
    return RankLedger(acts.rank, win, out, waits)


def _into_windows(s, e, lv, win: Windows):
    """Intervals clipped to every window they overlap (one copy per window), with the
    window's index as key; intervals outside every window are dropped."""
    first = np.searchsorted(win.end, s, side="right")
    last = np.searchsorted(win.start, e, side="left") - 1
    count = np.maximum(last - first + 1, 0)
    idx = np.repeat(np.arange(s.size), count)
    key = np.repeat(first, count) + (np.arange(idx.size) - np.repeat(
        np.cumsum(count) - count, count))
    cs = np.maximum(s[idx], win.start[key])
    ce = np.minimum(e[idx], win.end[key])
    ok = ce > cs
    return cs[ok], ce[ok], lv[idx][ok], key[ok]


def _cpu_bound(acts: RankActivities, win: Windows) -> np.ndarray:
    """Per window, the time with no GPU activity before the next activity's launch call
    returned (the GPU waiting for the CPU; see the module doc)."""
    nw = win.start.size
    out = np.zeros(nw, np.int64)
    if not len(acts):
        return win.end - win.start
    us, ue = union(acts.ts, acts.end)
    launch_end = np.where(acts.launch_end >= 0, acts.launch_end - acts.offset_ns,
                          np.iinfo(np.int64).max)
    order = np.argsort(acts.ts, kind="stable")
    sorted_ts = acts.ts[order]
    # the earliest launch end among the activities that start at each union start (a
    # union piece starts where an activity does)
    runs = np.flatnonzero(np.r_[True, sorted_ts[1:] != sorted_ts[:-1]])
    run_launch = np.minimum.reduceat(launch_end[order], runs)
    first_launch = run_launch[np.searchsorted(sorted_ts[runs], us)]
    for w in range(nw):
        a, b = win.start[w], win.end[w]
        k0 = np.searchsorted(ue, a, side="right")  # first union piece ending after a
        k1 = np.searchsorted(us, b, side="left")   # pieces starting before b
        gap_start = np.r_[a, np.minimum(ue[k0:k1], b)]
        gap_end = np.r_[np.maximum(us[k0:k1], a), b]
        next_launch = np.r_[first_launch[k0:k1], np.iinfo(np.int64).max]
        # the tail (no activity until the window's end): the GPU waits for the CPU
        length = np.maximum(gap_end - gap_start, 0)
        out[w] = int(np.minimum(np.clip(next_launch - gap_start, 0, None), length).sum())
    return out


def ledger_tables(ledgers: list[RankLedger]) -> tuple[pa.Table, pa.Table]:
    """(``ledger``: one row per rank and iteration, ``ledger_waits``: exposed waits per
    waited-for rank) of :data:`LEDGER_SCHEMA` / :data:`WAITS_SCHEMA`."""
    cols: dict[str, list] = {f.name: [] for f in LEDGER_SCHEMA}
    for lg in ledgers:
        n = lg.windows.start.size
        cols["rank"].append(np.full(n, lg.rank))
        cols["iteration"].append(lg.windows.iteration)
        cols["start_ns"].append(lg.windows.start)
        cols["span_ns"].append(lg.windows.end - lg.windows.start)
        for j, part in enumerate(PARTS):
            cols[f"{part}_ns"].append(lg.parts[:, j])
        cpu = lg.windows.cpu_start >= 0
        cols["cpu_start_ns"].append(np.where(cpu, lg.windows.cpu_start, -1))
        cols["cpu_span_ns"].append(np.where(cpu, lg.windows.cpu_end - lg.windows.cpu_start,
                                            -1))
    def column(f: pa.Field) -> pa.Array:
        v = np.concatenate(cols[f.name]) if cols[f.name] else np.zeros(0, np.int64)
        return pa.array(v, f.type, mask=(v < 0) if f.name.startswith("cpu_") else None)

    ledger = pa.Table.from_arrays([column(f) for f in LEDGER_SCHEMA], schema=LEDGER_SCHEMA)
    rows = [(lg.rank,) + w for lg in ledgers for w in lg.waits]
    waits = pa.Table.from_arrays(
        [pa.array([r[i] if not (f.name == "waited_for_rank" and int(r[i]) < 0) else None
                   for r in rows], f.type) for i, f in enumerate(WAITS_SCHEMA)],
        schema=WAITS_SCHEMA)
    return ledger, waits


CAUSES_SCHEMA = pa.schema([("rank", pa.int32()), ("iteration", pa.int32()),
                           ("cause", pa.string()), ("waited_for_rank", pa.int32()),
                           ("ns", pa.int64()), ("pct_of_span", pa.float64())])


def idle_causes(ledgers: list[RankLedger]) -> pa.Table:
    """The time each rank's GPU does not compute, by cause, per iteration and for all of
    its iterations together (``iteration`` null): every part of the ledger but compute,
    waiting for other ranks split by the rank waited for; ns and % of the span (of the
    iteration, or of all of them)."""
    cols: dict[str, list] = {f.name: [] for f in CAUSES_SCHEMA}

    def add(rank, it, cause, who, ns, span):
        if ns <= 0:
            return
        for k, v in (("rank", rank), ("iteration", it), ("cause", cause),
                     ("waited_for_rank", who), ("ns", ns),
                     ("pct_of_span", 100.0 * ns / span if span else None)):
            cols[k].append(v)

    for lg in ledgers:
        spans = (lg.windows.end - lg.windows.start).tolist()
        whole = sum(spans)
        its = lg.windows.iteration.tolist()
        by_it: dict[int, dict] = {it: {} for it in its}
        for it, part, _, who, ns in lg.waits:
            if part == "wait_rank":
                key = who if who >= 0 else None
                by_it[it][key] = by_it[it].get(key, 0) + ns
        for p in PARTS:
            if p in ("compute", "wait_rank"):
                continue
            col = lg.parts[:, PARTS.index(p)]
            for it, ns, span in zip(its, col.tolist(), spans):
                add(lg.rank, it, p, None, ns, span)
            add(lg.rank, None, p, None, int(col.sum()), whole)
        total: dict = {}
        for it, span in zip(its, spans):
            for who, ns in by_it[it].items():
                add(lg.rank, it, "wait_rank", who, ns, span)
                total[who] = total.get(who, 0) + ns
        for who, ns in total.items():
            add(lg.rank, None, "wait_rank", who, ns, whole)
    return pa.table(cols, schema=CAUSES_SCHEMA)
