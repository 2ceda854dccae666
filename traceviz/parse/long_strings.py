"""Strings longer than :data:`MAX_STRING` bytes are cut: what a trace says cannot take the
parse's memory past its budget.

A JSON string whose raw (as written, escapes included) body is longer than
``MAX_STRING + ROOM`` bytes keeps its first ``MAX_STRING`` bytes (to the next whole
character: never inside an escape or a UTF-8 sequence) followed by the marker
``…(+N bytes cut)``, N the raw bytes dropped. The longest strings in the real traces
we test are ~4 KB (C++ template kernel names); a profiler writes nothing near 64 KiB.

Two places apply the one rule, so a string is cut the same wherever it sits:

* :func:`cut_point` when a string is decoded (:meth:`.strings.StringTable.take_pending`);
* :func:`compact`, when one event does not fit the read buffer: the long strings of the
  event are cut in the buffer, in place, as its bytes arrive, so the buffer holds
  ``MAX_STRING`` bytes of each whatever its length (a 1 GiB kernel name is read through
  a buffer of a few MB). An event still larger than :data:`MAX_EVENT` after that is an
  error (no profiler writes one).
"""
from __future__ import annotations

import numpy as np
from numba import njit

MAX_STRING = 64 << 10  # bytes of a string kept
ROOM = 64  # a string is cut only past MAX_STRING + ROOM bytes (room for the marker)
# bytes kept after a cut until the string ends, where its marker goes (the longest
# marker, 19 digits, is 35 bytes)
RESERVE = 40
MAX_EVENT = 64 << 20  # bytes one event may take once its long strings are cut

# compaction state: int64[C_SIZE], carried across refills of one event
(C_READ, C_IN, C_ESC, C_LEN, C_START, C_CUT, C_SKIP, C_DROPPED, C_CUTS, C_FIRST,
 C_GONE, C_OPENED, C_CLOSED, C_DEPTH, C_SEEN, C_DONE) = range(16)
C_SIZE = 16
_QUOTE, _BACKSLASH, _U = 34, 92, 117
_OPEN_OBJ, _OPEN_ARR, _CLOSE_OBJ, _CLOSE_ARR, _COMMA = 123, 91, 125, 93, 44
_DIGITS = np.frombuffer(b"0123456789", dtype=np.uint8)
_HEAD = np.frombuffer("…(+".encode(), dtype=np.uint8)
_TAIL = np.frombuffer(b" bytes cut)", dtype=np.uint8)


def marker(dropped: int) -> str:
    """The text that ends a cut string: ``dropped`` raw bytes were cut."""
    return f"…(+{dropped} bytes cut)"


def new_state() -> np.ndarray:
    """The state of :func:`compact` for a new event."""
    st = np.zeros(C_SIZE, dtype=np.int64)
    st[C_FIRST] = -1
    return st


def position(st: np.ndarray, at: int) -> int:
    """Where byte ``at`` of a buffer :func:`compact` worked on was in the bytes as read:
    exact from the end of the last string cut on (before it, inside the event that was
    cut, it may be early by the bytes removed)."""
    return at + int(st[C_GONE]) if at >= st[C_CLOSED] else at


@njit(cache=True, nogil=True)
def _next_esc(esc: int, c: int) -> int:
    """Escape state after byte ``c``: 0 none, -1 after a backslash, k > 0 hex digits of
    a ``\\u`` escape still to come."""
    if esc == -1:
        return 4 if c == _U else 0
    if esc > 0:
        return esc - 1
    return -1 if c == _BACKSLASH else 0


@njit(cache=True, nogil=True)
def _boundary(esc: int, c: int, over: int) -> bool:
    """Whether a string may be cut before byte ``c`` (escape state ``esc``), ``over``
    bytes past :data:`MAX_STRING`: not inside an escape, and not inside a UTF-8
    sequence (which is at most 4 bytes: past that, the bytes are not UTF-8 anyway)."""
    return esc == 0 and ((c & 0xC0) != 0x80 or over >= 4)


@njit(cache=True, nogil=True)
def cut_point(buf, start: int, end: int, cap: int) -> int:
    """Where the raw string body ``buf[start:end]`` is cut: ``end`` when it is at most
    ``cap + ROOM`` bytes, else the first character boundary at or past ``start + cap``."""
    if end - start <= cap + ROOM:
        return end
    esc = 0
    for i in range(start, end):
        c = buf[i]
        if i - start >= cap and _boundary(esc, c, i - start - cap):
            return i
        esc = _next_esc(esc, c)
    return end


