"""Union, measure, intersection and k-way sweeps of half-open int64 ns intervals.

Sorting is numpy's (C); the merges and sweeps are numba loops. Inputs are not modified.
Category bit masks: category ``c`` is bit ``1 << c``; a sweep's result entry ``m`` is the
time during which exactly the categories of mask ``m`` have at least one interval open
(entry 0, nothing open, is only counted between the first start and the last end).
"""
from __future__ import annotations

import numba as nb
import numpy as np

_I8 = np.int64


def _as_i8(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.ascontiguousarray(a, dtype=_I8) for a in arrays)


@nb.njit(cache=True, nogil=True)
def _merge_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = s.shape[0]
    out_s = np.empty(n, dtype=np.int64)
    out_e = np.empty(n, dtype=np.int64)
    k = -1
    for i in range(n):
        if k >= 0 and s[i] <= out_e[k]:  # overlaps or touches the current run
            if e[i] > out_e[k]:
                out_e[k] = e[i]
        else:
            k += 1
            out_s[k] = s[i]
            out_e[k] = e[i]
    return out_s[:k + 1], out_e[:k + 1]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[starts, ends)`` as sorted disjoint intervals (touching ones merged)."""
    starts, ends = _as_i8(starts, ends)
    order = np.argsort(starts, kind="stable")
    return _merge_sorted(starts[order], ends[order])


def measure(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length (ns) of the union of the intervals."""
    us, ue = union(starts, ends)
    return int((ue - us).sum())


@nb.njit(cache=True, nogil=True)
def _intersect(a_s, a_e, b_s, b_e):
    n = a_s.shape[0] + b_s.shape[0]
    out_s = np.empty(n, dtype=np.int64)
    out_e = np.empty(n, dtype=np.int64)
    i = j = k = 0
    while i < a_s.shape[0] and j < b_s.shape[0]:
        lo = max(a_s[i], b_s[j])
        hi = min(a_e[i], b_e[j])
        if lo < hi:
            out_s[k] = lo
            out_e[k] = hi
            k += 1
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return out_s[:k], out_e[:k]


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two unions (each as returned by :func:`union`)."""
    return _intersect(*_as_i8(a[0], a[1], b[0], b[1]))


def clip(starts: np.ndarray, ends: np.ndarray, windows: tuple[np.ndarray, np.ndarray]
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The parts of each interval inside ``windows`` (a :func:`union`): ``(index, start,
    end)`` with ``index`` the interval each part comes from, in input order; an interval
    crossing k windows gives k parts, one outside them all gives none."""
    starts, ends = _as_i8(starts, ends)
    w_s, w_e = _as_i8(*windows)
    first = np.searchsorted(w_e, starts, side="right")
    count = np.maximum(np.searchsorted(w_s, ends, side="left") - first, 0)
    index = np.repeat(np.arange(starts.shape[0]), count)
    offset = np.arange(index.shape[0]) - np.repeat(np.cumsum(count) - count, count)
    window = first[index] + offset
    lo = np.maximum(starts[index], w_s[window])
    hi = np.minimum(ends[index], w_e[window])
    keep = lo < hi
    return index[keep], lo[keep], hi[keep]


@nb.njit(cache=True, nogil=True, inline="always")
def next_endpoint(starts, ends, keys, by_start, by_end, i, j):
    """The next endpoint of a sweep in (key, time) order that merges the intervals'
    order by (key, start) ``by_start`` (at ``i``) and by (key, end) ``by_end`` (at
    ``j``), a start before an end at a tie: (interval, time, +1 start / -1 end, next i,
    next j)."""
    n = starts.shape[0]
    if i < n and (j >= n or keys[by_start[i]] < keys[by_end[j]] or (
            keys[by_start[i]] == keys[by_end[j]]
            and starts[by_start[i]] <= ends[by_end[j]])):
        return by_start[i], starts[by_start[i]], 1, i + 1, j
    return by_end[j], ends[by_end[j]], -1, i, j + 1


@nb.njit(cache=True, nogil=True)
def _sweep(starts, ends, cats, keys, by_start, by_end, n_keys, n_cats):
    """Accumulate time per (key, open-category mask) over every interval's two endpoints
    in (key, time) order: ``by_start`` / ``by_end`` order the intervals by (key, start) /
    (key, end), and the two orders are merged here (a start before an end at a tie; the
    endpoints at one time all apply before the next segment, so their order there does
    not change the result)."""
    out = np.zeros((n_keys, 1 << n_cats), dtype=np.int64)
    count = np.zeros(n_cats, dtype=np.int64)
    n = starts.shape[0]
    mask = 0
    prev_t = 0
    prev_key = -1
    i = j = 0
    while i < n or j < n:
        r, t, step, i, j = next_endpoint(starts, ends, keys, by_start, by_end, i, j)
        k = keys[r]
        if k != prev_key:  # a new group: nothing is open
            count[:] = 0
            mask = 0
            prev_key = k
        elif t > prev_t:
            out[k, mask] += t - prev_t
        prev_t = t
        c = cats[r]
        count[c] += step
        if count[c] > 0:
            mask |= 1 << c
        else:
            mask &= ~(1 << c)
    return out


def grouped_combination_times(starts: np.ndarray, ends: np.ndarray, cats: np.ndarray,
                              keys: np.ndarray, n_keys: int, n_cats: int) -> np.ndarray:
    """int64[n_keys, 2**n_cats]: per group key, the time (ns) spent in every combination
    of open categories (see the module doc; entry 0 is the idle time between the group's
    first start and last end). ``cats`` in [0, n_cats), ``keys`` in [0, n_keys). Besides
    the inputs it holds two sort orders (16 bytes per interval), not the endpoints."""
    if n_cats > 16:
        raise ValueError("at most 16 categories")
    starts, ends, cats, keys = _as_i8(starts, ends, cats, keys)
    by_start = np.lexsort((starts, keys))
    by_end = np.lexsort((ends, keys))
    return _sweep(starts, ends, cats, keys, by_start, by_end, n_keys, n_cats)


def combination_times(starts: np.ndarray, ends: np.ndarray, cats: np.ndarray,
                      n_cats: int) -> np.ndarray:
    """int64[2**n_cats]: :func:`grouped_combination_times` of a single group."""
    keys = np.zeros(np.shape(starts)[0], dtype=_I8)
    return grouped_combination_times(starts, ends, cats, keys, 1, n_cats)[0]


def grouped_measure(starts: np.ndarray, ends: np.ndarray, keys: np.ndarray,
                    n_keys: int) -> np.ndarray:
    """int64[n_keys]: the length of the union of each group's intervals."""
    cats = np.zeros(np.shape(starts)[0], dtype=_I8)
    return grouped_combination_times(starts, ends, cats, keys, n_keys, 1)[:, 1]


def grouped_span(starts: np.ndarray, ends: np.ndarray, keys: np.ndarray,
                 n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """(first start, last end) of each group; (int64 max, int64 min) for empty groups."""
    lo = np.full(n_keys, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_keys, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, keys, starts)
    np.maximum.at(hi, keys, ends)
    return lo, hi
