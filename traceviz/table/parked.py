"""Where the per-activity arrays of a build live: in memory, or parked in files.

A parse of a trace with more GPU activities than its memory budget holds parks its
per-activity arrays (link results, classification facts and results): each is a file in
the trace's temporary folder, mapped into memory. Reading or writing part of it brings
only those pages in; :meth:`Parking.release` hands every parked page back to the
operating system (the data stays in the file, i.e. the page cache, as spilled blocks do),
so the build holds only what its current step touches. The files are unlinked as soon
as they are mapped: nothing is left behind, whatever ends the process; the mapping, and
with it the file, goes when the last array viewing it does.

:class:`InMemory` has the same methods and keeps ordinary arrays (traces that fit).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import weakref

import numpy as np

SLICE_ROWS = 1 << 20  # activities a parked step works on at a time
PARK_MIN_BYTES = 1 << 20  # smaller arrays stay in memory: a file each would cost more
FILL_ROWS = 1 << 16  # rows of a new parked array written at a time
TRIM_EVERY = 8  # releases per heap trim (a trim costs ~0.1 ms; steps free far less)
# ranks' tables read (or their results taken) one at a time between heap trims: each
# leaves free heap behind that glibc does not hand back by itself (a trim costs ~1 ms;
# breakdown at 4,096 ranks with a kept diagnosis, without: 4.2 GiB resident, 0.9 with)
RANKS_PER_TRIM = 64
# where the platform cannot drop a mapping's pages, they go when the kernel needs them
_DROP = getattr(mmap, "MADV_DONTNEED", None)


def release_free_memory() -> None:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``; a no-op where
    there is none). glibc keeps the memory of freed scan blocks and link arrays in its
    heap, and the parquet writer's buffers do not all fit in those holes: without this,
    writing a 4 GB trace's table added ~20 MB to the parse's peak."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


class InMemory:
    """Per-activity arrays as ordinary numpy arrays."""

    parks = False  # whether the arrays made here are parked in files
    parked_bytes = 0

    def full(self, n: int, value, dtype) -> np.ndarray:
        """A new array of ``n`` ``value``s."""
        return np.full(n, value, dtype=dtype)

    def release(self) -> None:
        """Nothing to release."""

    def slices(self, n: int):
        """``(lo, hi)`` ranges covering ``range(n)`` for work done a part at a time: one
        here."""
        yield 0, n

    def each(self, n: int, dtype, fn) -> np.ndarray:
        """An array of ``n`` ``dtype`` elements whose slice ``[lo, hi)`` is
        ``fn(lo, hi)``, made a slice at a time."""
        return np.asarray(fn(0, n), dtype=dtype)

    def map(self, dtype, fn, *arrays: np.ndarray) -> np.ndarray:
        """``fn(*arrays)`` as an array of ``dtype`` (elementwise: a slice of ``fn``'s
        result is ``fn`` of the arrays' slices), made a slice at a time (:meth:`each`)."""
        return self.each(arrays[0].shape[0], dtype,
                         lambda lo, hi: fn(*(a[lo:hi] for a in arrays)))

    def bincount(self, values: np.ndarray, minlength: int) -> np.ndarray:
        """``np.bincount(values, minlength=minlength)``, a slice at a time."""
        total = np.zeros(minlength, dtype=np.int64)
        for lo, hi in self.slices(values.shape[0]):
            counts = np.bincount(values[lo:hi], minlength=minlength)
            if counts.shape[0] > total.shape[0]:
                total = np.concatenate([total, np.zeros(counts.shape[0] - total.shape[0],
                                                        dtype=np.int64)])
            total[:counts.shape[0]] += counts
        return total

    def count(self, values: np.ndarray, test) -> int:
        """How many elements of ``values`` pass ``test`` (a function of an array slice
        giving booleans), a slice at a time."""
        return sum(int(np.count_nonzero(test(values[lo:hi])))
                   for lo, hi in self.slices(values.shape[0]))

    def positions(self, values: np.ndarray, test) -> np.ndarray:
        """The positions where ``test`` (a function of an array slice giving booleans)
        holds in ``values``, ascending, a slice at a time."""
        return np.concatenate([lo + np.flatnonzero(test(values[lo:hi]))
                               for lo, hi in self.slices(values.shape[0])])

    def unique(self, fn, *arrays: np.ndarray) -> np.ndarray:
        """The distinct values (sorted) of ``fn(*slices)`` over the arrays' slices: a
        few values out of many rows (iterations, threads, ids): each slice's are made
        distinct before they are joined, so no more than a slice's rows are held."""
        return np.unique(np.concatenate([np.unique(fn(*(a[lo:hi] for a in arrays)))
                                         for lo, hi in self.slices(arrays[0].shape[0])]))

    def take(self, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``values[positions]`` (``positions`` ascending), a slice of ``values`` at a
        time."""
        out = np.empty(positions.shape[0], dtype=values.dtype)
        for lo, hi in self.slices(values.shape[0]):
            a, b = np.searchsorted(positions, (lo, hi))
            out[a:b] = values[positions[a:b]]
        return out

    def scatter(self, out: np.ndarray, positions: np.ndarray, values) -> None:
        """``out[positions] = values`` (``positions`` ascending), a slice of ``out`` at a
        time."""
        values = np.broadcast_to(values, positions.shape)
        for lo, hi in self.slices(out.shape[0]):
            a, b = np.searchsorted(positions, (lo, hi))
            out[positions[a:b]] = values[a:b]


class Parking(InMemory):
    """Per-activity arrays in memory-mapped files of the trace's temporary folder (see the
    module doc)."""

    parks = True

    def __init__(self, new_path) -> None:
        """``new_path()``: a fresh file path in the trace's temporary folder."""
        self._new_path = new_path
        self.parked_bytes = 0  # written to parked files in all
        self._releases = 0
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()

    def _parked(self, dtype: np.dtype, n: int, parts) -> np.ndarray | None:
        """A parked array of ``n`` ``dtype`` elements written through the file from the
        arrays ``parts()`` yields in order (so none of it is resident here); None when
        too small to park."""
        size = n * dtype.itemsize
        if size == 0 or size < PARK_MIN_BYTES:
            return None
        path = self._new_path()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for part in parts():
                view = np.ascontiguousarray(part).data.cast("B")
                while view:
                    view = view[os.write(fd, view):]
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
            os.unlink(path)
        self._maps.add(mapped)
        self.parked_bytes += size
        return np.frombuffer(mapped, dtype=dtype)

    def each(self, n: int, dtype, fn) -> np.ndarray:
        dtype = np.dtype(dtype)

        def parts():  # the pages a slice's fn touched are released after it
            for lo, hi in self.slices(n):
                part = np.asarray(fn(lo, hi), dtype=dtype)
                assert part.shape == (hi - lo,)
                yield part

        out = self._parked(dtype, n, parts)
        return np.asarray(fn(0, n), dtype=dtype) if out is None else out

    def full(self, n: int, value, dtype) -> np.ndarray:
        unit = np.full(min(n, FILL_ROWS), value, dtype=dtype)

        def parts():
            for lo in range(0, n, FILL_ROWS):
                yield unit[:min(FILL_ROWS, n - lo)]

        out = self._parked(unit.dtype, n, parts)
        return np.full(n, value, dtype=dtype) if out is None else out

    def slices(self, n: int):
        """``(lo, hi)`` ranges of :data:`SLICE_ROWS` covering ``range(n)`` (one, empty,
        when ``n`` is 0); the parked pages a slice touched are released after it."""
        for lo in range(0, max(n, 1), SLICE_ROWS):
            yield lo, min(lo + SLICE_ROWS, n)
            self.release()

    def release(self) -> None:
        """Drop every parked page from this process (their contents stay in the files);
        every :data:`TRIM_EVERY` calls, the heap's free pages too."""
        if _DROP is not None:
            for mapped in list(self._maps):
                mapped.madvise(_DROP)
        self._releases += 1
        if self._releases % TRIM_EVERY == 0:
            release_free_memory()
