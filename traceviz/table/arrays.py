"""Array helpers shared by every stage: Arrow columns as numpy codes and ints, fixed
dictionary columns, distinct rows of several columns, and grouping positions by value
interval in linear time.

:func:`group_positions` is a counting sort: two passes over the values, no n-sized
temporaries besides the result (one int32 per grouped position, int64 past 2**31
values); ``np.argsort`` would make an int64 order array and a sorted copy. Used to group
GPU activities by store block and by iteration.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from .parked import InMemory

_ARROW_OF = {np.dtype(t): getattr(pa, t)() for t in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
    "float64")}


def column(values, type_: pa.DataType | None = None, mask: np.ndarray | None = None
           ) -> pa.Array:
    """An Arrow array of a numpy array (``mask``: True where null), made from its buffers.
    ``pa.array`` imports pandas to check its input whenever pandas is installed (a
    quarter of a second at every start); this does not. Other inputs, and types that
    need a cast, go through ``pa.array``."""
    arr = values if isinstance(values, np.ndarray) else None
    target = None if arr is None else _ARROW_OF.get(arr.dtype)
    if arr is None or arr.ndim != 1 or target is None or (type_ is not None
                                                           and type_ != target):
        if arr is not None and arr.dtype == np.bool_ and type_ in (None, pa.bool_()):
            return _booleans(arr, mask)
        return pa.array(values, type=type_, mask=mask)
    arr = np.ascontiguousarray(arr)
    validity, nulls = _validity(mask, arr.shape[0])
    return pa.Array.from_buffers(target, arr.shape[0], [validity, pa.py_buffer(arr)],
                                 null_count=nulls)


PACK_ROWS = 1 << 20  # rows of a null mask packed at a time (a multiple of 8)


def _validity(mask: np.ndarray | None, n: int) -> tuple[pa.Buffer | None, int]:
    """Arrow's validity bitmap (1 = valid, LSB first) of a null ``mask``, and the nulls."""
    if mask is None:
        return None, 0
    mask = np.asarray(mask, dtype=bool)
    nulls = int(np.count_nonzero(mask))
    if not nulls:
        return None, 0
    bits = np.empty((n + 7) // 8, dtype=np.uint8)
    for lo in range(0, n, PACK_ROWS):  # no n-sized temporary
        packed = np.packbits(~mask[lo:lo + PACK_ROWS], bitorder="little")
        bits[lo // 8:lo // 8 + packed.shape[0]] = packed
    return pa.py_buffer(bits), nulls


def _booleans(arr: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    validity, nulls = _validity(mask, arr.shape[0])
    bits = pa.py_buffer(np.packbits(arr, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), arr.shape[0], [validity, bits],
                                 null_count=nulls)


def declared(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s types: the declared schema is an analysis's contract,
    so a column named otherwise or out of order, or a value its type cannot hold, is an
    error (never a silently different table)."""
    if table.column_names != schema.names:
        raise ValueError(f"columns {table.column_names} are not the declared {schema.names}")
    return table.cast(schema)


def strings(texts: list[str]) -> pa.Array:
    """A string array of ``texts`` made from its buffers (see :func:`column`)."""
    encoded = [t.encode() for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    if offsets[-1] >= 2**31:  # past 32-bit offsets: Arrow says what it does with it
        return pa.array(texts, pa.string())
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets.astype(np.int32)),
                                  pa.py_buffer(b"".join(encoded))])


def ints(col: pa.ChunkedArray | pa.Array, fill: int = -1) -> np.ndarray:
    """An int column as int64, nulls as ``fill``."""
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def codes_of(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """A string column as (int64 code per row, -1 for null; the distinct values). Only
    the dictionary becomes Python objects, never the rows."""
    import pyarrow.compute as pc

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    codes = np.asarray(pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False),
                       dtype=np.int64)
    return codes, arr.dictionary.to_pylist()


def row_texts(table: pa.Table, column: str, absent=None) -> np.ndarray:
    """A string column as one Python str per row (an object array; ``absent`` for nulls
    and when the table has no such column), built from its dictionary."""
    if column not in table.column_names:
        return np.full(table.num_rows, absent, dtype=object)
    codes, texts = codes_of(table[column])
    return np.array([str(t) for t in texts] + [absent], dtype=object)[codes]


def index_in(col: pa.ChunkedArray | pa.Array, values: tuple[str, ...]) -> np.ndarray:
    """Per row, the position of its value in ``values`` (-1: null or not listed): the
    codes of an enum column of :mod:`traceviz.table.schema`."""
    codes, dictionary = codes_of(col)
    position = np.array([values.index(d) if d in values else -1 for d in dictionary]
                        + [-1], dtype=np.int64)
    return position[codes]


def fixed_dictionary(codes: np.ndarray, names: tuple[str, ...],
                     store: InMemory | None = None) -> pa.DictionaryArray:
    """A dictionary column of ``names`` from codes into them (negative codes: null);
    its indices and null mask made in ``store`` (:mod:`traceviz.table.parked`)."""
    store = store or InMemory()
    mask = store.map(bool, lambda c: c < 0, codes)
    indices = store.map(np.int32, lambda c: np.maximum(c, 0), codes)
    # safe=False: valid by construction (checking reads every index)
    return pa.DictionaryArray.from_arrays(column(indices, mask=mask), strings(list(names)),
                                          safe=False)


def row_groups(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, group)`` of the rows of ``columns`` (equal-length integer arrays, the
    columns of one table of rows): ``group[i]``, the id of row i's tuple of values, the
    distinct tuples numbered in lexicographic order, and ``first[g]``, the first row of
    group g; as ``np.unique(np.stack(columns, 1), axis=0, return_index=True,
    return_inverse=True)`` gives them. Each column is coded densely and folded into the
    codes so far (numbered densely again before they could pass 2**62), so every sort is
    of one int64 per row; ``np.unique`` over rows sorts them as opaque records, ~20x
    slower (2 s of 11 for one 8-rank job's diagnosis)."""
    code = np.zeros(len(columns[0]) if columns else 0, np.int64)
    n = 1  # the codes so far are below n
    for col in columns:
        values, c = np.unique(np.asarray(col), return_inverse=True)
        if n * len(values) >= 2 ** 62:  # the codes so far numbered densely first
            _, code = np.unique(code, return_inverse=True)
            code = code.reshape(-1)
            n = int(code.max()) + 1
        code = code * len(values) + c.reshape(-1)
        n *= len(values)
    _, first, group = np.unique(code, return_index=True, return_inverse=True)
    return first, group.reshape(-1)


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct rows of keys, in lexicographic order; each row's index in them)``: as
    ``np.unique(keys, axis=0, return_inverse=True)`` gives them for a 2-D integer array,
    by :func:`row_groups`."""
    first, group = row_groups(*keys.T)
    return keys[first], group


def group_positions(values: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, bounds)``: the positions ``i`` with ``values[i] >= 0``, grouped by
    the interval ``starts[k] <= values[i] < starts[k+1]`` they fall in (``starts``
    ascending, ``starts[0] <= min value``); group k's positions, ascending, are
    ``positions[bounds[k]:bounds[k+1]]``."""
    starts = np.asarray(starts, dtype=np.int64)
    bounds = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    positions = np.empty(int((values >= 0).sum()),
                         dtype=np.int32 if values.shape[0] < 2**31 else np.int64)
    if positions.shape[0]:
        lowest = np.min(values, where=values >= 0, initial=np.iinfo(values.dtype).max)
        if starts.shape[0] == 0 or lowest < starts[0]:
            raise ValueError("every value >= 0 must lie at or after starts[0]")
        _group(values, starts, positions, bounds)
    return positions, bounds


@njit(cache=True, nogil=True)
def _interval_of(starts: np.ndarray, value) -> int:
    """Index of the interval holding ``value``: the last start <= value."""
    lo, hi = 0, starts.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= value:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _interval_from(starts: np.ndarray, value, k) -> int:
    """:func:`_interval_of`, trying interval ``k`` first (values come mostly in order)."""
    if starts[k] <= value and (k + 1 == starts.shape[0] or value < starts[k + 1]):
        return k
    return _interval_of(starts, value)


@njit(cache=True, nogil=True)
def _group(values, starts, positions, bounds) -> None:
    k = 0
    for i in range(values.shape[0]):
        if values[i] >= 0:
            k = _interval_from(starts, values[i], k)
            bounds[k + 1] += 1
    for k in range(1, bounds.shape[0]):
        bounds[k] += bounds[k - 1]
    fill = bounds[:-1].copy()
    k = 0
    for i in range(values.shape[0]):
        if values[i] >= 0:
            k = _interval_from(starts, values[i], k)
            positions[fill[k]] = i
            fill[k] += 1


@njit(cache=True, nogil=True)
def take_into(out: np.ndarray, positions: np.ndarray, rows: np.ndarray, values: np.ndarray,
              start: int) -> None:
    """``out[p] = values[rows[p] - start]`` for each ``p`` in ``positions`` (one block's
    share of a gather: no temporaries)."""
    for j in range(positions.shape[0]):
        p = positions[j]
        out[p] = values[rows[p] - start]
