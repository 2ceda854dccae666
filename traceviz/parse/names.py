"""Per-string-id facts of one scanned trace: texts, canonical ids, category classes, and
per-string lookup arrays (a pattern matched once per distinct string, never per event)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import column
from ..table.parked import InMemory
from . import fields as L
from .reader import ScannedTrace
from .text_store import LAZY_BYTES, TextDictionary

INT32_MAX = (1 << 31) - 1


class Strings:
    """Per-string-id facts of one trace: texts, canonical ids, category classes.

    Every per-string lookup array here has ``len(texts) + 1`` entries: the last one is the
    value for id -1 (absent), so ``table[ids]`` is right even where ids are -1.
    """

    def __init__(self, scanned: ScannedTrace) -> None:
        self.texts = scanned.strings.texts
        self._canon_lookup = self.lookup(np.int32, -1)
        self._canon_lookup[:-1] = scanned.strings.canonical()
        self.canon = self._canon_lookup[:-1]
        self.cls = self.lookup(np.int8, L.CLS_NONE)
        self.cls[:-1] = np.fromiter((L.CATEGORY_CLASS.get(t, L.CLS_OTHER) for t in self.texts),
                                    np.int8, len(self.texts))

    def lookup(self, dtype, absent) -> np.ndarray:
        """A per-string lookup array filled with ``absent`` (see the class doc)."""
        return np.full(len(self.texts) + 1, absent, dtype=dtype)

    def ids_of(self, text: str) -> np.ndarray:
        """Every id whose text is ``text``."""
        first = self.texts.find(text)
        if first is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.canon == first)

    def used(self, store, field: str) -> np.ndarray:
        """The distinct string ids (ascending) in column ``field`` of ``store``
        (a :class:`~.columns.ColumnStore`)."""
        is_used = self.lookup(bool, False)
        for _, cols in store.blocks(field):
            is_used[cols[field]] = True  # id -1 marks the last entry, dropped below
        return np.flatnonzero(is_used[:-1]).astype(np.int32)

    def _texts(self, among: np.ndarray | None):
        return self.texts if among is None else self.texts.select(among)

    def matches(self, pattern, among: np.ndarray | None = None) -> np.ndarray:
        """Per-string lookup: whether ``pattern.search`` finds the string; only the
        strings ``among`` (ascending ids; None: all) are searched, the others are
        False."""
        out = self.lookup(bool, False)
        found = np.fromiter((pattern.search(t) is not None for t in self._texts(among)),
                            bool, len(self.texts) if among is None else among.shape[0])
        out[slice(None, -1) if among is None else among] = found
        return out

    def numbers(self, pattern, among: np.ndarray | None = None) -> np.ndarray:
        """Group 1 of ``pattern.match`` as an ``int32`` per string (-1: no match, or
        group 1 not a decimal number below 2**31, the iteration column's range); only
        the strings ``among`` (ascending ids; None: all) are matched."""
        out = self.lookup(np.int32, -1)
        ids = range(len(self.texts)) if among is None else among.tolist()
        for i, text in zip(ids, self._texts(among)):
            m = pattern.match(text)
            raw = m.group(1) if m else None
            if raw and raw.isascii() and raw.isdigit():
                digits = raw.lstrip("0") or "0"  # int() refuses 4300+ digits
                if len(digits) <= 10 and int(digits) <= INT32_MAX:
                    out[i] = int(digits)
        return out

    def floats(self, ids: np.ndarray) -> np.ndarray:
        """The float value of each id's text (NaN: absent or not a number)."""
        values = self.lookup(np.float64, np.nan)
        for i in np.unique(ids[ids >= 0]).tolist():
            try:
                values[i] = float(self.texts[i])
            except ValueError:
                pass
        return values[ids]

    def dictionary(self, ids: np.ndarray, n: int | None = None,
                   rows: np.ndarray | None = None,
                   store: InMemory | None = None) -> pa.DictionaryArray | TextDictionary:
        """Dictionary column of string ids (-1 -> null) holding only the texts used.
        Works in int32 (the indices' type): 9 bytes per row besides the result. With
        ``rows`` (ascending): a column of ``n`` rows holding ``ids`` at ``rows``, null
        elsewhere (5 bytes per row besides the result). Indices and null mask are made
        in ``store`` (:mod:`traceviz.table.parked`): a slice at a time when it parks.
        Where the texts used pass :data:`~.text_store.LAZY_BYTES`, the dictionary stays
        in the text store (:class:`~.text_store.TextDictionary`)."""
        store = store or InMemory()
        canon = store.map(np.int32, self.canon_lookup().__getitem__, ids)  # -1 stays -1
        used = np.zeros(len(self.texts) + 1, dtype=bool)
        used[store.unique(lambda c: c, canon)] = True
        used[-1] = False
        code = np.cumsum(used, dtype=np.int32) - 1  # dense code of each used id, O(rows)
        code[-1] = 0  # absent rows: any valid index, masked below
        if rows is None:
            mask = store.map(bool, lambda c: c < 0, canon)
            indices = store.map(np.int32, code.__getitem__, canon)
        else:
            assert n is not None  # given with rows
            mask = store.full(n, True, bool)
            store.scatter(mask, rows, canon < 0)
            indices = store.full(n, 0, np.int32)
            store.scatter(indices, rows, code[canon])
        del canon
        ids = np.flatnonzero(used[:-1])
        if self.texts.nbytes(ids) > LAZY_BYTES:
            return TextDictionary(column(indices, mask=mask), self.texts, ids)
        # safe=False: the indices are valid by construction, and checking them reads
        # every one (all the pages of parked indices)
        return pa.DictionaryArray.from_arrays(column(indices, mask=mask),
                                              self.texts.arrow(ids), safe=False)

    def canon_lookup(self) -> np.ndarray:
        """Canonical id (int32) per string id, with the id -1 entry last (see the class
        doc)."""
        return self._canon_lookup
