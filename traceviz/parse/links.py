"""Link every GPU activity to its launch, enclosing cpu_op, step and collective metadata.

Memory stays bounded by ``work_bytes`` whatever the trace size: stores are read block by
block, and the two big joins run on parts that fit in memory:

* activity <-> launch by correlation id: a partitioned hash join (part = id mod P);
* launch -> innermost enclosing cpu_op on its thread: a sweep over time buckets; ops
  still open at a bucket's end are carried into the next bucket, so an op spanning many
  buckets is found from every one of them.

With P = 1 (the usual case) both are plain in-memory joins. Results are per-activity
arrays (the compact columns the output is built from).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import layout as L
from .join import find_sorted, innermost_enclosing, match_by_key, match_flows, step_of
from .partition import Parts, bucket_edges
from .reader import ScannedTrace

# working-set bytes per row of the in-memory joins (keys, sort order, scratch)
_CORR_BYTES_PER_ROW = 64
_SPAN_BYTES_PER_ROW = 80


def row_dtype(scanned: ScannedTrace) -> type:
    """int32 for row numbers while every store has fewer than 2**31 rows, else int64."""
    biggest = max((len(store) for store in scanned.stores.values()), default=0)
    return np.int32 if biggest < np.iinfo(np.int32).max else np.int64


@dataclass
class Links:
    """Per-activity results, all aligned with ``rows`` (GPU-store rows, ascending)."""

    # row numbers are row_dtype (int32 unless a store is huge); times and ids int64
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


def activity_rows(scanned: ScannedTrace, cls_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU-store rows that are activities, and their category classes."""
    rows, classes = [], []
    for start, cols in scanned.stores["gpu"].blocks("cat"):
        c = cls_of[cols["cat"]]
        keep = np.flatnonzero(np.isin(c, L.ACTIVITY_CLASSES))
        rows.append(start + keep)
        classes.append(c[keep])
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int8)
    return np.concatenate(rows).astype(np.int64), np.concatenate(classes)


def link(scanned: ScannedTrace, cls_of: np.ndarray, step_number: np.ndarray,
         is_rpc: np.ndarray, is_comm_name: np.ndarray, work_bytes: int) -> Links:
    """Compute :class:`Links`.

    The array arguments are per-string lookups (one entry per string id plus a last
    entry for id -1): the category class, the ProfilerStep number (-1: not a step name),
    whether a name is ``record_param_comms``, whether a kernel name is COMM.
    """
    gpu, launch, ops = (scanned.stores[k] for k in ("gpu", "launch", "ops"))
    rows, cls = activity_rows(scanned, cls_of)
    g = gpu.gatherer(rows)
    corr = np.maximum(g("correlation"), -1)  # any negative id is absent
    ts = g("ts")
    stats: dict[str, int] = {"activities": int(rows.shape[0])}

    launch_fix_rows, launch_fix_corr, from_flows = _flow_fallback(
        scanned, cls_of, corr, rows, work_bytes)
    stats["correlation from flow events"] = from_flows
    launch_row, count = _correlation_join(launch, corr, ts, launch_fix_rows, launch_fix_corr,
                                          scanned, work_bytes)
    has_launch = launch_row >= 0
    stats.update({
        "launched": int(has_launch.sum()),
        "no correlation id": int((corr < 0).sum()),
        "correlation without launch": int(((corr >= 0) & (count == 0)).sum()),
        "correlation with several launches (one kept)": int((count > 1).sum()),
    })
    del count
    lg = launch.gatherer(launch_row)
    launch_ts = lg("ts")
    launch_thread = lg("thread").astype(np.int64)
    del lg

    op_row, steps, rpc = _ops_pass(ops, cls_of, step_number, is_rpc, launch_ts,
                                   launch_thread, scanned, work_bytes)
    stats["launch inside a cpu_op"] = int((op_row >= 0).sum())
    at = np.where(has_launch, launch_ts, ts)
    iteration = step_of(at, steps["ts"], steps["dur"], steps["number"])
    comm_row = _comm_rows(scanned, rows, is_comm_name[g("name")], rpc,
                          launch_ts, launch_thread)
    rdt = row_dtype(scanned)
    rows, launch_row, op_row, comm_row = (a.astype(rdt) for a in (rows, launch_row, op_row,
                                                                 comm_row))
    launch_thread = launch_thread.astype(np.int32)
    stats["collective metadata"] = int((comm_row >= 0).sum())
    step_list = [{"iteration": int(n), "ts": int(t), "dur": int(d)} for t, d, n in sorted(
        zip(steps["ts"].tolist(), steps["dur"].tolist(), steps["number"].tolist()))]
    return Links(rows=rows, cls=cls, corr=corr, launch_row=launch_row, launch_ts=launch_ts,
                 launch_thread=launch_thread, op_row=op_row, iteration=iteration,
                 comm_row=comm_row, steps=step_list, stats=stats)


