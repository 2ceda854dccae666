"""Split rows into parts small enough to process in memory (external-memory joins).

:class:`Parts` collects rows of a few int64 columns into ``n`` parts. Each part buffers
in memory and is appended to its own files when the buffer fills, so building parts
holds at most about ``buffer_bytes``. :func:`bucket_edges` picks time boundaries that
give each time bucket about the same number of rows.
"""
from __future__ import annotations

import os

import numpy as np

from .columns import SpillBudget


class Parts:
    """Rows of ``fields`` (int64 columns) split into ``n`` parts."""

    def __init__(self, n: int, fields: tuple[str, ...], budget: SpillBudget,
                 buffer_bytes: int = 16 << 20) -> None:
        """``buffer_bytes``: rows buffered in memory by all parts together before they
        are appended to the parts' files (at least 1024 rows per part)."""
        self.n = n
        self.fields = fields
        self.flush_rows = max(1024, buffer_bytes // (n * len(fields) * 8))
        self._buf: list[dict[str, list[np.ndarray]]] = [{f: [] for f in fields}
                                                         for _ in range(n)]
        self._rows = [0] * n
        self._path = budget.new_path("p") if n > 1 else None
        if self._path:
            os.mkdir(self._path)

    def add(self, part: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        """Append rows; ``part[i]`` is the part of row ``i``."""
        if self.n == 1:
            for f in self.fields:
                self._buf[0][f].append(np.asarray(columns[f], dtype=np.int64))
            return
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(self.n + 1))
        for p in range(self.n):
            lo, hi = bounds[p], bounds[p + 1]
            if lo == hi:
                continue
            rows = order[lo:hi]
            for f in self.fields:
                self._buf[p][f].append(np.asarray(columns[f][rows], dtype=np.int64))
            self._rows[p] += hi - lo
            if self._rows[p] >= self.flush_rows:
                self._flush(p)

    def _flush(self, p: int) -> None:
        assert self._path is not None  # flushing: the spill folder exists
        for f in self.fields:
            if self._buf[p][f]:
                with open(os.path.join(self._path, f"{p}.{f}"), "ab") as fh:
                    np.concatenate(self._buf[p][f]).tofile(fh)
                self._buf[p][f] = []
        self._rows[p] = 0

    def get(self, p: int) -> dict[str, np.ndarray]:
        """All rows of part ``p`` (in the order they were added)."""
        out = {}
        for f in self.fields:
            parts = []
            if self._path:
                name = os.path.join(self._path, f"{p}.{f}")
                if os.path.exists(name):
                    parts.append(np.fromfile(name, dtype=np.int64))
            parts.extend(self._buf[p][f])
            out[f] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return out


def bucket_edges(histogram: np.ndarray, grid: np.ndarray, rows_per_bucket: int) -> np.ndarray:
    """Bucket boundaries (ascending, first -inf, last +inf) from a fine histogram.

    ``histogram[i]`` counts rows with ``grid[i] <= ts < grid[i+1]``. Consecutive bins are
    merged until a bucket holds about ``rows_per_bucket`` rows.
    """
    edges = [np.iinfo(np.int64).min]
    acc = 0
    for i, count in enumerate(histogram.tolist()):
        if acc and acc + count > rows_per_bucket:
            edges.append(int(grid[i]))
            acc = 0
        acc += count
    edges.append(np.iinfo(np.int64).max)
    return np.asarray(edges, dtype=np.int64)
