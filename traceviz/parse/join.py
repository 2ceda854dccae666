"""Joins over column arrays: GPU activity <-> launch (by key), flows to events.

Containment (launch -> enclosing CPU op, time -> step) is in
:mod:`traceviz.intervals.containment`.

All functions take and return numpy arrays; times are int64 ns. Nothing here loops over
events in Python: matching uses sort + searchsorted (numba only for the rare keys that
several rows share).
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
