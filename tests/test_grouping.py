"""group_positions (the counting sort behind store gatherers and per-iteration grouping),
take_into (a gather block by block) and row_groups (distinct rows of several columns)
against plain numpy references."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceviz.table.arrays import group_positions, row_groups, take_into, unique_rows


def _reference(values, starts):
    groups = []
    for k, lo in enumerate(starts):
        hi = starts[k + 1] if k + 1 < len(starts) else np.iinfo(np.int64).max
        groups.append(np.flatnonzero((values >= 0) & (values >= lo) & (values < hi)))
    return groups


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 60), max_size=300),
       st.lists(st.integers(1, 60), max_size=8, unique=True),
       st.sampled_from([np.int32, np.int64]))
def test_groups_match_reference(values, more_starts, dtype):
    values = np.array(values, dtype=dtype)
    starts = np.array(sorted({0, *more_starts}), dtype=np.int64)
    positions, bounds = group_positions(values, starts)
    assert positions.dtype == np.int32
    assert bounds[0] == 0 and bounds[-1] == positions.shape[0] == int((values >= 0).sum())
    for k, want in enumerate(_reference(values, starts)):
        np.testing.assert_array_equal(positions[bounds[k]:bounds[k + 1]], want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2, 59), max_size=300),
       st.lists(st.integers(1, 59), max_size=6, unique=True),
       st.sampled_from([np.int8, np.int32, np.int64]))
def test_gather_by_blocks_equals_fancy_indexing(rows, more_starts, dtype):
    """A column of 60 rows held as blocks starting at ``starts``, gathered at ``rows``
    block by block (as ColumnStore.gatherer does): ``column[rows]``, -1 where rows < 0."""
    rows = np.array(rows, dtype=np.int64)
    column = (np.arange(60) * 7 % 101 - 50).astype(dtype)
    starts = np.array(sorted({0, *more_starts}), dtype=np.int64)
    ends = [*starts[1:], 60]
    positions, bounds = group_positions(rows, starts)
    out = np.full(rows.shape[0], -1, dtype=dtype)
    for k, (lo, hi) in enumerate(zip(starts, ends)):
        take_into(out, positions[bounds[k]:bounds[k + 1]], rows, column[lo:hi], lo)
    np.testing.assert_array_equal(out, np.where(rows >= 0, column[np.maximum(rows, 0)], -1))


def test_empty():
    positions, bounds = group_positions(np.empty(0, np.int64), np.empty(0, np.int64))
    assert positions.shape == (0,) and bounds.tolist() == [0]
    positions, bounds = group_positions(np.array([-1, -2]), np.array([0]))
    assert positions.shape == (0,) and bounds.tolist() == [0, 0]


def test_values_before_the_first_start_are_refused():
    with pytest.raises(ValueError):
        group_positions(np.array([1, 5]), np.array([2, 4]))
    with pytest.raises(ValueError):
        group_positions(np.array([0]), np.empty(0, np.int64))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "uint64", "float32",
                                   "float64", "bool"])
def test_columns_from_buffers_equal_pa_array(dtype):
    """table.arrays.column (Arrow arrays from numpy buffers, no pandas import) equals
    pa.array on every dtype, with and without nulls, on strided and empty input."""
    import pyarrow as pa

    from traceviz.table.arrays import column, strings

    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 8, 9, 1000):
        values = (rng.integers(0, 100, 2 * n) % 2 == 0 if dtype == "bool"
                  else rng.integers(0, 100, 2 * n).astype(dtype))[::2]  # strided
        mask = rng.integers(0, 3, n) == 0
        for m in (None, mask, np.zeros(n, bool)):
            got, want = column(values, mask=m), pa.array(values, mask=m)
            assert got.type == want.type and got.equals(want), (dtype, n)
            assert got.null_count == (0 if m is None else int(m.sum()))
    texts = ["", "a", "é€", "kernel<int, 2>"] * 3
    assert strings(texts).equals(pa.array(texts, pa.string()))
    assert strings([]).equals(pa.array([], pa.string()))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10), st.integers(0, 200), st.sampled_from([3, 60, 2 ** 62]),
       st.randoms(use_true_random=False))
def test_row_groups_are_numpys_distinct_rows(k, n, spread, rnd):
    """The groups and first rows np.unique gives over rows, of columns of small and of
    huge values; with 9 columns of ~200 values or more the codes are numbered densely
    again before they could overflow."""
    rng = np.random.default_rng(rnd.getrandbits(32))
    cols = [rng.integers(-spread, spread, n) for _ in range(k)]
    first, group = row_groups(*cols)
    if n == 0:
        assert first.size == group.size == 0
        return
    want, want_first, want_group = np.unique(np.stack(cols, 1), axis=0, return_index=True,
                                             return_inverse=True)
    np.testing.assert_array_equal(group, want_group.reshape(-1))
    np.testing.assert_array_equal(first, want_first)
    rows, of = unique_rows(np.stack(cols, 1))
    np.testing.assert_array_equal(rows, want)
    np.testing.assert_array_equal(of, want_group.reshape(-1))
