"""String interning shared across the chunks of one trace.

Inside the numba scan loop a string is only hashed (:func:`.lexer.scan_string`: its
decoded bytes) and looked up in an open-addressing table (rows ``SR_KEY`` / ``SR_ID``
of the ``strs`` array); a hash seen for the first time gets the next id and its byte
span is queued in the ``SI_PEND_*`` rows of the ``sinfo`` array (which holds per string
id its category class and count too: half as many columns as the table has slots).
After each scanner call (before the chunk buffer is reused)
:meth:`StringTable.take_pending` decodes only those new spans, so Python touches each
distinct string once, never each event.

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
from .long_strings import MAX_STRING, ROOM, cut_point, marker
from .text_store import TextStore, rehash


@njit(nogil=True, cache=True, _nrt=False)
def intern(strs, sinfo, w, h, off, length):
    """Id of the string with hash ``h`` whose raw bytes are ``buf[off:off+length]``.

    ``w[W_NSTR]`` counts strings, ``w[W_NPEND]`` pending spans. The caller guarantees
    free room (load factor below 1/2, hence a free pending slot too).
    """
    if h == 0:
        h = np.int64(1)
    mask = strs.shape[1] - 1
    slot = h & mask
    while True:
        k = strs[L.SR_KEY, slot]
        if k == h:
            return strs[L.SR_ID, slot]
        if k == 0:
            sid = w[L.W_NSTR]
            strs[L.SR_KEY, slot] = h
            strs[L.SR_ID, slot] = sid
            w[L.W_NSTR] = sid + 1
            p = w[L.W_NPEND]
            sinfo[L.SI_PEND_ID, p] = sid
            sinfo[L.SI_PEND_OFF, p] = off
            sinfo[L.SI_PEND_LEN, p] = length
            w[L.W_NPEND] = p + 1
            return sid
        slot = (slot + 1) & mask


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

    ``strs`` rows: SR_KEY / SR_ID (hash table); ``sinfo`` rows, per string id: SI_CLASS
    (category class, -1 until known) and SI_COUNT (events with that category), and the
    SI_PEND_* queue (at most as long as there are ids: half the table's slots).
    """

    def __init__(self, capacity: int = 1 << 16, text_limit: int = 1 << 62,
                 new_path: Callable[[], str] | None = None) -> None:
        """``text_limit`` / ``new_path``: bytes of decoded texts held in memory, past
        which they go to a file there (:class:`~.text_store.TextStore`)."""
        self.strs = np.zeros((2, capacity), dtype=np.int64)
        self.sinfo = np.zeros((5, capacity // 2), dtype=np.int64)
        self.sinfo[L.SI_CLASS] = -1
        self.texts = TextStore(text_limit, new_path)
        self.cuts = 0  # strings cut to MAX_STRING bytes (traceviz.parsing.long_strings)
        self.first_cut: int | None = None  # where the first began (byte offset)

    def count_cuts(self, cuts: int, first: int | None) -> None:
        """Note ``cuts`` more strings cut, the first of them at byte ``first``."""
        if cuts:
            self.cuts += cuts
            if self.first_cut is None or (first is not None and first < self.first_cut):
                self.first_cut = first

    def grow(self, count: int, headroom: int) -> None:
        """Make room for ``headroom`` more strings (``count`` exist) at load factor <= 1/2."""
        size = self.strs.shape[1]
        while (count + headroom) * 2 > size:
            size *= 2
        if size != self.strs.shape[1]:
            new = np.zeros((2, size), dtype=np.int64)
            rehash(self.strs, new, L.SR_KEY, L.SR_ID)
            self.strs = new
            info = np.zeros((5, size // 2), dtype=np.int64)
            info[L.SI_CLASS] = -1
            info[L.SI_CLASS:L.SI_COUNT + 1, :count] = self.sinfo[L.SI_CLASS:L.SI_COUNT + 1,
                                                                 :count]
            self.sinfo = info

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
        for sid, off, ln in self.sinfo[L.SI_PEND_ID:L.SI_PEND_LEN + 1, :count].T.tolist():
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

