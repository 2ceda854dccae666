"""Per-activity arrays parked in files (traceviz.table.parked): the same tables as in
memory, values kept across page releases, nothing left behind."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from helpers import needs_shared, parking_everything, shared_traces, trace_id

import traceviz
from traceviz.parse.budget import (
    BUILD_BYTES_PER_STRING,
    BUILD_WORK,
    LINK_BYTES_PER_ACTIVITY,
    MemoryPlan,
)
from traceviz.table.parked import PARK_MIN_BYTES, InMemory, Parking

TRACES = {trace_id(p): p for p in shared_traces()}


def _parking(tmp_path) -> Parking:
    names = iter(range(10**6))
    return Parking(lambda: str(tmp_path / f"p{next(names)}"))


def test_parked_arrays_keep_their_values_across_releases(tmp_path):
    store = _parking(tmp_path)
    n = PARK_MIN_BYTES // 4 + 5  # both past the least size parked, not whole fill units
    values = np.arange(n, dtype=np.int64) * 3 - 7
    kept = store.map(np.int64, lambda v: v, values)
    filled = store.full(n, -1, np.int32)
    assert kept.base is not None and kept.flags.writeable
    assert store.parked_bytes == n * 8 + n * 4
    assert not os.listdir(tmp_path)  # unlinked once mapped
    kept[::1000] += 1  # written through the mapping
    filled[-3:] = 9
    store.release()
    expect = values.copy()
    expect[::1000] += 1
    assert np.array_equal(kept, expect)
    assert (filled[:-3] == -1).all() and (filled[-3:] == 9).all()
    store.release()
    assert np.array_equal(kept, expect)
    # a mapping goes with the last array viewing it
    view = kept[10:20]
    del kept, filled
    gc.collect()
    assert len(store._maps) == 1
    assert np.array_equal(view, expect[10:20])
    del view
    gc.collect()
    assert len(store._maps) == 0


def test_small_arrays_stay_in_memory(tmp_path):
    store = _parking(tmp_path)
    small = np.arange(10)
    assert np.array_equal(store.map(np.int64, lambda v: v + 1, small), small + 1)
    assert np.array_equal(store.full(10, 4, np.int8), np.full(10, 4, np.int8))
    assert store.map(np.float64, lambda v: v, np.empty(0)).shape == (0,)
    assert store.parked_bytes == 0 and not store._maps


def test_slices_cover_every_row_once(tmp_path):
    with parking_everything(slice_rows=7):
        parts = list(_parking(tmp_path).slices(23))
        assert list(InMemory().slices(23)) == [(0, 23)]
    assert parts == [(0, 7), (7, 14), (14, 21), (21, 23)]
    assert list(_parking(tmp_path).slices(0)) == list(InMemory().slices(0)) == [(0, 0)]


PARKED_TRACES = ["hta/negative_queue_length_values_check/rank0.json.gz",
                 "tracelens/mi300/resnet_act_checkpoint.json.gz",
                 "hta/trace_diff/control/control.json.gz",
                 # batched sends / receives, the CPU running ahead of the GPU
                 "gpu/megatron_1f1b/iteration_5/rank_0004_iter_5.pt.trace.json.gz",
                 "gpu/single_gpt/single_gpt.json.gz"]


@needs_shared
@pytest.mark.parametrize("name", PARKED_TRACES)
def test_parked_build_equals_in_memory(name):
    """With a budget the activities do not fit in, every per-activity array is parked
    and worked on a few hundred activities at a time: the table and metadata are those
    of the in-memory build."""
    path = TRACES[name]
    full = traceviz.parse_trace(path)
    assert full.meta["stats"]["parked_bytes"] == 0
    with parking_everything(slice_rows=331):
        parked = traceviz.parse_trace(path, plan=MemoryPlan.fixed(2 << 20))
    assert parked.meta["stats"]["parked_bytes"] > 64 * full.activities.num_rows
    assert parked.activities.replace_schema_metadata(None).equals(
        full.activities.replace_schema_metadata(None))
    for key in ("classification", "steps"):
        assert parked.meta[key] == full.meta[key]
    assert {k: v for k, v in parked.meta["stats"].items()
            if k not in ("parked_bytes", "spilled_bytes")} == {
        k: v for k, v in full.meta["stats"].items()
        if k not in ("parked_bytes", "spilled_bytes")}
    parked.close()
    full.close()


@needs_shared
def test_gpu_fields_are_made_beside_the_phases_where_the_budget_has_room(monkeypatch):
    """In memory, the GPU fields nothing else reads are made in a second thread while the
    phases are classified; parked, after them: the same table either way."""
    from traceviz.ingest import build

    seen = []

    def spy(work, at_once):
        seen.append(at_once)
        return beside(work, at_once)

    beside = build._beside
    monkeypatch.setattr(build, "_beside", spy)
    path = TRACES["hta/trace_diff/control/control.json.gz"]
    # a plan of its own: the default one measures this process, which other tests grew
    full = traceviz.parse_trace(path, plan=MemoryPlan.fixed(256 << 20))
    with parking_everything():
        parked = traceviz.parse_trace(path, plan=MemoryPlan.fixed(2 << 20))
    assert seen == [True, False]
    assert parked.activities.replace_schema_metadata(None).equals(
        full.activities.replace_schema_metadata(None))
    parked.close()
    full.close()


def _spill_folders() -> set:
    """This process's spill folders (test workers run side by side)."""
    import tempfile
    from pathlib import Path

    return {p for p in Path(tempfile.gettempdir()).glob("traceviz-spill-*")
            if f"-{os.getpid()}-" in p.name}


