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


class Strings:
    """Per-string-id facts of one trace: texts, canonical ids, category classes.

    Every per-string lookup array here has ``len(texts) + 1`` entries: the last one is the
    value for id -1 (absent), so ``table[ids]`` is right even where ids are -1.
    """

    def __init__(self, scanned: ScannedTrace) -> None:
        self.texts = scanned.strings.texts
        self.canon = scanned.strings.canonical()
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

    def matches(self, pattern) -> np.ndarray:
        """Per-string lookup: whether ``pattern.search`` finds the string."""
        out = self.lookup(bool, False)
        out[:-1] = np.fromiter((pattern.search(t) is not None for t in self.texts), bool,
                               len(self.texts))
        return out

    def numbers(self, pattern) -> np.ndarray:
        """Group 1 of ``pattern.match`` as an int per string (-1: no match)."""
        out = self.lookup(np.int64, -1)
        for i, text in enumerate(self.texts):
            m = pattern.match(text)
            if m:
                out[i] = int(m.group(1))
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
        if not hasattr(self, "_canon_lookup"):
            self._canon_lookup = np.append(self.canon, np.int32(-1))
        return self._canon_lookup
