"""The decoded texts of a trace's strings, by string id, without a Python object each.

A trace can hold millions of distinct strings (a name per kernel, per call): as Python
``str`` in a list, each cost ~60 bytes besides its text, and the dict finding the first id
of each text ~70 more. Here the texts are UTF-8 bytes in one arena with their end
offsets (8 bytes per string), a 64-bit hash per string, and an open-addressing table
of ids keyed by those hashes (:mod:`.id_table`: hash -> first id, 4 bytes a slot at load
<= 1/2) gives each id its canonical id: the
first id with the same text (:meth:`TextStore.canonical`; a hash match is confirmed by
comparing the bytes). A text is decoded when asked for (``store[i]``, iteration).

The arena holds at most ``limit`` bytes in memory: past it, what it holds is appended to
a file (``new_path()``, unlinked as soon as it is open: nothing is left behind) and read
from there: a text with ``pread``, many at once from a read-only mapping dropped after
use, iteration a few MB at a time.
"""
from __future__ import annotations

import mmap
import os
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from numba import njit

from .id_table import fill, lookup_insert, new_table

READ_BYTES = 8 << 20  # bytes of texts iteration decodes at a time
SELECT_IDS = 1 << 16  # ids whose offsets iteration looks up at a time


@njit(cache=True, nogil=True, inline="always")
def _at(filed, mem, base, i):
    """Byte ``i`` of an arena whose first ``base`` bytes are ``filed`` (a mapping of its
    file), the rest ``mem``."""
    return filed[i] if i < base else mem[i - base]


@njit(cache=True, nogil=True)
def _same(fa, ma, base_a, ends_a, ia, fb, mb, base_b, ends_b, ib, out):
    """Whether text ``ia[k]`` of arena a equals text ``ib[k]`` of arena b."""
    for k in range(ia.shape[0]):
        a0 = ends_a[ia[k] - 1] if ia[k] else 0
        b0 = ends_b[ib[k] - 1] if ib[k] else 0
        n = ends_a[ia[k]] - a0
        same = n == ends_b[ib[k]] - b0
        i = 0
        while same and i < n:
            same = _at(fa, ma, base_a, a0 + i) == _at(fb, mb, base_b, b0 + i)
            i += 1
        out[k] = same


@njit(cache=True, nogil=True)
def _gather(filed, mem, base, starts, ends, out):
    """Copy the arena's bytes ``[starts[k], ends[k])`` one after the other into ``out``."""
    at = 0
    for k in range(starts.shape[0]):
        for i in range(starts[k], ends[k]):
            out[at] = _at(filed, mem, base, i)
            at += 1


def _hash(text: str) -> int:
    return hash(text)


