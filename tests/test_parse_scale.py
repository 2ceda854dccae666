"""Many rows, strings and threads: block flushes, table growth and spilling to disk."""
from __future__ import annotations

import io
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import traceviz
from traceviz.parse.budget import MemoryPlan
from traceviz.parse.columns import Block, SpillBudget
from traceviz.parse.output_columns import OutputColumns


def big_trace(n: int, threads: int) -> bytes:
    """``n`` kernels with distinct names, each launched by a runtime call inside a
    cpu_op, spread over ``threads`` CPU threads; four ProfilerSteps."""
    parts = []
    step = n // 4 * 10  # µs: each step holds n/4 events spaced 10 µs
    for s in range(4):
        parts.append('{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,'
                     '"tid":0,"ts":%d.000,"dur":%d.000}' % (s, s * step, step))
    for i in range(n):
        th = i % threads
        t = i * 10_000  # ns; every event spaced by 10 µs
        parts.append('{"ph":"X","cat":"cpu_op","name":"op_%d","pid":1,"tid":%d,"ts":%d.%03d,'
                     '"dur":5.000,"args":{"External id":%d}}' % (i, th, t // 1000, t % 1000, i))
        parts.append('{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,'
                     '"tid":%d,"ts":%d.%03d,"dur":1.000,"args":{"correlation":%d}}'
                     % (th, (t + 1000) // 1000, (t + 1000) % 1000, i))
        parts.append('{"ph":"X","cat":"kernel","name":"kernel_%d","pid":0,"tid":7,'
                     '"ts":%d.%03d,"dur":2.500,"args":{"device":0,"stream":7,"correlation":%d}}'
                     % (i, (t + 4000) // 1000, (t + 4000) % 1000, i))
    return ('{"traceEvents":[' + ",".join(parts) + "]}").encode()


def test_growth_flush_and_spill():
    n = 150_000  # > 2 blocks per store, > 2**16 distinct strings, > 1024 threads
    data = big_trace(n, threads=3000)
    spill_root = tempfile.mkdtemp()
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = spill_root
    tempfile.tempdir = None
    try:
        result = traceviz.parse_trace(io.BytesIO(data), plan=MemoryPlan.fixed(4 << 20),
                                      chunk_size=1 << 20)
    finally:
        if old is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
    stats = result.meta["stats"]
    assert stats["spilled_bytes"] > 0
    assert os.listdir(spill_root)  # spilled columns live until the result is closed
    t = result.activities.to_pydict()
    result.close()
    assert os.listdir(spill_root) == []
    assert len(t["ts"]) == n
    idx = np.arange(n)
    assert t["name"] == [f"kernel_{i}" for i in idx]
    assert t["ts"] == (idx * 10_000 + 4000).tolist()
    assert set(t["dur"]) == {2500}
    assert t["launch_ts"] == (idx * 10_000 + 1000).tolist()
    assert t["launch_tid"] == (idx % 3000).tolist()
    assert t["cpu_op"] == [f"op_{i}" for i in idx]
    assert t["cpu_op_external_id"] == idx.tolist()
    assert t["iteration"] == (idx // (n // 4)).tolist()
    assert stats["join"]["launched"] == n


def test_output_columns_spill_only_past_the_bound(tmp_path):
    """Columns stay in memory while they fit; only the one past the bound goes to disk,
    and the table and its parquet file hold every column either way."""
    n = 300_000
    columns = {"a": pa.array(np.arange(n)), "b": pa.array(np.arange(n) * 2),
               "c": pa.array((np.arange(n) % 100).astype(np.int8))}
    budget = SpillBudget(0)
    out = OutputColumns(n, budget, spill_bytes=8 * n + n, row_group=1 << 16)
    for name, array in columns.items():
        out.add(name, array)
    assert len(os.listdir(budget.folder())) == 1  # b: a (8n bytes) and c (n) fit
    expected = pa.table(columns)
    assert out.table().replace_schema_metadata(None).equals(expected)
    out.write_parquet(str(tmp_path / "t.parquet"))
    assert pq.read_table(tmp_path / "t.parquet").replace_schema_metadata(None).equals(expected)
    out.close()
    budget.close()


def test_coalesce_joins_blocks_in_memory_by_identity():
    """Neighbouring blocks in memory join up to the row limit (columns, ts range, start);
    spilled ones stay apart; blocks equal in every plain field (two parts' first blocks)
    are told apart by identity, not value."""
    budget = SpillBudget(1 << 30)
    try:
        def block(start, ts):
            b = Block(start=start, rows=len(ts), store="ops", ts_min=min(ts), ts_max=max(ts),
                      columns={"ts": np.array(ts, dtype=np.int64)})
            budget.add(b)
            return b

        twin = block(3, [2, 9, 1])  # another part's block: as ``second`` but its values
        first, second, third, fourth = (block(0, [5, 6, 7]), block(3, [1, 9, 2]),
                                        block(6, [4, 4, 4]), block(9, [8]))
        held = budget._held["ops"]
        budget._spill(held.pop(next(k for k, b in enumerate(held) if b is third)))
        blocks = [first, second, third, fourth]
        budget.coalesce(blocks, rows=6)
        assert [(b.start, b.rows) for b in blocks] == [(0, 6), (6, 3), (9, 1)]
        np.testing.assert_array_equal(blocks[0].get("ts"), [5, 6, 7, 1, 9, 2])
        assert (blocks[0].ts_min, blocks[0].ts_max) == (1, 9)
        assert blocks[1] is third and blocks[1].get("ts").tolist() == [4, 4, 4]
        assert any(b is twin for b in held) and any(b is blocks[0] for b in held)
        assert not any(b is first or b is second for b in held)
    finally:
        budget.close()


def test_a_spill_file_is_read_by_two_threads_at_once(tmp_path):
    """The ops store is read beside the correlation join: a spill file's reads are
    positional, so threads reading one file at once each get their own arrays."""
    from concurrent.futures import ThreadPoolExecutor

    from traceviz.parse.columns import SpillFile

    spill = SpillFile(str(tmp_path / "s"))
    arrays = [np.arange(k * 1000, k * 1000 + 997 + k, dtype=np.int64) for k in range(40)]
    offsets = [spill.append(a) for a in arrays]

    def read_all(turn: int) -> bool:
        order = range(40) if turn % 2 else range(39, -1, -1)
        return all(np.array_equal(spill.read(offsets[k], np.dtype(np.int64),
                                              arrays[k].shape[0]), arrays[k])
                   for _ in range(20) for k in order)

    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(read_all, range(8)))
    spill.close()


def test_grid_counts_are_numpy_histograms():
    # the ops' time histogram that plans the span buckets: numpy's counts, values on and
    # past both ends of the grid included, a grid with repeated edges (a short trace)
    from traceviz.parse.links import grid_counts

    rng = np.random.default_rng(7)
    for span in (3, 100, 5000, 10**9):
        lo = int(rng.integers(0, 10**12))
        grid = np.linspace(lo, lo + span + 1, 4097).astype(np.int64)
        values = np.concatenate([rng.integers(lo - 50, lo + span + 50, size=20_000),
                                 [lo, lo - 1, lo + span, lo + span + 1, lo + span + 2]])
        expected = np.histogram(values, bins=grid)[0]
        got = grid_counts(values, grid)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), span
    assert grid_counts(np.empty(0, np.int64), grid).sum() == 0
