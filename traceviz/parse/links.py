"""Link every GPU activity to its launch, enclosing cpu_op, step and collective metadata.

Memory stays bounded by ``work_bytes`` whatever the trace size: stores are read block by
block, and the two big joins run on parts that fit in memory:

* activity <-> launch by correlation id: a partitioned hash join (part = id mod P);
* launch -> innermost enclosing cpu_op on its thread: a sweep over time buckets; ops
  still open at a bucket's end are carried into the next bucket, so an op spanning many
  buckets is found from every one of them.

With P = 1 (the usual case) both are plain in-memory joins. Results are per-activity
arrays (the compact columns the output is built from), made in a store
(:mod:`traceviz.table.parked`): in memory, or, on traces whose arrays the budget cannot
hold, parked in files and made a slice of activities at a time (the activities' sort by
time then runs on time buckets).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..intervals.containment import (
    QUERY_SLICE,
    by_thread_then_time,
    innermost_enclosing,
    step_of,
)
from ..table import parked
from ..table.parked import InMemory
from . import fields as L
from .join import find_sorted, match_by_key, match_flows
from .partition import Parts, bucket_edges
from .reader import ScannedTrace

# working-set bytes per row of the in-memory joins (keys, sort order, scratch), measured
# with tracemalloc on a 4 GB trace: a launch costs ~24 bytes in its part and ~16 more
# sorted; a span ~32 in its bucket, as much again while the carried spans are joined,
# then its end, sort keys, order and the sweep's stack
_CORR_BYTES_PER_ROW = 64
# an activity in its part of the correlation join (counted from the join's arrays: its
# position, id, the match's bounds, count and result)
_CORR_QUERY_BYTES_PER_ROW = 48
_SPAN_BYTES_PER_ROW = 144
_QUERY_BYTES_PER_ROW = 48  # a query point in a sweep: its time, thread, sort order, result


def row_dtype(scanned: ScannedTrace) -> type:
    """int32 for row numbers while every store has fewer than 2**31 rows, else int64."""
    biggest = max((len(store) for store in scanned.stores.values()), default=0)
    return np.int32 if biggest < np.iinfo(np.int32).max else np.int64


@dataclass
class Links:
    """Per-activity results, all aligned with ``rows``: GPU-store rows in the output
    table's order (by ``ts``, ties in file order), so no column is re-ordered later."""

    # row numbers are row_dtype (int32 unless a store is huge), thread indexes int32;
    # times and ids int64
    rows: np.ndarray         # GPU-store rows that are kernels / memcpy / memset
    cls: np.ndarray          # category class (layout.CLS_*) per activity
    corr: np.ndarray         # correlation id used (after the flow fallback); -1 none
    launch_row: np.ndarray   # launch-store row; -1 none
    launch_ts: np.ndarray    # launch start (ns); -1 where no launch
    launch_thread: np.ndarray  # thread index of the launch; -1 none
    op_row: np.ndarray       # ops-store row of the innermost cpu_op around the launch
    iteration: np.ndarray    # ProfilerStep number; -1 outside every step
    comm_row: np.ndarray     # comm-store entry holding collective metadata; -1 none
    steps: list[dict]
    stats: dict
    recompute: np.ndarray    # launch's nearest autograd node / frame is recomputation
    optimizer: np.ndarray    # launch inside an optimizer annotation / frame
    launch_end: np.ndarray   # launch end (ns); -1 where no launch
    main_thread: int         # thread of the ProfilerStep annotations
    frames: dict             # forward_step / backward_step python frames: (ts, dur)
    schedule_frames: dict    # frames of each schedule pattern: how many
    forward_ts: np.ndarray   # start (ns) of the forward op that the launch's autograd
    #                          node differentiates (the last main-thread op with its
    #                          Sequence number); -1
    # the forward ops those are (ascending start; end; whether the op is a loss scaling,
    # ``Lookups.is_loss_scale``): what a backward's main-thread prelude starts from
    forward_ops: tuple[np.ndarray, np.ndarray, np.ndarray]
    autograd: np.ndarray     # launch inside an autograd engine node (not a checkpoint)
    in_op: np.ndarray        # launch inside a cpu_op
    in_rpc: np.ndarray       # a kernel launched inside a record_param_comms
    # the ops of coalescing blocks (see :func:`coalescing_blocks`): activity position and
    # comm-store entry per op, by activity, then the op's start
    block_act: np.ndarray
    block_entry: np.ndarray


@dataclass
class Lookups:
    """Per-string lookup arrays (one entry per string id plus a last one for id -1)."""

    category_class: np.ndarray      # layout.CLS_* of a category
    step_number: np.ndarray         # N of ProfilerStep#N, -1 otherwise
    is_rpc: np.ndarray              # record_param_comms
    is_node: np.ndarray             # autograd node or checkpoint op
    is_recompute_node: np.ndarray   # checkpoint (recompute) op
    is_optimizer_annotation: np.ndarray
    frame: dict[str, np.ndarray]    # phase frame patterns (forward_step, ...)
    # the annotation a coalesced collective's kernel is launched in (``nccl:coalesced``)
    is_coalesced: np.ndarray
    # a ``Collective name`` that moves data (send, recv, all_gather, ...; not ``wait``)
    is_transfer: np.ndarray
    # an op that scales the loss before the backward (Megatron's backward_step)
    is_loss_scale: np.ndarray


