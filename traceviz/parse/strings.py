"""String interning shared across the chunks of one trace.

Inside the numba scan loop a string is only hashed (FNV-1a of its raw bytes) and looked
up in an open-addressing table of ``int64`` hashes; a hash seen for the first time gets
the next id and its byte span is queued in ``pending``. After each scanner call (before
the chunk buffer is reused) :meth:`StringTable.take_pending` decodes only those new
spans, so Python touches each distinct string once, never each event.

Two raw spellings of one text (``"A"`` and ``"\\u0041"``) get two ids with the same
decoded text; :meth:`StringTable.canonical` maps every id to the first id of its text.
"""
from __future__ import annotations

import numpy as np
import orjson
from numba import njit

from .lexer import fnv1a

EMPTY = np.int64(0)
_ZERO_STANDIN = np.int64(1)  # a hash that happens to be 0 is stored as 1

# pending-array rows
P_ID, P_OFF, P_LEN = 0, 1, 2


@njit(nogil=True, cache=True)
def intern(keys, vals, meta, pending, h, off, length):
    """Id of the string with hash ``h`` whose raw bytes are ``buf[off:off+length]``.

    ``meta[0]`` counts strings, ``meta[1]`` counts pending (new, undecoded) spans. The
    caller guarantees free room (see :func:`needs_room`).
    """
    if h == EMPTY:
        h = _ZERO_STANDIN
    mask = keys.shape[0] - 1
    slot = h & mask
    while True:
        k = keys[slot]
        if k == h:
            return vals[slot]
        if k == EMPTY:
            sid = meta[0]
            keys[slot] = h
            vals[slot] = sid
            meta[0] = sid + 1
            p = meta[1]
            pending[P_ID, p] = sid
            pending[P_OFF, p] = off
            pending[P_LEN, p] = length
            meta[1] = p + 1
            return sid
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True)
def needs_room(keys, meta, pending, headroom):
    """True when fewer than ``headroom`` strings can be added without growing."""
    return (meta[0] + headroom) * 2 > keys.shape[0] or meta[1] + headroom > pending.shape[1]


@njit(nogil=True, cache=True)
def _rehash(old_keys, old_vals, new_keys, new_vals):
    mask = new_keys.shape[0] - 1
    for i in range(old_keys.shape[0]):
        h = old_keys[i]
        if h == EMPTY:
            continue
        slot = h & mask
        while new_keys[slot] != EMPTY:
            slot = (slot + 1) & mask
        new_keys[slot] = h
        new_vals[slot] = old_vals[i]


def decode_raw(raw: bytes) -> str:
    """Text of a JSON string body (without quotes); invalid UTF-8 becomes U+FFFD."""
    if b"\\" in raw:
        try:
            return orjson.loads(b'"' + raw + b'"')
        except orjson.JSONDecodeError:
            import json

            return json.loads(b'"' + raw + b'"')
    return raw.decode("utf-8", errors="replace")


class StringTable:
    """The interned strings of one trace: numba-side arrays plus decoded texts."""

    def __init__(self, capacity: int = 1 << 16, pending: int = 1 << 14) -> None:
        self.keys = np.zeros(capacity, dtype=np.int64)
        self.vals = np.zeros(capacity, dtype=np.int32)
        self.meta = np.zeros(2, dtype=np.int64)
        self.pending = np.zeros((3, pending), dtype=np.int64)
        self.texts: list[str] = []
        self._first_of: dict[str, int] = {}
        self._canon: list[int] = []

    def ensure_room(self, headroom: int) -> None:
        """Grow the hash table so ``headroom`` more strings fit at load factor <= 1/2."""
        while (int(self.meta[0]) + headroom) * 2 > self.keys.shape[0]:
            size = self.keys.shape[0] * 2
            keys = np.zeros(size, dtype=np.int64)
            vals = np.zeros(size, dtype=np.int32)
            _rehash(self.keys, self.vals, keys, vals)
            self.keys, self.vals = keys, vals
        if self.pending.shape[1] < headroom * 2:
            self.pending = np.zeros((3, headroom * 2), dtype=np.int64)

    def take_pending(self, buf: np.ndarray) -> None:
        """Decode the spans queued since the last call; ``buf`` is the scanned buffer."""
        count = int(self.meta[1])
        if count == 0:
            return
        ids = self.pending[P_ID, :count]
        offs = self.pending[P_OFF, :count]
        lens = self.pending[P_LEN, :count]
        mem = buf.data
        for sid, off, ln in zip(ids.tolist(), offs.tolist(), lens.tolist()):
            text = decode_raw(bytes(mem[off:off + ln]))
            assert sid == len(self.texts)
            self.texts.append(text)
            first = self._first_of.setdefault(text, sid)
            self._canon.append(first)
        self.meta[1] = 0

    def add(self, text: str) -> int:
        """Intern ``text`` from Python (for strings not read by the scanner)."""
        raw = orjson.dumps(text)[1:-1]
        h = fnv1a(raw)
        sid = intern(self.keys, self.vals, self.meta, self.pending, np.int64(h), 0, len(raw))
        if sid == len(self.texts):
            self.texts.append(text)
            self._canon.append(self._first_of.setdefault(text, sid))
        self.meta[1] = 0
        return int(sid)

    def canonical(self) -> np.ndarray:
        """``int32`` array mapping every id to the first id with the same text."""
        return np.asarray(self._canon, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.texts)