def _flow_fallback(scanned, cls_of, corr, rows, work_bytes):
    """Correlation ids from launch-flow endpoints for activities and launches lacking one.

    Fills ``corr`` in place; returns (launch rows lacking one, their ids, count filled).
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
    missing = np.flatnonzero(corr < 0)
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
    corr[missing] = a_corr
    return l_rows, l_corr, int((a_corr >= 0).sum() + (l_corr >= 0).sum())


def _correlation_join(launch, corr, ts, fix_rows, fix_corr, scanned, work_bytes):
    """(launch row, number of launches with the id) per activity; hash-partitioned."""
    n_parts = max(1, math.ceil(len(launch) * _CORR_BYTES_PER_ROW / max(work_bytes, 1)))
    parts = Parts(n_parts, ("corr", "ts", "row"), scanned.budget)
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
    launch_row = np.full(corr.shape[0], -1, dtype=np.int64)
    count = np.zeros(corr.shape[0], dtype=np.int64)
    has = corr >= 0
    part_of = np.where(has, corr % n_parts, -1)
    for p in range(n_parts):
        sel = np.flatnonzero(part_of == p)
        got = parts.get(p)
        if sel.size == 0 or got["row"].size == 0:
            continue
        r, k = match_by_key(corr[sel], got["corr"], ts[sel], got["ts"])
        launch_row[sel] = np.where(r >= 0, got["row"][np.maximum(r, 0)], -1)
        count[sel] = k
    return launch_row, count


def _ops_pass(ops, cls_of, step_number, is_rpc, q_ts, q_thread, scanned, work_bytes):
    """Innermost cpu_op around each launch; also the step spans and record_param_comms."""
    is_span = cls_of == L.CLS_CPU_OP
    n_span = 0
    hist_lo, hist_hi = ops.ts_range()
    grid = np.linspace(hist_lo, hist_hi + 1, 4097).astype(np.int64)
    hist = np.zeros(4096, dtype=np.int64)
    steps = {"ts": [], "dur": [], "number": []}
    rpc = {"ts": [], "dur": [], "thread": [], "row": []}
    for start, cols in ops.blocks("ts", "dur", "thread", "cat", "name"):
        span = is_span[cols["cat"]]
        n_span += int(span.sum())
        hist += np.histogram(cols["ts"][span], bins=grid)[0]
        num = step_number[cols["name"]]
        st = np.flatnonzero(num >= 0)
        steps["ts"].append(cols["ts"][st])
        steps["dur"].append(cols["dur"][st])
        steps["number"].append(num[st])
        rp = np.flatnonzero(is_rpc[cols["name"]])
        for f in ("ts", "dur", "thread"):
            rpc[f].append(cols[f][rp].astype(np.int64))
        rpc["row"].append(start + rp)
    steps = {k: np.concatenate(v) if v else np.empty(0, np.int64) for k, v in steps.items()}
    rpc = {k: np.concatenate(v) if v else np.empty(0, np.int64) for k, v in rpc.items()}
    per_bucket = max(1, work_bytes // _SPAN_BYTES_PER_ROW)
    edges = (np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max])
             if n_span <= per_bucket else bucket_edges(hist, grid, per_bucket))
    n_buckets = edges.shape[0] - 1
    parts = Parts(n_buckets, ("ts", "end", "thread", "row"), scanned.budget)
    for start, cols in ops.blocks("ts", "dur", "thread", "cat"):
        sel = np.flatnonzero(is_span[cols["cat"]])
        t = cols["ts"][sel]
        parts.add(np.searchsorted(edges, t, side="right") - 1,
                  {"ts": t, "end": t + np.maximum(cols["dur"][sel], 0),
                   "thread": cols["thread"][sel], "row": start + sel})
    op_row = np.full(q_ts.shape[0], -1, dtype=np.int64)
    q_bucket = np.searchsorted(edges, q_ts, side="right") - 1
    carried = {f: np.empty(0, np.int64) for f in ("ts", "end", "thread", "row")}
    for b in range(n_buckets):
        got = parts.get(b)
        spans = got if b == 0 else {f: np.concatenate([carried[f], got[f]]) for f in carried}
        qsel = np.flatnonzero((q_bucket == b) & (q_thread >= 0))
        if qsel.size and spans["row"].size:
            r = innermost_enclosing(spans["ts"], spans["end"] - spans["ts"], spans["thread"],
                                    q_ts[qsel], q_thread[qsel], span_key=spans["row"])
            op_row[qsel] = np.where(r >= 0, spans["row"][np.maximum(r, 0)], -1)
        if b + 1 < n_buckets:
            still_open = spans["end"] > edges[b + 1]
            carried = {f: v[still_open] for f, v in spans.items()}
    return op_row, steps, rpc


def _comm_rows(scanned, rows, is_comm, rpc, launch_ts, launch_thread):
    """Comm-store entry per activity: its own args, else the record_param_comms around
    its launch (only for COMM activities)."""
    comm = scanned.stores["comm"]
    out = np.full(rows.shape[0], -1, dtype=np.int64)
    if len(comm) == 0:
        return out
    cstore = comm.column("store")
    crow = comm.column("row")
    own = np.flatnonzero(cstore == L.GPU)
    pos = find_sorted(rows, crow[own])
    out[pos[pos >= 0]] = own[pos >= 0]
    need = np.flatnonzero((out < 0) & is_comm & (launch_thread >= 0))
    on_ops = np.flatnonzero(cstore == L.OPS)
    if need.size == 0 or rpc["row"].size == 0 or on_ops.size == 0:
        return out
    order = np.argsort(crow[on_ops])
    found = innermost_enclosing(rpc["ts"], rpc["dur"], rpc["thread"], launch_ts[need],
                                launch_thread[need], span_key=rpc["row"])
    ok = found >= 0
    entry = find_sorted(crow[on_ops][order], rpc["row"][found[ok]])
    out[need[ok][entry >= 0]] = on_ops[order][entry[entry >= 0]]
    return out
