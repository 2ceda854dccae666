"""Group the positions of an array by value interval, in linear time and little memory.

A counting sort: two passes over the values, no n-sized temporaries besides the result
(one int32 per grouped position, int64 past 2**31 values); ``np.argsort`` would make an
int64 order array and a sorted copy. Used to group GPU activities by store block and
by iteration.
"""
from __future__ import annotations

import numpy as np
from numba import njit


def group_positions(values: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, bounds)``: the positions ``i`` with ``values[i] >= 0``, grouped by
    the interval ``starts[k] <= values[i] < starts[k+1]`` they fall in (``starts``
    ascending, ``starts[0] <= min value``); group k's positions, ascending, are
    ``positions[bounds[k]:bounds[k+1]]``."""
    starts = np.asarray(starts, dtype=np.int64)
    bounds = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    positions = np.empty(int((values >= 0).sum()),
                         dtype=np.int32 if values.shape[0] < 2**31 else np.int64)
    if positions.shape[0]:
        lowest = np.min(values, where=values >= 0, initial=np.iinfo(values.dtype).max)
        if starts.shape[0] == 0 or lowest < starts[0]:
            raise ValueError("every value >= 0 must lie at or after starts[0]")
        _group(values, starts, positions, bounds)
    return positions, bounds


@njit(cache=True, nogil=True)
def _interval_of(starts: np.ndarray, value) -> int:
    """Index of the interval holding ``value``: the last start <= value."""
    lo, hi = 0, starts.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= value:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _group(values, starts, positions, bounds) -> None:
    for i in range(values.shape[0]):
        if values[i] >= 0:
            bounds[_interval_of(starts, values[i]) + 1] += 1
    for k in range(1, bounds.shape[0]):
        bounds[k] += bounds[k - 1]
    fill = bounds[:-1].copy()
    for i in range(values.shape[0]):
        if values[i] >= 0:
            k = _interval_of(starts, values[i])
            positions[fill[k]] = i
            fill[k] += 1
