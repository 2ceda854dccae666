"""The interval engine against a brute-force reference over a unit time grid."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceviz.intervals import (
    combination_times,
    grouped_combination_times,
    grouped_measure,
    intersect,
    measure,
    union,
)

intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12), st.integers(0, 2),
                               st.integers(0, 3)), max_size=40)


def arrays(items):
    a = np.array(items, dtype=np.int64).reshape(-1, 4)
    return a[:, 0], a[:, 0] + a[:, 1], a[:, 2], a[:, 3]


def grid(starts, ends, lo=0, hi=80):
    """Which unit cells [t, t+1) each interval covers: bool[len, hi - lo]."""
    t = np.arange(lo, hi)
    return (starts[:, None] <= t) & (t < ends[:, None])


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_union_and_measure(items):
    s, e, _, _ = arrays(items)
    covered = grid(s, e).any(axis=0)
    us, ue = union(s, e)
    assert measure(s, e) == covered.sum()
    assert (np.diff(us) > 0).all() and (us[1:] > ue[:-1]).all()  # disjoint, not touching
    assert np.array_equal(grid(us, ue).any(axis=0), covered)


@settings(max_examples=300, deadline=None)
@given(intervals, intervals)
def test_intersect(a, b):
    sa, ea, _, _ = arrays(a)
    sb, eb, _, _ = arrays(b)
    ins, ine = intersect(union(sa, ea), union(sb, eb))
    want = grid(sa, ea).any(axis=0) & grid(sb, eb).any(axis=0)
    assert np.array_equal(grid(ins, ine).any(axis=0), want)
    assert (ine > ins).all()


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_grouped_combination_times(items):
    s, e, c, k = arrays(items)
    got = grouped_combination_times(s, e, c, k, 4, 3)
    for key in range(4):
        sel = k == key
        want = np.zeros(8, dtype=np.int64)
        if sel.any():  # idle (mask 0) spans first start to last end, empty ones included
            lo, hi = s[sel].min(), e[sel].max()
            cells = np.zeros(hi - lo, dtype=np.int64)
            for cat in range(3):
                m = sel & (c == cat)
                cells |= grid(s[m], e[m], lo, hi).any(axis=0).astype(np.int64) << cat
            want = np.bincount(cells, minlength=8)
        assert got[key].tolist() == want.tolist(), key
        assert grouped_measure(s, e, k, 4)[key] == want[1:].sum()
    if len(s):
        assert combination_times(s, e, c, 3).sum() >= 0


def test_touching_intervals_merge():
    us, ue = union(np.array([0, 5, 20]), np.array([5, 10, 30]))
    assert us.tolist() == [0, 20] and ue.tolist() == [10, 30]
    # idle between groups of one key counts in mask 0; nothing before the first start
    t = combination_times(np.array([10, 30]), np.array([20, 35]), np.array([0, 1]), 2)
    assert t.tolist() == [10, 10, 5, 0]


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_grouped_top_times(items):
    """Each covered unit cell counts once, for the lowest level open in it; per group the
    levels add up to the union's length."""
    from traceviz.intervals import grouped_top_times

    s, e, level, key = arrays(items)
    got = grouped_top_times(s, e, level, key, 4, 3)
    for k in range(4):
        on = key == k
        cells = grid(s[on], e[on])
        want = np.zeros(3, np.int64)
        for t in range(cells.shape[1]):
            open_levels = level[on][cells[:, t]]
            if open_levels.size:
                want[open_levels.min()] += 1
        assert np.array_equal(got[k], want)
        assert got[k].sum() == measure(s[on], e[on])


spans = st.lists(st.tuples(st.integers(0, 30), st.integers(-2, 10), st.integers(0, 2)),
                 max_size=40)
points = st.lists(st.tuples(st.integers(-2, 45), st.integers(-1, 2)), max_size=30)


@settings(max_examples=400, deadline=None)
@given(spans, points, st.booleans())
def test_innermost_enclosing(items, queries, keyed):
    """Per point: of the spans on its thread holding it (``ts <= t < ts + max(dur, 0)``)
    the latest-starting, then the shortest, then the largest key; -1 for none and for a
    negative thread. Many spans start together (the ties the sweep's order breaks)."""
    from traceviz.intervals.containment import innermost_enclosing

    s = np.array(items, dtype=np.int64).reshape(-1, 3)
    q = np.array(queries, dtype=np.int64).reshape(-1, 2)
    ts, dur, thread = s[:, 0], s[:, 1], s[:, 2]
    key = np.arange(s.shape[0])[::-1].copy() if keyed else None
    got = innermost_enclosing(ts, dur, thread, q[:, 0], q[:, 1], span_key=key)
    k = np.arange(s.shape[0]) if key is None else key
    end = ts + np.maximum(dur, 0)
    for (t, th), g in zip(q.tolist(), got.tolist()):
        holding = [i for i in range(s.shape[0])
                   if th >= 0 and thread[i] == th and ts[i] <= t < end[i]]
        best = max(holding, key=lambda i: (ts[i], -end[i], k[i]), default=-1)
        assert g == best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(
    [0, 1, 7, -5, 2**40, -2**40, 2**62, -2**63, 2**63 - 1])), max_size=30))
def test_by_thread_then_time_is_lexsort(items):
    # one stable argsort of a packed key where thread and time fit an int64 together,
    # numpy's lexsort where they do not (times spread over the whole int64 range)
    from traceviz.intervals.containment import by_thread_then_time

    a = np.array(items, dtype=np.int64).reshape(-1, 2)
    assert np.array_equal(by_thread_then_time(a[:, 0], a[:, 1]),
                          np.lexsort((a[:, 1], a[:, 0])))
    small = a[:, 0].astype(np.int8), (a[:, 1] % 1000).astype(np.float64)  # other dtypes
    assert np.array_equal(by_thread_then_time(*small), np.lexsort(small[::-1]))