@needs_shared
def test_an_error_beside_the_phases_is_raised(monkeypatch):
    from traceviz.ingest import build

    def broken(*args):
        raise RuntimeError("the GPU fields failed")

    seen = []

    def spy(work, at_once):
        seen.append(at_once)
        return beside(work, at_once)

    beside = build._beside
    before = _spill_folders()
    monkeypatch.setattr(build, "_put_gpu_fields", broken)
    monkeypatch.setattr(build, "_beside", spy)
    with pytest.raises(RuntimeError, match="the GPU fields failed"):
        traceviz.parse_trace(TRACES["hta/trace_diff/control/control.json.gz"],
                             plan=MemoryPlan.fixed(64 << 20))
    assert seen == [True]  # raised from the second thread
    assert _spill_folders() <= before


@needs_shared
def test_an_error_of_the_phases_waits_for_the_work_beside(monkeypatch):
    """The phases fail while the GPU fields are being made: the error is raised once the
    work beside them has ended (it reads the trace's spill files, which go with it)."""
    import time

    from traceviz.ingest import build

    ended = []
    put_fields = build._put_gpu_fields

    def slow(*args):
        time.sleep(0.3)
        put_fields(*args)
        ended.append(True)

    def broken(*args, **kwargs):
        raise RuntimeError("the phases failed")

    before = _spill_folders()
    monkeypatch.setattr(build, "_put_gpu_fields", slow)
    monkeypatch.setattr(build, "_phases", broken)
    with pytest.raises(RuntimeError, match="the phases failed"):
        traceviz.parse_trace(TRACES["hta/trace_diff/control/control.json.gz"],
                             plan=MemoryPlan.fixed(64 << 20))
    assert ended == [True]
    assert _spill_folders() <= before


def test_budget_parks_what_it_cannot_hold():
    """The arrays are parked exactly when, held in memory, they would pass the budget
    less its slack (an eighth), texts held and per-string lookups counted."""
    runtime, held, strings = 200 << 20, 30 << 20, 1_000_000
    n = 4_000_000
    need = (runtime + held + BUILD_WORK + strings * BUILD_BYTES_PER_STRING
            + n * LINK_BYTES_PER_ACTIVITY)
    least = need * 8 // 7 + 8  # the smallest budget whose seven eighths cover the need
    while least - 1 - (least - 1) // 8 >= need:
        least -= 1
    assert least - least // 8 >= need > (least - 1) - (least - 1) // 8
    assert MemoryPlan(least, runtime).parks(n, held, strings) is False
    assert MemoryPlan(least - 1, runtime).parks(n, held, strings) is True
    assert MemoryPlan(least, runtime).parks(n, held + 1, strings) is True


def test_sliced_helpers_equal_whole_array_numpy(tmp_path):
    """each / map / count / bincount / take / scatter give the whole-array result
    whatever the slices (7 rows here: slices cut the positions unevenly)."""
    rng = np.random.default_rng(5)
    values = rng.integers(-3, 40, 1000)
    positions = np.sort(rng.choice(1000, 137, replace=False))
    with parking_everything(slice_rows=7):
        for store in (InMemory(), _parking(tmp_path)):
            assert np.array_equal(store.map(np.int64, lambda v: v * 2 - 1, values),
                                  values * 2 - 1)
            assert np.array_equal(store.each(1000, np.int32, lambda lo, hi: np.arange(lo, hi)),
                                  np.arange(1000))
            assert store.count(values, lambda v: v < 0) == int((values < 0).sum())
            assert np.array_equal(store.bincount(np.maximum(values, 0), 3),
                                  np.bincount(np.maximum(values, 0), minlength=3))
            assert np.array_equal(store.take(values, positions), values[positions])
            assert np.array_equal(store.positions(values, lambda v: v < 0),
                                  np.flatnonzero(values < 0))
            assert np.array_equal(store.unique(lambda v, w: v[w > 20], values, values),
                                  np.unique(values[values > 20]))
            out = store.full(1000, -1, np.int64)
            store.scatter(out, positions, values[positions] + 100)
            expect = np.full(1000, -1)
            expect[positions] = values[positions] + 100
            assert np.array_equal(out, expect)
            store.scatter(out, positions, 0)  # a scalar for every position
            expect[positions] = 0
            assert np.array_equal(out, expect)


