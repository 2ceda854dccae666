"""Open-addressing hash tables that hold ids only: ``table[slot]`` is ``id + 1`` (0 =
empty) and the id's 64-bit key is ``keys[row, id]``, an array the caller keeps per id
anyway (a row of its per-id columns).

Four bytes a slot (an ``int32`` table, linear probing, size a power of two, load <= 1/2)
where a table of (key, id) pairs costs sixteen: at 2 M strings the scanner's string table
and the text store's table take 16 MB each instead of 64 (and half of that again while
one grows). A lookup reads the key through the id, which for a trace's few thousand
distinct strings is in cache anyway.
"""
from __future__ import annotations

import numpy as np
from numba import njit


def new_table(count: int, minimum: int = 1 << 10) -> np.ndarray:
    """An empty table with room for ``count`` ids at load <= 1/2."""
    size = minimum
    while count * 2 > size:
        size *= 2
    return np.zeros(size, dtype=np.int32)


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def slot_of(table, keys, row, h):
    """The slot holding an id whose key is ``h``, else the empty slot where it would go."""
    mask = table.shape[0] - 1
    slot = h & mask
    while True:
        e = table[slot]
        if e == 0 or keys[row, e - 1] == h:
            return slot
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True)
def fill(table, keys, row, count):
    """Insert ids ``0 .. count-1`` by ``keys[row, id]`` into the empty ``table``; an id
    whose key an earlier id has is left out (the table maps a key to its first id)."""
    for i in range(count):
        slot = slot_of(table, keys, row, keys[row, i])
        if table[slot] == 0:
            table[slot] = i + 1


@njit(nogil=True, cache=True)
def lookup_insert(table, keys, row, hashes, new_ids, found):
    """For each ``k``: ``found[k]`` = the id stored under key ``hashes[k]``; where none is,
    ``new_ids[k]`` is stored (its key must already be ``keys[row, new_ids[k]]``) and
    found, or -1 is found when ``new_ids[k]`` is negative (a lookup only). The caller
    keeps the load <= 1/2."""
    for k in range(hashes.shape[0]):
        slot = slot_of(table, keys, row, hashes[k])
        e = table[slot]
        if e != 0:
            found[k] = e - 1
        else:
            if new_ids[k] >= 0:
                table[slot] = new_ids[k] + 1
            found[k] = new_ids[k]