@njit(cache=True, nogil=True)
def _put_marker(buf, at: int, dropped: int) -> int:
    """Write the marker for ``dropped`` bytes at ``buf[at]``; returns the index after."""
    for k in range(_HEAD.shape[0]):
        buf[at] = _HEAD[k]
        at += 1
    digits = 1
    v = dropped
    while v >= 10:
        v //= 10
        digits += 1
    v = dropped
    for k in range(digits - 1, -1, -1):
        buf[at + k] = _DIGITS[v % 10]
        v //= 10
    at += digits
    for k in range(_TAIL.shape[0]):
        buf[at] = _TAIL[k]
        at += 1
    return at


@njit(cache=True, nogil=True)
def compact(buf, n: int, st, cap: int) -> int:
    """Cut the long strings of ``buf[st[C_READ]:n]`` in place (see the module doc);
    returns the new end of the data. ``buf[0]`` must be the start of one item (an event,
    or a top-level key and its value) when the state is new; bytes past the item's end
    are left as they are (the next item gets a state of its own). ``st[C_GONE]``: the
    bytes removed, all before ``buf[st[C_CLOSED]]`` (the end of the last string cut);
    ``st[C_CUTS]``: the strings cut; ``st[C_FIRST]``: where the first began, as a
    position in the bytes as read (before any was removed)."""
    r = st[C_READ]
    wp = r
    if st[C_DONE]:
        return n
    gone = st[C_GONE]
    in_str, esc, length, start = st[C_IN], st[C_ESC], st[C_LEN], st[C_START]
    cut, skip, dropped = st[C_CUT], st[C_SKIP], st[C_DROPPED]
    depth, seen = st[C_DEPTH], st[C_SEEN]
    while r < n:
        c = buf[r]
        if in_str == 0:
            # the item ends at a comma or a closing bracket of the array / object it sits in
            if (c == _COMMA and depth == 0 and seen) or (
                    (c == _CLOSE_OBJ or c == _CLOSE_ARR) and depth == 0):
                st[C_DONE] = 1
                break
            r += 1
            buf[wp] = c
            wp += 1
            if c == _QUOTE:
                in_str, esc, length, start, cut, skip, dropped = 1, 0, 0, wp, -1, 0, 0
                st[C_OPENED] = r + gone  # as read
                seen = 1
            elif c == _OPEN_OBJ or c == _OPEN_ARR:
                depth += 1
                seen = 1
            elif c == _CLOSE_OBJ or c == _CLOSE_ARR:
                depth -= 1
                if depth == 0:  # the item was this object / array
                    st[C_DONE] = 1
                    break
            elif c > 32 and c != _COMMA:
                seen = 1
            continue
        r += 1
        if esc == 0 and c == _QUOTE:  # the string ends
            if skip:
                wp = _put_marker(buf, cut, dropped)
            buf[wp] = c
            wp += 1
            in_str = 0
            if skip:
                st[C_CLOSED] = wp
            continue
        if skip:
            dropped += 1
        else:
            if cut < 0 and length >= cap and _boundary(esc, c, length - cap):
                cut = wp  # where the string is cut if it turns out long
            buf[wp] = c
            wp += 1
            if length + 1 > cap + ROOM:  # long: drop from the cut on (the marker's room kept)
                dropped = wp - cut
                wp = cut + RESERVE
                skip = 1
                if st[C_FIRST] < 0:
                    st[C_FIRST] = st[C_OPENED]
                st[C_CUTS] += 1
        esc = _next_esc(esc, c)
        length += 1
    st[C_GONE] = gone + r - wp
    if st[C_DONE] and r > wp:  # the bytes after the item move down, unread
        for k in range(n - r):
            buf[wp + k] = buf[r + k]
    end = wp + (n - r) if st[C_DONE] else wp
    st[C_READ], st[C_IN], st[C_ESC], st[C_LEN], st[C_START] = wp, in_str, esc, length, start
    st[C_CUT], st[C_SKIP], st[C_DROPPED] = cut, skip, dropped
    st[C_DEPTH], st[C_SEEN] = depth, seen
    return end
