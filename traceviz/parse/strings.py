"""String interning shared across the chunks of one trace.

Inside the numba scan loop a string is only hashed (:func:`.lexer.scan_string`: its
decoded bytes) and looked up in ``strs``, a table of ids keyed by the ``SI_KEY`` row of
``sinfo`` (:mod:`.id_table`; ``sinfo`` holds per string id its hash, category class and
count: half as many columns as the table has slots); a hash seen for the first time gets
the next id and its byte span is queued in ``pend`` (:data:`PENDING` spans; when it is
full the scanner returns to have them taken). After each scanner call (before the chunk
buffer is reused) :meth:`StringTable.take_pending` decodes only those new spans, so
Python touches each distinct string once, never each event.

Two raw spellings of one text (``"A"`` and ``"\\u0041"``) get two ids with the same
decoded text; :meth:`StringTable.canonical` maps every id to the first id of its text.
The texts are kept in a :class:`~.text_store.TextStore` (no Python object per string).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
from numba import njit

from . import fields as L
from .budget import MAX_STRINGS
from .id_table import fill, slot_of
from .long_strings import MAX_STRING, ROOM, cut_point, marker
from .text_store import TextStore

PENDING = 1 << 16  # new strings queued between two drains at most


@njit(nogil=True, cache=True, _nrt=False)
def intern(strs, sinfo, pend, w, h, off, length, cap):
    """Id of the string with hash ``h`` whose raw bytes are ``buf[off:off+length]``.

    ``w[W_NSTR]`` counts strings, ``w[W_NPEND]`` pending spans. Past ``cap`` strings
    (``w[W_MAXSTR]``, or more for a category traceviz reads: those are always kept) a
    new one is the fold marker (:func:`fold_marker`), one id for them all, queued once
    with length -1 at the first folded string's offset; its key is 0, so only a string
    whose 64-bit hash is 0 could find it (the table takes each hash for its string
    anyway). The caller guarantees free room (load factor below 1/2, a free pending
    slot).
    """
    slot = slot_of(strs, sinfo, L.SI_KEY, h)
    if strs[slot] != 0:
        return strs[slot] - 1
    sid = w[L.W_NSTR]
    if sid >= cap:
        if w[L.W_FOLD] != 0:
            return w[L.W_FOLD] - 1
        w[L.W_FOLD] = sid + 1  # not in the table: later strings fold too
        sinfo[L.SI_CLASS, sid] = L.CLS_OTHER  # as a category: none traceviz knows
        length = -1
        h = 0
    else:
        strs[slot] = sid + 1
    sinfo[L.SI_KEY, sid] = h
    w[L.W_NSTR] = sid + 1
    p = w[L.W_NPEND]
    pend[L.PD_ID, p] = sid
    pend[L.PD_OFF, p] = off
    pend[L.PD_LEN, p] = length
    w[L.W_NPEND] = p + 1
    return sid


def fold_marker(limit: int) -> str:
    """The text of every string first seen after the ``limit``-th distinct one."""
    return f"…(a string past the {limit:,} distinct strings kept)"


class BadString(ValueError):
    """A JSON string body that JSON cannot decode (an invalid escape); ``offset``: where
    it starts in its buffer, once known."""

    offset: int | None = None


def decode_raw(raw: bytes, string: bool = True) -> str:
    """Text of a JSON string body (``string``; without its quotes), else the text of a
    non-string value kept as written (a number or list in a string slot). Invalid UTF-8
    and lone surrogates become U+FFFD; raw control characters are kept. An invalid escape
    raises :class:`BadString`."""
    if string and b"\\" in raw:
        try:
            return orjson.loads(b'"' + raw + b'"')
        except orjson.JSONDecodeError:
            import json

            try:  # lone surrogates, raw control characters, invalid UTF-8
                text = json.loads('"' + raw.decode("utf-8", errors="replace") + '"',
                                  strict=False)
            except json.JSONDecodeError as exc:
                raise BadString(f"invalid escape in a string ({exc.msg})") from None
            return text.encode("utf-8", errors="replace").decode("utf-8")
    return raw.decode("utf-8", errors="replace")


class StringTable:
    """The interned strings of one trace: the numba-side table plus decoded texts.

    ``strs``: the ids by hash (:mod:`.id_table`); ``sinfo`` rows, per string id: SI_KEY
    (its hash), SI_CLASS (category class, -1 until known) and SI_COUNT (events with that
    category); ``pend``: the PD_* queue of new strings' spans. All three live while the
    scanner interns (:meth:`end_scan` keeps the category counts only).
    """

    def __init__(self, capacity: int = 1 << 16, text_limit: int = 1 << 62,
                 new_path: Callable[[], str] | None = None,
                 max_strings: int = MAX_STRINGS) -> None:
        """``text_limit`` / ``new_path``: bytes of decoded texts held in memory, past
        which they go to a file there (:class:`~.text_store.TextStore`);
        ``max_strings``: distinct strings kept, past which new ones fold into one marker
        (:func:`intern`; ``fold_at``: the byte of the first, -1 when it was found in a
        merge, None: none folded)."""
        self.max_strings = min(max_strings, MAX_STRINGS)
        self.fold_at: int | None = None
        self.strs = np.zeros(capacity, dtype=np.int32)
        self.sinfo = np.zeros((3, capacity // 2), dtype=np.int64)
        self.sinfo[L.SI_CLASS] = -1
        self.pend = np.zeros((3, PENDING), dtype=np.int64)
        self.texts = TextStore(text_limit, new_path)
        self._cat_ids = np.zeros(0, dtype=np.int32)  # category counts (end_scan)
        self._cat_counts = np.zeros(0, dtype=np.int64)
        self._cat_distinct = 0
        self.cuts = 0  # strings cut to MAX_STRING bytes (traceviz.parse.long_strings)
        self.first_cut: int | None = None  # where the first began (byte offset)

    def count_cuts(self, cuts: int, first: int | None) -> None:
        """Note ``cuts`` more strings cut, the first of them at byte ``first``."""
        if cuts:
            self.cuts += cuts
            if self.first_cut is None or (first is not None and first < self.first_cut):
                self.first_cut = first

    def grow(self, count: int, headroom: int) -> None:
        """Make room for ``headroom`` more strings (``count`` exist) at load factor <= 1/2."""
        size = self.strs.shape[0]
        while (count + headroom) * 2 > size:
            size *= 2
        if size != self.strs.shape[0]:
            info = np.zeros((3, size // 2), dtype=np.int64)
            info[L.SI_CLASS] = -1
            info[:, :count] = self.sinfo[:, :count]
            self.sinfo = info
            self.strs = np.zeros(0, dtype=np.int32)  # the old table goes first
            self.strs = np.zeros(size, dtype=np.int32)
            fill(self.strs, info, L.SI_KEY, count)

    def end_scan(self) -> None:
        """No more strings are interned: drop the ids by hash, the queue and the per-id
        rows; what is kept of them is the event count of each category string
        (:meth:`category_counts`: a few ids, not one row per string)."""
        n = len(self)
        counts = self.sinfo[L.SI_COUNT, :n]
        ids = np.flatnonzero(counts).astype(np.int32)
        self.add_category_counts(ids, counts[ids])
        self.strs = np.zeros(0, dtype=np.int32)
        self.pend = np.zeros((3, 0), dtype=np.int64)
        self.sinfo = np.zeros((3, 0), dtype=np.int64)

    def add_category_counts(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """Add ``counts[k]`` events to category string ``ids[k]`` (after :meth:`end_scan`:
        a part's counts merged onto the trace before it). The pairs are summed per id
        whenever they double, so they stay as many as the category strings."""
        self._cat_ids = np.concatenate([self._cat_ids, ids.astype(np.int32)])
        self._cat_counts = np.concatenate([self._cat_counts, counts.astype(np.int64)])
        if self._cat_ids.shape[0] > 2 * self._cat_distinct + 64:
            ids, at = np.unique(self._cat_ids, return_inverse=True)
            self._cat_counts = np.bincount(at, self._cat_counts, ids.shape[0]).astype(np.int64)
            self._cat_ids = ids.astype(np.int32)
            self._cat_distinct = ids.shape[0]

    def category_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(string ids, events with that category) after :meth:`end_scan`; an id may come
        more than once (its counts add up)."""
        return self._cat_ids, self._cat_counts

    def seal(self) -> None:
        """The trace's counts are read: drop them and the texts' lookup table (the texts
        stay; :meth:`~.text_store.TextStore.seal`)."""
        self.end_scan()
        self._cat_ids = np.zeros(0, dtype=np.int32)
        self._cat_counts = np.zeros(0, dtype=np.int64)
        self.texts.seal()

    def held_bytes(self) -> int:
        """Bytes of memory the table holds (its arrays and the texts in memory)."""
        return self.strs.nbytes + self.sinfo.nbytes + self.pend.nbytes + \
            self.texts.held_bytes()

    def take_pending(self, buf: np.ndarray, w: np.ndarray,
                     at: Callable[[int], int] = int) -> None:
        """Decode the spans queued since the last call; ``buf`` is the scanned buffer,
        whose byte ``i`` is byte ``at(i)`` of the trace. A span right after a quote is a
        string body, else a non-string value's text; one longer than
        :data:`~.long_strings.MAX_STRING` is cut (:mod:`.long_strings`). A string JSON
        cannot decode raises :class:`BadString` with ``.offset`` (in ``buf``)."""
        count = int(w[L.W_NPEND])
        if count == 0:
            return
        mem = buf.data
        texts: list[str] = []
        for sid, off, ln in self.pend[:, :count].T.tolist():
            if ln < 0:  # the fold marker (intern)
                texts.append(fold_marker(self.max_strings))
                self.fold_at = at(off)  # once: later strings fold into this one
                continue
            end = off + ln
            cut = cut_point(buf, off, end, MAX_STRING) if ln > MAX_STRING + ROOM else end
            try:
                text = decode_raw(bytes(mem[off:cut]), off > 0 and buf[off - 1] == 34)
            except BadString as exc:
                w[L.W_NPEND] = 0
                exc.offset = off
                raise
            if cut < end:
                text += marker(end - cut)
                self.count_cuts(1, at(off))
            assert sid == len(self.texts) + len(texts)
            texts.append(text)
        self.texts.extend(texts)
        w[L.W_NPEND] = 0

    def add(self, text: str) -> int:
        """The id of ``text``, added after the scan if the trace has no such string."""
        found = self.texts.find(text)
        if found is None:
            found = len(self.texts)
            self.texts.extend([text])
        return found

    def canonical(self) -> np.ndarray:
        """``int32`` array mapping every id to the first id with the same text."""
        return self.texts.canonical()

    def __len__(self) -> int:
        return len(self.texts)

