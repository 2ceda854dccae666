"""Lanes: intervals laid out on the fewest rows where no two of a row overlap (a Chrome /
Perfetto track draws overlapping slices only when one nests in the other)."""
from __future__ import annotations

import heapq

import numpy as np


def lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane (0, 1, ...) of every interval ``[start, end)``: in start order, each takes the
    lowest lane whose last interval has ended (touching is not overlapping), else a new
    one. That greedy uses the fewest lanes (the most intervals open at once)."""
    out = np.empty(start.shape[0], dtype=np.int64)
    busy: list[tuple[int, int]] = []   # (end, lane) of the lanes in use
    free: list[int] = []               # lanes whose interval has ended
    count = 0
    for i in np.argsort(start, kind="stable").tolist():
        s = int(start[i])
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        out[i] = lane
        heapq.heappush(busy, (int(end[i]), lane))
    return out
