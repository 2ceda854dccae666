"""Time by precedence: each instant goes to the most important interval open at it.

Intervals carry a *level* (0 is the most important); per group key, every instant at
which at least one interval is open is counted once, for the lowest level open at it.
The per-level times of a group therefore add up to the length of the union of its
intervals: a partition of covered time, as a time ledger needs.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .core import next_endpoint


@nb.njit(cache=True, nogil=True)
def _sweep(starts, ends, levels, keys, by_start, by_end, n_keys, n_levels):
    """Per (key, level): the time during which ``level`` is the lowest open level; the
    endpoints in (key, time) order (:func:`.core.next_endpoint`: those at one time all
    apply before the next segment)."""
    out = np.zeros((n_keys, n_levels), dtype=np.int64)
    count = np.zeros(n_levels, dtype=np.int64)
    n = starts.shape[0]
    top = n_levels  # lowest open level; n_levels: none open
    prev_t = 0
    prev_key = -1
    i = j = 0
    while i < n or j < n:
        r, t, step, i, j = next_endpoint(starts, ends, keys, by_start, by_end, i, j)
        k = keys[r]
        if k != prev_key:  # a new group: nothing is open
            count[:] = 0
            top = n_levels
            prev_key = k
        elif t > prev_t and top < n_levels:
            out[k, top] += t - prev_t
        prev_t = t
        lv = levels[r]
        count[lv] += step
        if step > 0:
            if lv < top:
                top = lv
        elif lv == top and count[lv] == 0:
            while top < n_levels and count[top] == 0:
                top += 1
    return out


def grouped_top_times(starts: np.ndarray, ends: np.ndarray, levels: np.ndarray,
                      keys: np.ndarray, n_keys: int, n_levels: int) -> np.ndarray:
    """int64[n_keys, n_levels]: per group key, the time (ns) during which each level is
    the lowest level with an open interval (see the module doc). ``levels`` in
    [0, n_levels), ``keys`` in [0, n_keys); empty intervals count nothing."""
    starts, ends, levels, keys = (np.ascontiguousarray(a, dtype=np.int64)
                                  for a in (starts, ends, levels, keys))
    by_start = np.lexsort((starts, keys))
    by_end = np.lexsort((ends, keys))
    return _sweep(starts, ends, levels, keys, by_start, by_end, n_keys, n_levels)
