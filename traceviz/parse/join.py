"""Joins over column arrays: GPU activity <-> launch, launch -> enclosing CPU op, step.

All functions take and return numpy arrays; times are int64 ns. Nothing here loops over
events in Python: matching uses sort + searchsorted, and interval containment is a
numba sweep per thread.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit


def find_sorted(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each of ``values`` in the ascending ``sorted_values`` (-1: absent)."""
    out = np.full(values.shape[0], -1, dtype=np.int64)
    if sorted_values.shape[0] == 0 or values.shape[0] == 0:
        return out
    pos = np.searchsorted(sorted_values, values)
    clipped = np.minimum(pos, sorted_values.shape[0] - 1)
    hit = (pos < sorted_values.shape[0]) & (sorted_values[clipped] == values)
    out[hit] = pos[hit]
    return out


def match_by_key(query: np.ndarray, key: np.ndarray,
                 query_ts: Callable[[np.ndarray], np.ndarray],
                 key_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each ``query`` value find the row of ``key`` with the same value.

    Returns ``(row, count)``: ``row`` is the matched index into ``key`` (-1 when there is
    none) and ``count`` how many rows of ``key`` carry the value. Negative values never
    match. When several rows match, the one that starts last at or before the query's
    time (``key_ts <= query_ts``) is taken, else the earliest: one row per query, never a
    duplicate (HTA duplicates such rows). ``query_ts(positions)`` gives the times of the
    queries at those positions; it is called only for such queries (usually none).
    """
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    left = np.searchsorted(sorted_key, query, side="left")
    right = np.searchsorted(sorted_key, query, side="right")
    count = (right - left).astype(np.int64)
    count[query < 0] = 0
    row = np.full(query.shape[0], -1, dtype=np.int64)
    single = count == 1
    row[single] = order[left[single]]
    multi = np.flatnonzero(count > 1)
    if multi.size:
        _pick_latest_before(multi, left, right, order, key_ts, query_ts(multi), row)
    return row, count


@njit(nogil=True, cache=True)
def _pick_latest_before(multi, left, right, order, key_ts, multi_ts, row):
    """``row[m]`` for each query ``m = multi[j]`` (time ``multi_ts[j]``)."""
    for j in range(multi.shape[0]):
        m = multi[j]
        best = -1
        best_ts = np.int64(0)
        for p in range(left[m], right[m]):
            r = order[p]
            t = key_ts[r]
            if t <= multi_ts[j] and (best < 0 or t > best_ts):
                best = r
                best_ts = t
        if best < 0:
            best = order[left[m]]
            for p in range(left[m], right[m]):
                if key_ts[order[p]] < key_ts[best]:
                    best = order[p]
        row[m] = best


def innermost_enclosing(span_ts: np.ndarray, span_dur: np.ndarray, span_thread: np.ndarray,
                        q_ts: np.ndarray, q_thread: np.ndarray,
                        span_key: np.ndarray | None = None) -> np.ndarray:
    """Row of the innermost span on the same thread whose ``[ts, ts+dur)`` holds ``q_ts``.

    Innermost = the latest-starting span that still contains the point; ties: the
    shortest, then the largest ``span_key`` (default: the later row). Returns -1 where
    no span contains the point. Points with a negative thread are never matched.
    """
    out = np.full(q_ts.shape[0], -1, dtype=np.int64)
    if span_ts.shape[0] == 0 or q_ts.shape[0] == 0:
        return out
    span_end = span_ts + np.maximum(span_dur, 0)
    if span_key is None:
        span_key = np.arange(span_ts.shape[0])
    s_order = np.lexsort((span_key, -span_end, span_ts, span_thread))
    q_order = np.lexsort((q_ts, q_thread))
    _sweep(span_ts, span_end, span_thread, s_order, q_ts, q_thread, q_order, out)
    return out


@njit(nogil=True, cache=True)
def _sweep(s_ts, s_end, s_thread, s_order, q_ts, q_thread, q_order, out):
    stack = np.empty(s_order.shape[0], dtype=np.int64)
    depth = 0
    sp = 0
    ns = s_order.shape[0]
    cur_thread = np.int64(-(1 << 62))
    for qi in range(q_order.shape[0]):
        q = q_order[qi]
        th = q_thread[q]
        if th < 0:
            continue
        t = q_ts[q]
        if th != cur_thread:
            cur_thread = th
            depth = 0
            while sp < ns and s_thread[s_order[sp]] < th:
                sp += 1
        while sp < ns and s_thread[s_order[sp]] == th and s_ts[s_order[sp]] <= t:
            r = s_order[sp]
            while depth > 0 and s_end[stack[depth - 1]] <= s_ts[r]:
                depth -= 1
            stack[depth] = r
            depth += 1
            sp += 1
        while depth > 0 and s_end[stack[depth - 1]] <= t:
            depth -= 1
        if depth > 0:
            out[q] = stack[depth - 1]


def step_of(t: np.ndarray, step_ts: np.ndarray, step_dur: np.ndarray,
            step_number: np.ndarray) -> np.ndarray:
    """Number of the step whose ``[ts, ts+dur)`` holds ``t`` (-1 outside every step).

    ProfilerStep#N spans follow each other; should they overlap, the innermost one
    (latest start, ties: shortest) wins, as in :func:`innermost_enclosing`.
    """
    zeros = np.zeros(step_ts.shape[0], dtype=np.int64)
    row = innermost_enclosing(step_ts, step_dur, zeros, t, np.zeros(t.shape[0], np.int64))
    out = np.full(t.shape[0], -1, dtype=np.int32)
    out[row >= 0] = step_number[row[row >= 0]]
    return out


def match_flows(flow_id: np.ndarray, flow_thread: np.ndarray, flow_ts: np.ndarray,
                ev_thread: np.ndarray, ev_ts: np.ndarray) -> np.ndarray:
    """Flow id bound to each event: a flow endpoint on the event's thread at its start.

    Kineto writes the endpoints of a launch flow (``ac2g``, and the older ``async`` /
    ``async_cpu_to_gpu``) at the start time of the runtime call and of the kernel, on
    their own tracks; the flow id equals the correlation id. Returns -1 where no flow
    endpoint sits on an event; of several, the first given wins.
    """
    out = np.full(ev_ts.shape[0], -1, dtype=np.int64)
    if flow_id.shape[0] == 0 or ev_ts.shape[0] == 0:
        return out
    f_order = np.lexsort((np.arange(flow_ts.shape[0]), flow_ts, flow_thread))
    f_thread = flow_thread[f_order]
    f_ts = flow_ts[f_order]
    for th in np.unique(ev_thread):
        lo, hi = np.searchsorted(f_thread, [th, th + 1])
        if lo == hi:
            continue
        rows = np.flatnonzero(ev_thread == th)
        pos = np.searchsorted(f_ts[lo:hi], ev_ts[rows]) + lo
        inside = pos < hi
        hit = np.zeros(rows.shape[0], dtype=bool)
        hit[inside] = f_ts[pos[inside]] == ev_ts[rows[inside]]
        out[rows[hit]] = flow_id[f_order[pos[hit]]]
    return out