def test_sliced_helpers_hold_a_slice_not_the_array(tmp_path):
    """What the sliced helpers allocate (numpy buffers, as tracemalloc sees them) stays
    near a slice's rows, not the parked array's: 8 slices of 1 M int32 here."""
    import tracemalloc

    from traceviz.table.parked import SLICE_ROWS

    store = _parking(tmp_path)
    n = 8 * SLICE_ROWS
    iteration = store.each(n, np.int32, lambda lo, hi: np.arange(lo, hi) // 1000)
    slice_bytes = SLICE_ROWS * 8  # a slice of int64, the widest working array here
    helpers = {
        "unique": lambda: store.unique(lambda i: i, iteration),
        "count": lambda: store.count(iteration, lambda i: i % 2 == 0),
        "bincount": lambda: store.bincount(iteration, 7),
        "map": lambda: store.map(np.int64, lambda i: i * 2, iteration),
    }
    for name, helper in helpers.items():
        gc.collect()
        tracemalloc.start()
        try:
            result = helper()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * slice_bytes, (name, peak)  # the whole array: 4 * n bytes or more
        del result
    assert np.array_equal(store.unique(lambda i: i, iteration), np.arange(n // 1000 + 1))


def test_null_masks_pack_a_slice_at_a_time(monkeypatch):
    """A validity bitmap packed PACK_ROWS rows at a time is the whole mask's."""
    from traceviz.table import arrays

    monkeypatch.setattr(arrays, "PACK_ROWS", 16)
    rng = np.random.default_rng(2)
    for n in (1, 15, 16, 17, 333):
        mask = rng.random(n) < 0.4
        mask[0] = True
        bits, nulls = arrays._validity(mask, n)
        assert nulls == int(mask.sum())
        assert np.array_equal(np.frombuffer(bits, np.uint8),
                              np.packbits(~mask, bitorder="little"))
    assert arrays._validity(np.zeros(5, dtype=bool), 5) == (None, 0)


@needs_shared
def test_full_temporary_folder_while_parking_is_one_line(monkeypatch):
    """The disk fills up while the per-activity arrays are parked: the one-line spill
    error (the folder, what to do), no spill folder or parked file left behind."""
    import tempfile
    from pathlib import Path

    from traceviz.errors import TraceVizError
    from traceviz.table import parked

    def full(fd, data):
        raise OSError(28, "No space left on device")

    def ours() -> set:  # this process's spill folders (test workers run side by side)
        return {p for p in Path(tempfile.gettempdir()).glob("traceviz-spill-*")
                if f"-{os.getpid()}-" in p.name}

    before = ours()
    with parking_everything(), pytest.raises(TraceVizError) as err:
        monkeypatch.setattr(parked.os, "write", full)
        traceviz.parse_trace(TRACES["hta/trace_diff/control/control.json.gz"],
                             plan=MemoryPlan.fixed(2 << 20))
    monkeypatch.undo()
    message = str(err.value)
    assert "cannot write the spill files" in message and "TMPDIR" in message
    assert "No space left on device" in message and "\n" not in message
    assert ours() <= before


@pytest.mark.parametrize("with_stack", [False, True])
def test_phases_a_slice_at_a_time_equal_whole(tmp_path, with_stack):
    """The phase / micro-batch / chunk of every activity, worked a few activities at a
    time (what bounds a trace without ProfilerStep: one iteration of millions of
    activities), are those of the whole iteration at once: backward ops are paired with
    their forward op by the votes of every slice together."""
    from traceviz.synth import SynthConfig, synthesize
    from traceviz.table import parked

    synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=4, layers=2, recompute=True,
                           with_stack=with_stack), tmp_path / "job")
    for trace in sorted((tmp_path / "job").rglob("rank_*.json*")):
        whole = traceviz.parse_trace(trace)
        saved = parked.SLICE_ROWS
        parked.SLICE_ROWS = 13
        try:
            sliced = traceviz.parse_trace(trace)
        finally:
            parked.SLICE_ROWS = saved
        cols = ["phase", "microbatch", "chunk"]
        assert sliced.activities.select(cols).equals(whole.activities.select(cols))
        assert sliced.meta["classification"] == whole.meta["classification"]
        evidence = whole.meta["classification"]["microbatch_evidence"]
        assert evidence["backward ops paired with their forward op by Sequence number"] > 0
        assert set(whole.activities["phase"].to_pylist()) >= {"FWD", "BWD", "RECOMPUTE"}
        whole.close()
        sliced.close()