def activity_rows(scanned: ScannedTrace, cls_of: np.ndarray, store: InMemory,
                  work_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU-store rows that are activities, ordered by ``ts`` then file order, and their
    category classes (made in ``store``). Store rows are in file order, so a stable sort
    by ts breaks ties in file order. When ``store`` parks, the sort runs on time buckets
    of about :data:`~traceviz.table.parked.SLICE_ROWS` activities (an external sort:
    each bucket's rows, gathered in file order, sorted and written in place)."""
    gpu, rdt = scanned.stores["gpu"], row_dtype(scanned)
    if not store.parks:
        row_parts, class_parts, ts_parts = [], [], []
        for start, keep, c, t in _activity_blocks(gpu, cls_of):
            row_parts.append((start + keep).astype(rdt))
            class_parts.append(c)
            ts_parts.append(t)
        if not row_parts:
            return np.empty(0, rdt), np.empty(0, np.int8)
        # each list is joined just before it is needed and dropped after
        order = np.argsort(np.concatenate(ts_parts), kind="stable")
        del ts_parts
        return np.concatenate(row_parts)[order], np.concatenate(class_parts)[order]
    lo, hi = gpu.ts_range()
    grid = np.linspace(lo, hi + 1, 4097).astype(np.int64)
    hist = np.zeros(4096, dtype=np.int64)
    n = 0
    for _, keep, _, t in _activity_blocks(gpu, cls_of):
        hist += grid_counts(t, grid)
        n += keep.shape[0]
    edges = bucket_edges(hist, grid, max(1, parked.SLICE_ROWS))
    buckets = Parts(edges.shape[0] - 1, ("ts", "row", "cls"), scanned.budget, work_bytes // 4)
    for start, keep, c, t in _activity_blocks(gpu, cls_of):
        buckets.add(np.searchsorted(edges, t, side="right") - 1,
                    {"ts": t, "row": start + keep, "cls": c})
    rows, classes = store.full(n, -1, rdt), store.full(n, -1, np.int8)
    at = 0
    for b in range(buckets.n):
        got = buckets.get(b)
        order = np.argsort(got["ts"], kind="stable")
        rows[at:at + order.shape[0]] = got["row"][order]
        classes[at:at + order.shape[0]] = got["cls"][order]
        at += order.shape[0]
        del got, order
        store.release()
    return rows, classes


def _activity_blocks(gpu, cls_of: np.ndarray):
    """Per block of the GPU store: its first row, the positions of its activities in it,
    their category classes and their ts."""
    for start, cols in gpu.blocks("cat", "ts"):
        c = cls_of[cols["cat"]]
        keep = np.flatnonzero(np.isin(c, L.ACTIVITY_CLASSES))
        yield start, keep, c[keep], cols["ts"][keep]


def gathered(store: InMemory, source, rows: np.ndarray, *names: str) -> list[np.ndarray]:
    """``source``'s fields ``names`` at ``rows`` (-1 where a row is < 0), made in
    ``store``: a slice of rows at a time when it parks them."""
    if not store.parks:
        get = source.gatherer(rows)
        return [get(name) for name in names]
    out = [store.full(rows.shape[0], -1, source.dtypes[name]) for name in names]
    for lo, hi in store.slices(rows.shape[0]):
        get = source.gatherer(rows[lo:hi])
        for name, values in zip(names, out):
            values[lo:hi] = get(name)
        del get
    return out


def _launches(scanned: ScannedTrace, cls_of: np.ndarray, work_bytes: int, rdt,
              store: InMemory):
    """(rows, cls, corr, launch_row, stats): the activities' rows and classes in the
    order of the table, their correlation ids and launch rows (as ``rdt``)."""
    gpu, launch = scanned.stores["gpu"], scanned.stores["launch"]
    rows, cls = activity_rows(scanned, cls_of, store, work_bytes)
    corr, = gathered(store, gpu, rows, "correlation")
    for lo, hi in store.slices(rows.shape[0]):
        np.maximum(corr[lo:hi], -1, out=corr[lo:hi])  # any negative id is absent
    stats: dict[str, int] = {"activities": int(rows.shape[0])}
    launch_fix_rows, launch_fix_corr, from_flows = _flow_fallback(
        scanned, cls_of, corr, rows, store)
    stats["correlation from flow events"] = from_flows
    launch_row, no_launch, several = _correlation_join(
        launch, corr, lambda at: gpu.gather("ts", rows[at]), launch_fix_rows,
        launch_fix_corr, scanned, work_bytes, rdt, store)
    del launch_fix_rows, launch_fix_corr
    stats.update({
        "launched": store.count(launch_row, lambda v: v >= 0),
        "no correlation id": store.count(corr, lambda v: v < 0),
        "correlation without launch": no_launch,
        "correlation with several launches (one kept)": several,
    })
    return rows, cls, corr, launch_row, stats


def link(scanned: ScannedTrace, lookups: Lookups, work_bytes: int,
         store: InMemory | None = None) -> Links:
    """Compute :class:`Links` (see :class:`Lookups` for the per-string inputs).

    Per-activity arrays are the memory that grows with the trace, so each is made as
    narrow as it can be, as late as it can be, and dropped after its last use; fields
    needed twice (the activity's own ``ts``) are gathered twice rather than held.
    ``store`` (:mod:`traceviz.table.parked`) holds them (parked in files on traces
    larger than the memory budget: then only the arrays of the current step are
    resident).
    """
    store = store or InMemory()
    cls_of, step_number = lookups.category_class, lookups.step_number
    gpu, launch, ops = (scanned.stores[k] for k in ("gpu", "launch", "ops"))
    rdt = row_dtype(scanned)
    queries = [SpanQuery("cat", cls_of == L.CLS_CPU_OP), SpanQuery("name", lookups.is_node)]
    with ThreadPoolExecutor(1) as beside:  # the ops read once while the launches are joined
        spans = beside.submit(_ops_spans, ops, queries, step_number, lookups.is_rpc,
                              lookups.is_optimizer_annotation | lookups.is_coalesced,
                              scanned, work_bytes // 2)
        rows, cls, corr, launch_row, stats = _launches(scanned, cls_of, work_bytes // 2, rdt,
                                                       store)
        # what needs no span, while the ops are still being read
        launch_ts, launch_thread = gathered(store, launch, launch_row, "ts", "thread")
        frames = _frames(scanned, lookups)
        plans, steps, rpc, small = spans.result()
    coalesced = lookups.is_coalesced[small["name"]]
    annotations = {k: v[~coalesced] for k, v in small.items()}
    blocks = {k: v[coalesced] for k, v in small.items()}
    del small, coalesced
    _sweep_spans(queries, plans, launch_ts, launch_thread, work_bytes, rdt, store)
    del plans
    op_row, node_row = queries[0].result, queries[1].result
    assert op_row is not None and node_row is not None  # every query is answered
    del queries
    stats["launch inside a cpu_op"] = store.count(op_row, lambda v: v >= 0)
    n = rows.shape[0]
    node_name, node_seq = gathered(store, ops, node_row, "name", "seq_number")
    recompute, autograd = store.full(n, False, bool), store.full(n, False, bool)
    for lo, hi in store.slices(n):
        r = lookups.is_recompute_node[node_name[lo:hi]]
        recompute[lo:hi] = r
        autograd[lo:hi] = (node_row[lo:hi] >= 0) & ~r  # inside an autograd engine node
        del r
    del node_name
    if store.count(recompute, lambda v: v):
        # what the recomputed forward launched, not the nested backward
        where, began = _nested_backward_start(ops, lookups, node_row, recompute)
        store.scatter(recompute, where, store.take(launch_ts, where) < began)
        del where, began
    main = _main_thread(steps, launch_thread, autograd)
    forward_ts, forward_ops = _forward_times(ops, node_seq, main, lookups.is_loss_scale, store)
    del node_seq, node_row
    optimizer = store.full(n, False, bool)
    for lo, hi in store.slices(n):
        t, th = launch_ts[lo:hi], launch_thread[lo:hi]
        optimizer[lo:hi] = (
            _inside(annotations["ts"], annotations["dur"], annotations["thread"], t, th)
            | _inside(*frames["optimizer_frame"], t, th))
        recompute[lo:hi] |= _inside(*frames["recompute_frame"], t, th)
        del t, th
    # the step of the launch's start where there is one; an activity whose launch is not
    # in a trace that has launches was launched before it began (the CPU runs ahead:
    # an earlier step's kernel still running), no step's (-1; as HTA, whose memory
    # copies / sets take the step of their own start); in a trace without launches
    # every activity takes the step of its own start
    iteration = store.full(rows.shape[0], -1, np.int32)
    traced = stats["launched"] > 0
    for lo, hi in store.slices(rows.shape[0]):
        t = gpu.gather("ts", rows[lo:hi])
        has = launch_row[lo:hi] >= 0
        np.copyto(t, launch_ts[lo:hi], where=has)
        iteration[lo:hi] = step_of(t, steps["ts"], steps["dur"], steps["number"])
        if traced:
            iteration[lo:hi][~has & (cls[lo:hi] == L.CLS_KERNEL)] = -1
        del t, has
    comm_row, in_rpc, encloses = _comm_rows(scanned, rows, cls, rpc, launch_ts, launch_thread,
                                            rdt, store)
    block_act, block_entry = coalescing_blocks(
        scanned, lookups.is_transfer, rpc, encloses, blocks, cls, launch_ts, launch_thread,
        in_rpc, store)
    del encloses, blocks
    if block_act.size:  # a block's kernel is described by its ops (its first op's group)
        first = np.r_[True, block_act[1:] != block_act[:-1]]
        store.scatter(comm_row, block_act[first], block_entry[first])
        del first
    stats["kernels of coalesced blocks joined with their ops"] = int(
        np.unique(block_act).shape[0])
    launch_end = store.full(rows.shape[0], -1, np.int64)
    in_op = store.full(rows.shape[0], False, bool)
    for lo, hi in store.slices(rows.shape[0]):
        end = launch.gather("dur", launch_row[lo:hi])  # made in place: no temporaries
        end += launch_ts[lo:hi]
        end[launch_ts[lo:hi] < 0] = -1
        launch_end[lo:hi] = end
        in_op[lo:hi] = op_row[lo:hi] >= 0
        del end
    stats["collective metadata"] = store.count(comm_row, lambda v: v >= 0)
    step_list = [{"iteration": int(n), "ts": int(t), "dur": int(d)} for t, d, n in sorted(
        zip(steps["ts"].tolist(), steps["dur"].tolist(), steps["number"].tolist()))]
    return Links(rows=rows, cls=cls, corr=corr, launch_row=launch_row, launch_ts=launch_ts,
                 launch_thread=launch_thread, op_row=op_row, iteration=iteration,
                 comm_row=comm_row, steps=step_list, stats=stats, recompute=recompute,
                 optimizer=optimizer, launch_end=launch_end, main_thread=main,
                 autograd=autograd, in_op=in_op, in_rpc=in_rpc,
                 block_act=block_act, block_entry=block_entry,
                 frames={k: frames[k][:2] for k in ("forward_step", "backward_step")},
                 schedule_frames={k: int(frames[k][0].shape[0]) for k in
                                  ("interleaved_schedule", "pipelined_schedule")},
                 forward_ts=forward_ts, forward_ops=forward_ops)


def _forward_times(ops, node_seq: np.ndarray, main_thread: int, is_loss_scale: np.ndarray,
                   store: InMemory
                   ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per activity: start of the forward op that the autograd node around its launch
    differentiates: the *latest* main-thread op with the node's ``Sequence number`` (the
    profiler stamps every op run with grad enabled with the number the next node will
    take, so ops that create no node, such as a loss-reporting all-reduce, share it with
    the op that creates the node after them); -1 where the node has no number or no
    such op is in the trace. And those forward ops: (starts ascending, ends, whether
    each is a loss scaling by ``is_loss_scale`` of its name). Two passes over the ops,
    only when some node has a number. ``node_seq`` is read a ``store`` slice at a
    time."""
    none = np.zeros(0, np.int64)
    wanted = store.unique(lambda s: s[s >= 0], node_seq)
    if not wanted.size:  # no number anywhere: a read-only -1 for every activity, no memory
        return (np.broadcast_to(np.int64(-1), node_seq.shape),
                (none, none, np.zeros(0, bool)))
    out = store.full(node_seq.shape[0], -1, np.int64)
    last = np.full(wanted.shape[0], np.iinfo(np.int64).min)
    for _, cols in ops.blocks("ts", "thread", "seq_number"):
        pos, hit = _wanted_on(cols, wanted, main_thread)
        np.maximum.at(last, pos[hit], cols["ts"][hit])
    end = np.full(wanted.shape[0], -1, np.int64)
    scale = np.zeros(wanted.shape[0], bool)
    for _, cols in ops.blocks("ts", "dur", "thread", "seq_number", "name"):
        pos, hit = _wanted_on(cols, wanted, main_thread)
        hit = hit[cols["ts"][hit] == last[pos[hit]]]
        end[pos[hit]] = cols["ts"][hit] + np.maximum(cols["dur"][hit], 0)
        scale[pos[hit]] = is_loss_scale[cols["name"][hit]]
    for lo, hi in store.slices(node_seq.shape[0]):
        seq = node_seq[lo:hi]
        has = np.flatnonzero(seq >= 0)
        found = last[np.searchsorted(wanted, seq[has])]
        out[lo + has] = np.where(found > np.iinfo(np.int64).min, found, -1)
    known = last > np.iinfo(np.int64).min
    order = np.argsort(last[known], kind="stable")
    return out, (last[known][order], end[known][order], scale[known][order])


def _wanted_on(cols: dict, wanted: np.ndarray, main_thread: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(position in ``wanted`` of each op's Sequence number, the ops of the main thread
    whose number is wanted)."""
    seq = cols["seq_number"]
    pos = np.searchsorted(wanted, seq)
    pos[pos == wanted.shape[0]] = 0
    return pos, np.flatnonzero((cols["thread"] == main_thread) & (wanted[pos] == seq))


def _nested_backward_start(ops, lookups: Lookups, node_row: np.ndarray,
                           recompute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The launches whose innermost autograd node is a checkpoint function (positions
    where ``recompute``, ascending) and, per such launch, when the checkpoint's nested
    backward began, i.e. the start of the first other
    autograd node inside the checkpoint's span (int64 max: none). A checkpoint's backward
    recomputes its forward, then runs ``torch.autograd.backward`` on it: only what it
    launched before that is recomputation. One pass over the ops."""
    where = np.flatnonzero(recompute)
    checkpoints, of_launch = np.unique(node_row[where], return_inverse=True)
    ck = ops.gatherer(checkpoints)
    ck_ts, ck_dur, ck_thread = ck("ts"), ck("dur"), ck("thread").astype(np.int64)
    first = np.full(checkpoints.shape[0], np.iinfo(np.int64).max)
    nested = lookups.is_node & ~lookups.is_recompute_node
    for _, cols in ops.blocks("ts", "thread", "name"):
        sel = np.flatnonzero(nested[cols["name"]])
        inside = innermost_enclosing(ck_ts, ck_dur, ck_thread, cols["ts"][sel],
                                     cols["thread"][sel].astype(np.int64))
        hit = inside >= 0
        np.minimum.at(first, inside[hit], cols["ts"][sel][hit])
    return where, first[of_launch.ravel()]


def _main_thread(steps: dict, launch_thread: np.ndarray, autograd: np.ndarray) -> int:
    """The thread of the ProfilerStep annotations, else the one launching the most of
    those that launch nothing inside an autograd node (the engine's threads), else of
    all."""
    if steps["thread"].size:
        values, counts = np.unique(steps["thread"], return_counts=True)
        return int(values[np.argmax(counts)])
    engine = np.unique(launch_thread[autograd])
    launched = launch_thread[(launch_thread >= 0) & ~np.isin(launch_thread, engine)]
    if not launched.size:
        launched = launch_thread[launch_thread >= 0]
    if not launched.size:
        return -1
    values, counts = np.unique(launched, return_counts=True)
    return int(values[np.argmax(counts)])


def _inside(ts, dur, thread, q_ts, q_thread) -> np.ndarray:
    """Whether each point lies in one of the spans on its thread (few spans)."""
    return innermost_enclosing(ts, dur, thread, q_ts, q_thread, dtype=np.int32) >= 0


def _frames(scanned: ScannedTrace, lookups: Lookups
            ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(ts, dur, thread) of the python frames each phase pattern selects."""
    out: dict[str, tuple[list, list, list]] = {key: ([], [], []) for key in lookups.frame}
    for _, cols in scanned.stores["python"].blocks("ts", "dur", "thread", "name"):
        for key, select in lookups.frame.items():
            rows = np.flatnonzero(select[cols["name"]])
            out[key][0].append(cols["ts"][rows])
            out[key][1].append(cols["dur"][rows])
            out[key][2].append(cols["thread"][rows].astype(np.int64))
    def joined(v: list) -> np.ndarray:
        return np.concatenate(v) if v else np.empty(0, np.int64)

    return {key: (joined(ts), joined(dur), joined(thread))
            for key, (ts, dur, thread) in out.items()}


def _flow_fallback(scanned, cls_of, corr, rows, store: InMemory):
    """Correlation ids from launch-flow endpoints for activities and launches lacking one.

    Fills ``corr`` in place (a ``store`` slice at a time); returns (launch rows lacking
    one, their ids, count filled).
    """
    launch = scanned.stores["launch"]
    flows = scanned.stores["flow"]
    miss_l_rows, miss_l_thread, miss_l_ts = [], [], []
    for start, cols in launch.blocks("correlation", "thread", "ts"):
        m = np.flatnonzero(cols["correlation"] < 0)
        miss_l_rows.append(start + m)
        miss_l_thread.append(cols["thread"][m].astype(np.int64))
        miss_l_ts.append(cols["ts"][m])
    l_rows = np.concatenate(miss_l_rows) if miss_l_rows else np.empty(0, np.int64)
    l_corr = np.full(l_rows.shape[0], -1, dtype=np.int64)
    missing = store.positions(corr, lambda v: v < 0)
    if len(flows) == 0 or (missing.size == 0 and l_rows.size == 0):
        return l_rows, l_corr, 0
    g = scanned.stores["gpu"].gatherer(rows[missing])
    a_thread = g("thread").astype(np.int64)
    a_ts = g("ts")
    l_thread = np.concatenate(miss_l_thread) if miss_l_thread else np.empty(0, np.int64)
    l_ts = np.concatenate(miss_l_ts) if miss_l_ts else np.empty(0, np.int64)
    a_corr = np.full(missing.shape[0], -1, dtype=np.int64)
    for _, cols in flows.blocks("ph", "cat", "id", "thread", "ts"):
        is_launch_flow = cls_of[cols["cat"]] == L.CLS_LAUNCH_FLOW
        for ph, found, thread, t in ((ord("f"), a_corr, a_thread, a_ts),
                                     (ord("s"), l_corr, l_thread, l_ts)):
            sel = is_launch_flow & (cols["ph"] == ph)
            todo = np.flatnonzero(found < 0)
            if todo.size == 0 or not sel.any():
                continue
            hit = match_flows(cols["id"][sel], cols["thread"][sel].astype(np.int64),
                              cols["ts"][sel], thread[todo], t[todo])
            found[todo] = hit
    store.scatter(corr, missing, a_corr)
    return l_rows, l_corr, int((a_corr >= 0).sum() + (l_corr >= 0).sum())


def _correlation_join(launch, corr, ts_of, fix_rows, fix_corr, scanned, work_bytes, rdt,
                      store: InMemory):
    """Launch row per activity (-1: none; ``rdt``), and how many activities have an id
    without a launch and with several launches; hash-partitioned. ``ts_of(positions)``
    gives activities' start times (needed only where an id has several launches); the
    activities' ids are read a ``store`` slice at a time."""
    n_parts = max(1, math.ceil((len(launch) * _CORR_BYTES_PER_ROW
                                + corr.shape[0] * _CORR_QUERY_BYTES_PER_ROW)
                               / max(work_bytes, 1)))
    parts = Parts(n_parts, ("corr", "ts", "row"), scanned.budget, work_bytes // 4)
    fix_order = np.argsort(fix_rows)
    fix_rows_s, fix_corr_s = fix_rows[fix_order], fix_corr[fix_order]
    for start, cols in launch.blocks("correlation", "ts"):
        c = cols["correlation"].astype(np.int64)
        m = np.flatnonzero(c < 0)
        pos = find_sorted(fix_rows_s, start + m)
        c[m[pos >= 0]] = fix_corr_s[pos[pos >= 0]]
        keep = np.flatnonzero(c >= 0)
        parts.add(c[keep] % n_parts, {"corr": c[keep], "ts": cols["ts"][keep],
                                      "row": start + keep})
    launch_row = store.full(corr.shape[0], -1, rdt)
    no_launch = several = 0
    part_of = None
    if n_parts > 1:  # one byte per activity where the parts are few
        part_of = np.empty(corr.shape[0], dtype=np.int8 if n_parts < 128 else np.int32)
        for lo, hi in store.slices(corr.shape[0]):
            c = corr[lo:hi]
            part_of[lo:hi] = np.where(c >= 0, c % n_parts, -1)
    for p in range(n_parts):
        sel = (store.positions(corr, lambda v: v >= 0) if part_of is None
               else store.positions(part_of, lambda v: v == p))
        keys = store.take(corr, sel)
        if sel.size == 0:
            continue
        got = parts.get(p)
        if got["row"].size == 0:
            no_launch += sel.size
            continue
        r, k = match_by_key(keys, got["corr"], lambda j: ts_of(sel[j]), got["ts"])
        del keys
        store.scatter(launch_row, sel, np.where(r >= 0, got["row"][np.maximum(r, 0)], -1))
        no_launch += int((k == 0).sum())
        several += int((k > 1).sum())
    return launch_row, no_launch, several


@dataclass
class SpanQuery:
    """Innermost span per launch among ops whose ``field`` (cat or name id) is selected."""

    field: str
    select: np.ndarray  # per-string lookup (see :func:`link`)
    count: int = 0
    hist: np.ndarray | None = None
    result: np.ndarray | None = None  # ops row per launch (-1: none)


def _ops_spans(ops, queries: list[SpanQuery], step_number, is_rpc, small: np.ndarray,
               scanned, work_bytes):
    """One pass over the ops: each query's spans split into time buckets (its plan:
    bucket edges and the :class:`Parts`; :func:`_sweep_spans` answers it), plus the step
    spans, the record_param_comms ops and the ``small`` named spans (in memory). Reads
    the ops store only (it runs beside the correlation join)."""
    lo, hi = ops.ts_range()
    grid = np.linspace(lo, hi + 1, 4097).astype(np.int64)
    for q in queries:
        q.hist = np.zeros(4096, dtype=np.int64)
    collect: dict[str, dict[str, list]] = {
               "steps": {"ts": [], "dur": [], "number": [], "thread": []},
               "rpc": {"ts": [], "dur": [], "thread": [], "row": []},
               "small": {"ts": [], "dur": [], "thread": [], "name": []}}
    for start, cols in ops.blocks("ts", "dur", "thread", "cat", "name"):
        for q in queries:
            sel = q.select[cols[q.field]]
            q.count += int(sel.sum())
            q.hist += grid_counts(cols["ts"][sel], grid)
        num = step_number[cols["name"]]
        st = np.flatnonzero(num >= 0)
        collect["steps"]["ts"].append(cols["ts"][st])
        collect["steps"]["dur"].append(cols["dur"][st])
        collect["steps"]["number"].append(num[st])
        collect["steps"]["thread"].append(cols["thread"][st].astype(np.int64))
        for key, pick in (("rpc", is_rpc), ("small", small)):
            rows = np.flatnonzero(pick[cols["name"]])
            for f in ("ts", "dur", "thread"):
                collect[key][f].append(cols[f][rows].astype(np.int64))
            collect[key]["row" if key == "rpc" else "name"].append(
                start + rows if key == "rpc" else cols["name"][rows].astype(np.int64))
    found = {key: {k: np.concatenate(v) if v else np.empty(0, np.int64) for k, v in d.items()}
             for key, d in collect.items()}
    per_bucket = max(1, work_bytes // _SPAN_BYTES_PER_ROW)
    plans = []
    for q in queries:
        edges = (np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max])
                 if q.count <= per_bucket or q.hist is None
                 else bucket_edges(q.hist, grid, per_bucket))
        plans.append((edges, Parts(edges.shape[0] - 1, ("ts", "end", "thread", "row"),
                                   scanned.budget, work_bytes // 8)))
    for start, cols in ops.blocks("ts", "dur", "thread", "cat", "name"):
        for q, (edges, parts) in zip(queries, plans):
            sel = np.flatnonzero(q.select[cols[q.field]])
            t = cols["ts"][sel]
            parts.add(np.searchsorted(edges, t, side="right") - 1,
                      {"ts": t, "end": t + np.maximum(cols["dur"][sel], 0),
                       "thread": cols["thread"][sel], "row": start + sel})
    return plans, found["steps"], found["rpc"], found["small"]


def grid_counts(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``np.histogram(values, bins=grid)[0]`` (int64; ``grid`` ascending, bins
    ``[grid[k], grid[k+1])``, the last one closed, values outside dropped) without the
    sort np.histogram runs on every call with explicit bins (a fifth of a pass over the
    ops)."""
    bins = grid.shape[0] - 1
    at = np.searchsorted(grid, values, side="right") - 1
    at[values == grid[-1]] = bins - 1
    return np.bincount(at[(at >= 0) & (at < bins)], minlength=bins)


def _sweep_spans(queries: list[SpanQuery], plans, q_ts, q_thread, work_bytes, rdt,
                 store: InMemory) -> None:
    """Answer every query (its innermost span around each launch, ops rows as ``rdt``)
    from its plan (:func:`_ops_spans`); in memory, the queries on both cores."""
    def answer(q: SpanQuery, plan) -> None:
        edges, parts = plan
        q.result = _bucketed_sweep(edges, parts, q_ts, q_thread, rdt, store,
                                   max(1024, work_bytes // 4 // _QUERY_BYTES_PER_ROW))

    if store.parks:  # one at a time: the pages of parked arrays are handed back between
        for q, plan in zip(queries, plans):
            answer(q, plan)
        return
    with ThreadPoolExecutor(len(queries)) as pool:
        for done in [pool.submit(answer, q, plan) for q, plan in zip(queries, plans)]:
            done.result()


def _bucketed_sweep(edges, parts: Parts, q_ts, q_thread, rdt, store: InMemory,
                    query_rows: int) -> np.ndarray:
    """Innermost span (its ``row``, as ``rdt``) per query point, bucket by bucket
    (bucket b holds ``edges[b] <= ts < edges[b+1]``); spans still open at a bucket's end
    are carried into the next one. Queries are taken ``query_rows`` positions at a time,
    so their sort keys and results never span the whole trace."""
    out = store.full(q_ts.shape[0], -1, rdt)
    carried = {f: np.empty(0, np.int64) for f in ("ts", "end", "thread", "row")}
    n_buckets = edges.shape[0] - 1
    for b in range(n_buckets):
        got = parts.get(b)
        spans = got if b == 0 else {f: np.concatenate([carried[f], got[f]]) for f in carried}
        del got
        if spans["row"].size:
            dur = spans["end"] - spans["ts"]
            for lo in range(0, q_ts.shape[0], query_rows):
                hi = lo + query_rows
                mine = q_thread[lo:hi] >= 0
                if n_buckets > 1:
                    mine &= (q_ts[lo:hi] >= edges[b]) & (q_ts[lo:hi] < edges[b + 1])
                qsel = lo + np.flatnonzero(mine)
                if qsel.size:
                    r = innermost_enclosing(spans["ts"], dur, spans["thread"], q_ts[qsel],
                                            q_thread[qsel], span_key=spans["row"])
                    out[qsel] = np.where(r >= 0, spans["row"][np.maximum(r, 0)], -1)
                store.release()
            del dur
        if b + 1 < n_buckets:
            still_open = spans["end"] > edges[b + 1]
            carried = {f: v[still_open] for f, v in spans.items()}
    return out


def _comm_rows(scanned, rows, cls, rpc, launch_ts, launch_thread, rdt, store: InMemory):
    """Per activity: the comm-store entry (as ``rdt``) of its own args, else (kernels
    only) of the record_param_comms around its launch; and whether a kernel's launch is
    inside a record_param_comms (the trace's own statement that the kernel is a
    collective, whatever its name, with or without metadata); and per record_param_comms
    op (``rpc``'s order) whether a launch is inside it. Activities are taken
    :data:`QUERY_SLICE` at a time (a ``store`` slice when it parks them), so the
    temporaries never span the trace."""
    n = rows.shape[0]
    out = store.full(n, -1, rdt)
    in_rpc = store.full(n, False, bool)
    encloses = np.zeros(rpc["row"].shape[0], dtype=bool)
    comm = scanned.stores["comm"]
    cstore, crow = comm.column("store"), comm.column("row")
    # comm entries by the store row they describe: the GPU event's own, or its op's
    own, on_ops = (_by_row(crow, np.flatnonzero(cstore == s)) for s in (L.GPU, L.OPS))
    ranges = store.slices(n) if store.parks else (
        (lo, min(lo + QUERY_SLICE, n)) for lo in range(0, n, QUERY_SLICE))
    for lo, hi in ranges:
        pos = find_sorted(own[0], rows[lo:hi])
        mine = np.flatnonzero(pos >= 0)
        out[lo + mine] = own[1][pos[mine]]
        launched = lo + np.flatnonzero((cls[lo:hi] == L.CLS_KERNEL)
                                       & (launch_thread[lo:hi] >= 0))
        if not (rpc["row"].size and launched.size):
            continue
        found = innermost_enclosing(rpc["ts"], rpc["dur"], rpc["thread"], launch_ts[launched],
                                    launch_thread[launched], span_key=rpc["row"])
        in_rpc[launched] = found >= 0
        encloses[found[found >= 0]] = True
        need = np.flatnonzero((out[launched] < 0) & (found >= 0))
        entry = find_sorted(on_ops[0], rpc["row"][found[need]])
        hit = entry >= 0
        out[launched[need[hit]]] = on_ops[1][entry[hit]]
    return out, in_rpc, encloses


def coalescing_blocks(scanned, is_transfer: np.ndarray, rpc: dict, encloses: np.ndarray,
                      annotations: dict, cls: np.ndarray, launch_ts: np.ndarray,
                      launch_thread: np.ndarray, in_rpc: np.ndarray, store: InMemory
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The ops of each coalesced collective's kernel: ``(activity positions, comm-store
    entries)``, one pair per op, by activity and then the op's start.

    PyTorch's ``batch_isend_irecv`` (Megatron's and ``torch.distributed.pipelining``'s
    pipeline sends / receives) and ``_coalescing_manager`` (coalesced all-gathers /
    reduce-scatters) record one ``record_param_comms`` per op with its metadata, but the
    ops launch nothing: NCCL launches one kernel for the whole block when it ends, inside
    a ``nccl:coalesced`` annotation (``annotations``), and the kernel carries no args.
    A kernel launched inside such an annotation (and inside no ``record_param_comms``:
    ``in_rpc``) takes the ``record_param_comms`` ops of its launching thread that began
    after the thread's previous launch of a device activity and ended by its own launch,
    that launched nothing themselves (``encloses``) and name a collective that moves
    data (``is_transfer`` by ``Collective name``: a ``wait`` is none)."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if not (annotations["ts"].size and rpc["row"].size):
        return none
    comm = scanned.stores["comm"]
    cstore, crow = comm.column("store"), comm.column("row")
    op_rows, op_entries = _by_row(crow, np.flatnonzero(cstore == L.OPS))
    entry = find_sorted(op_rows, rpc["row"])
    coll = np.where(entry >= 0, comm.column("collective")[np.maximum(entry, 0)], -1)
    usable = np.flatnonzero((entry >= 0) & ~encloses & is_transfer[coll])
    if not usable.size:
        return none
    # the kernels launched inside a coalesced annotation, outside every record_param_comms
    # (a slice of activities at a time: they are few)
    found = []
    for lo, hi in store.slices(cls.shape[0]):
        k = lo + np.flatnonzero((cls[lo:hi] == L.CLS_KERNEL) & (launch_thread[lo:hi] >= 0)
                                & ~in_rpc[lo:hi])
        inside = _inside(annotations["ts"], annotations["dur"], annotations["thread"],
                         launch_ts[k], launch_thread[k].astype(np.int64))
        found.append(k[inside])
    cand = np.concatenate(found) if found else np.zeros(0, np.int64)
    if not cand.size:
        return none
    c_ts, c_th = launch_ts[cand], launch_thread[cand].astype(np.int64)
    order = by_thread_then_time(c_th, c_ts)
    cand, c_ts, c_th = cand[order], c_ts[order], c_th[order]
    previous = _previous_launch(c_ts, c_th, launch_ts, launch_thread, store)
    r_ts, r_th = rpc["ts"][usable], rpc["thread"][usable]
    r_end = r_ts + np.maximum(rpc["dur"][usable], 0)
    r_order = by_thread_then_time(r_th, r_ts)
    usable, r_ts, r_th, r_end = usable[r_order], r_ts[r_order], r_th[r_order], r_end[r_order]
    acts, entries = [], []
    for th in np.unique(c_th).tolist():
        lo_t, hi_t = np.searchsorted(r_th, [th, th + 1])
        mine = np.flatnonzero(c_th == th)
        first = lo_t + np.searchsorted(r_ts[lo_t:hi_t], previous[mine], side="right")
        last = lo_t + np.searchsorted(r_ts[lo_t:hi_t], c_ts[mine], side="right")
        counts = last - first
        k = np.repeat(mine, counts)
        ops = (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
               + np.repeat(first, counts))
        keep = r_end[ops] <= c_ts[k]
        acts.append(cand[k[keep]])
        entries.append(op_entries[entry[usable[ops[keep]]]])
    act = np.concatenate(acts).astype(np.int64)
    ent = np.concatenate(entries).astype(np.int64)
    order = np.argsort(act, kind="stable")  # ops of one kernel stay in time order
    return act[order], ent[order]


def _previous_launch(c_ts: np.ndarray, c_th: np.ndarray, launch_ts: np.ndarray,
                     launch_thread: np.ndarray, store: InMemory) -> np.ndarray:
    """Per query launch (``c_ts`` / ``c_th``, ordered by thread then time): the latest
    start of a device activity's launch on its thread before it (int64 min: none). One
    pass over the activities' launches, a ``store`` slice at a time."""
    out = np.full(c_ts.shape[0], np.iinfo(np.int64).min)
    threads = np.unique(c_th)
    for lo, hi in store.slices(launch_ts.shape[0]):
        t, th = launch_ts[lo:hi], launch_thread[lo:hi]
        for thread in threads.tolist():
            mine = np.flatnonzero(c_th == thread)
            sel = t[(th == thread) & (t >= 0)]
            if not sel.size:
                continue
            # a launch at t precedes every query launched after it: the running maximum
            # over the queries (ascending) of the latest launch placed at each
            at = np.searchsorted(c_ts[mine], sel, side="right")
            keep = at < mine.shape[0]
            best = np.full(mine.shape[0], np.iinfo(np.int64).min)
            np.maximum.at(best, at[keep], sel[keep])
            out[mine] = np.maximum(out[mine], np.maximum.accumulate(best))
    return out


def _by_row(crow: np.ndarray, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(store rows ascending, the comm entries describing them) for ``entries``."""
    order = np.argsort(crow[entries], kind="stable")
    return crow[entries][order], entries[order]