class TextStore(Sequence[str]):
    """Texts by id (0, 1, ...): ``len``, ``store[i]``, iteration in id order."""

    def __init__(self, limit: int = 1 << 62,
                 new_path: Callable[[], str] | None = None) -> None:
        """``limit``: bytes of texts held in memory, past which they go to a file at
        ``new_path()`` (no limit without one)."""
        self._limit = limit if new_path is not None else 1 << 62
        self._new_path = new_path
        self._fd = -1
        self._base = 0  # bytes of the arena in the file; _data holds the rest
        self._data = bytearray()
        self._ends = array("q")   # end offset of each text in the arena
        self._keys = np.zeros((1, 1 << 10), dtype=np.int64)  # hash by id (the table's keys)
        self._canon = array("i")  # first id with the same text
        self._table: np.ndarray | None = new_table(0)  # hash -> first id (.id_table; seal)

    def __len__(self) -> int:
        return len(self._ends)

    def _span(self, i: int) -> tuple[int, int]:
        return (self._ends[i - 1] if i else 0), self._ends[i]

    def _spill(self) -> None:
        """Append the texts held in memory to the file."""
        if self._fd < 0:
            assert self._new_path is not None
            path = self._new_path()
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            os.unlink(path)
            weakref.finalize(self, os.close, self._fd)
        view = memoryview(self._data)
        while view:
            view = view[os.write(self._fd, view):]
        self._base += len(self._data)
        self._data = bytearray()

    def _read(self, a: int, b: int) -> bytes:
        """The arena's bytes ``[a, b)``."""
        if a >= self._base:
            return bytes(self._data[a - self._base:b - self._base])
        head = os.pread(self._fd, min(b, self._base) - a, a)
        return head + bytes(self._data[:max(b - self._base, 0)])

    def _views(self) -> tuple[np.ndarray, np.ndarray, mmap.mmap | None]:
        """(file part, memory part, the mapping to close once the views are dropped)."""
        mem = np.frombuffer(self._data, dtype=np.uint8)
        if not self._base:
            return np.zeros(1, dtype=np.uint8), mem, None
        mapped = mmap.mmap(self._fd, self._base, prot=mmap.PROT_READ)
        return np.frombuffer(mapped, dtype=np.uint8), mem, mapped

    def raw(self, i: int) -> bytes:
        """The UTF-8 bytes of text ``i``."""
        return self._read(*self._span(i))

    def __getitem__(self, i):  # type: ignore[override]  # ints only, no slices
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.raw(i % len(self)).decode()

    def __iter__(self) -> Iterator[str]:
        n = len(self)
        for lo in range(0, n, SELECT_IDS):
            yield from self._decoded(np.arange(lo, min(lo + SELECT_IDS, n)))

    def select(self, ids: np.ndarray) -> Iterator[str]:
        """The texts of ``ids`` (ascending), in that order."""
        for lo in range(0, ids.shape[0], SELECT_IDS):
            yield from self._decoded(ids[lo:lo + SELECT_IDS])

    def _decoded(self, ids: np.ndarray) -> Iterator[str]:
        """The texts of ``ids`` (ascending), read :data:`READ_BYTES` of the arena (and
        one text) at a time."""
        a, b = self._bounds(ids)
        j, n = 0, ids.shape[0]
        while j < n:
            stop = max(int(np.searchsorted(a, a[j] + READ_BYTES, "right")), j + 1)
            base = int(a[j])
            chunk = self._read(base, int(b[stop - 1]))
            for lo, hi in zip((a[j:stop] - base).tolist(), (b[j:stop] - base).tolist()):
                yield chunk[lo:hi].decode()
            j = stop

    def extend(self, texts: list[str]) -> None:
        """Store ``texts`` as the next ids, with their canonical ids."""
        self._append([t.encode("utf-8", "surrogatepass") for t in texts],
                     [_hash(t) for t in texts])

    def _append(self, encoded: list[bytes], hashes: list[int]) -> None:
        if not encoded:
            return
        first = len(self)
        end = self._ends[-1] if first else 0
        for b in encoded:
            end += len(b)
            self._ends.append(end)
        self._data += b"".join(encoded)
        if len(self._data) > self._limit:
            self._spill()
        if len(self) > self._keys.shape[1]:
            keys = np.zeros((1, max(len(self), 2 * self._keys.shape[1])), dtype=np.int64)
            keys[0, :first] = self._keys[0, :first]
            self._keys = keys
        self._keys[0, first:len(self)] = hashes
        ids = np.arange(first, first + len(encoded), dtype=np.int32)
        found = np.empty(ids.shape[0], dtype=np.int32)
        if self._table is None:  # sealed: a text or two added after the scan
            for k, (raw, h) in enumerate(zip(encoded, hashes)):
                same = self._first_of(raw, h, first + k)
                found[k] = first + k if same is None else same
        else:
            if len(self) * 2 > self._table.shape[0]:  # grown once, at its new size
                self._table = new_table(len(self))
                fill(self._table, self._keys, 0, first)
            lookup_insert(self._table, self._keys, 0, self._keys[0, first:len(self)], ids,
                          found)
        # a hash found is confirmed by the bytes: two texts with one hash (astronomically
        # rare) each stay their own
        hit = np.flatnonzero(found != ids)
        apart = hit[~self._same_as(self, found[hit], ids[hit])]
        found[apart] = ids[apart]
        self._canon.extend(found)

    def _same_as(self, other: TextStore, mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
        """Whether each text ``mine[k]`` here equals text ``theirs[k]`` of ``other``."""
        out = np.empty(mine.shape[0], dtype=np.bool_)
        if not mine.shape[0]:
            return out
        fa, ma, map_a = self._views()
        fb, mb, map_b = other._views() if other is not self else (fa, ma, None)
        _same(fa, ma, self._base, np.frombuffer(self._ends, dtype=np.int64), mine,
              fb, mb, other._base, np.frombuffer(other._ends, dtype=np.int64), theirs, out)
        del fa, ma, fb, mb
        for mapped in (map_a, map_b):
            if mapped is not None:
                mapped.close()
        return out

    def total_bytes(self) -> int:
        """Bytes of all the texts (UTF-8)."""
        return self._ends[-1] if len(self) else 0

    def held_bytes(self) -> int:
        """Bytes of memory the store holds: the texts not in its file, the per-id arrays
        and the table."""
        table = 0 if self._table is None else self._table.nbytes
        return (len(self._data) + table + self._keys.nbytes
                + len(self) * (self._ends.itemsize + self._canon.itemsize))

    def seal(self) -> None:
        """No more merges: drop the table of ids by hash (4-8 bytes a text); :meth:`find`
        then compares the hashes of every id (a few ms at millions of texts) and a text
        added still gets its first id."""
        self._table = None

    def find(self, text: str) -> int | None:
        """The first id of ``text`` (None: not stored)."""
        h, raw = _hash(text), text.encode("utf-8", "surrogatepass")
        if self._table is None:
            return self._first_of(raw, h, len(self))
        found = np.empty(1, dtype=np.int32)
        lookup_insert(self._table, self._keys, 0, np.array([h], dtype=np.int64),
                      np.full(1, -1, np.int32), found)
        first = int(found[0])
        return first if first >= 0 and self.raw(first) == raw else None

    def _first_of(self, raw: bytes, h: int, upto: int) -> int | None:
        """The first id below ``upto`` whose text is ``raw`` (hash ``h``), by comparing
        the hashes of them all."""
        hits = np.flatnonzero(self._keys[0, :upto] == h).tolist()
        return next((i for i in hits if self.raw(i) == raw), None)

    def merge(self, other: TextStore, limit: int = 1 << 62, fold: str = "",
              always: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """Add the texts of ``other`` that this store lacks, while it has fewer than
        ``limit`` (those of ``other``'s ids ``always``, whatever it has); returns each
        of ``other``'s ids as this store's (int32, the first id of the same text; a
        text past the limit: the id of ``fold``, added if need be) and how many
        distinct texts were folded so."""
        assert self._table is not None, "a sealed store takes no more merges"
        n = len(other)
        canon = np.frombuffer(other._canon, dtype=np.int32).copy()
        heads = np.flatnonzero(canon == np.arange(n)).astype(np.int32)  # distinct texts
        found = np.empty(heads.shape[0], dtype=np.int32)
        hashes = other._keys[0, heads]
        lookup_insert(self._table, self._keys, 0, hashes,
                      np.full(heads.shape[0], -1, np.int32), found)
        hit = np.flatnonzero(found >= 0)
        found[hit[~self._same_as(other, found[hit], heads[hit])]] = -1
        missing = np.flatnonzero(found < 0)
        marker = np.zeros(0, dtype=np.int64)
        if fold and (own := other.find(fold)) is not None:  # its own fold: no room taken
            marker, missing = missing[heads[missing] == own], missing[heads[missing] != own]
        room = max(limit - len(self), 0)
        keep, over = missing[:room], missing[room:]
        if always is not None and over.shape[0]:
            kept = np.isin(heads[over], always)
            keep, over = np.concatenate([keep, over[kept]]), over[~kept]
        folded = int(over.shape[0])
        over = np.concatenate([over, marker])
        new = heads[keep]
        found[keep] = np.arange(len(self), len(self) + new.shape[0], dtype=np.int32)
        self._append([other.raw(int(j)) for j in new], other._keys[0, new].tolist())
        if over.shape[0]:
            fold_id = self.find(fold)
            if fold_id is None:
                fold_id = len(self)
                self.extend([fold])
            found[over] = fold_id
        out = np.empty(n, dtype=np.int32)
        out[heads] = found
        return out[canon], folded

    def canonical(self) -> np.ndarray:
        """``int32`` array mapping every id to the first id with the same text."""
        return np.frombuffer(self._canon, dtype=np.int32).copy()

    def _bounds(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start and end offsets of the texts of ``ids`` in the arena."""
        ends = np.frombuffer(self._ends, dtype=np.int64)
        b = ends[ids]
        return np.where(ids > 0, ends[np.maximum(ids - 1, 0)], 0), b

    def nbytes(self, ids: np.ndarray) -> int:
        """Bytes of the texts of ``ids``."""
        a, b = self._bounds(ids)
        return int((b - a).sum())

    def arrow(self, ids: np.ndarray) -> pa.Array:
        """The texts of ``ids`` (ascending) as an Arrow string array, made from the arena
        (no Python string each)."""
        a, b = self._bounds(ids)
        offsets = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(b - a, out=offsets[1:])
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        filed, mem, mapped = self._views()
        _gather(filed, mem, self._base, a, b, data)
        del filed, mem
        if mapped is not None:
            mapped.close()
        large = offsets[-1] >= 2**31
        return pa.Array.from_buffers(pa.large_string() if large else pa.string(),
                                     ids.shape[0],
                                     [None, pa.py_buffer(offsets if large
                                                         else offsets.astype(np.int32)),
                                      pa.py_buffer(data)])


LAZY_BYTES = 16 << 20  # a dictionary column whose texts pass this is built per row group


class TextDictionary:
    """A dictionary column whose dictionary stays in its :class:`TextStore`: ``indices``
    (int32, null where absent) are codes into ``used`` (text ids, ascending). Each part
    asked for (:meth:`part`) gets a dictionary of the texts it uses only, so a column of
    millions of distinct names is never a whole dictionary in memory (nor in each
    parquet row group); :meth:`whole` makes the whole column."""

    type = pa.dictionary(pa.int32(), pa.string())

    def __init__(self, indices: pa.Array, texts: TextStore, used: np.ndarray) -> None:
        self.indices, self.texts, self.used = indices, texts, used

    def __len__(self) -> int:
        return len(self.indices)

    @staticmethod
    def _codes(indices: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(codes, where valid) of a part's ``indices``."""
        return (indices.to_numpy(zero_copy_only=False),
                ~np.asarray(indices.is_null(), dtype=bool))

    def new_bytes(self, indices: pa.Array) -> np.ndarray:
        """Per row of ``indices`` (a part), the bytes of the text it is the first in the
        part to use (0: a text used before it, or null)."""
        codes, valid = self._codes(indices)
        rows = np.flatnonzero(valid)
        held, first = np.unique(codes[rows].astype(np.int64), return_index=True)
        out = np.zeros(codes.shape[0], dtype=np.int64)
        a, b = self.texts._bounds(self.used[held])
        out[rows[first]] = b - a
        return out

    def part(self, indices: pa.Array) -> pa.DictionaryArray:
        """The column of ``indices`` (a part of :attr:`indices`) with its own dictionary."""
        codes, valid = self._codes(indices)
        held = np.unique(codes[valid].astype(np.int64))
        local = np.zeros(codes.shape[0], dtype=np.int32)
        local[valid] = np.searchsorted(held, codes[valid])
        return pa.DictionaryArray.from_arrays(
            pa.array(local, pa.int32(), mask=None if valid.all() else ~valid),
            self.texts.arrow(self.used[held]), safe=False)

    def whole(self) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(self.indices, self.texts.arrow(self.used),
                                              safe=False)
