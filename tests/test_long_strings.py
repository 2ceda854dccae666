"""Strings past MAX_STRING bytes are cut (traceviz.parse.long_strings): the one rule
wherever the string sits, the parse's buffer bounded however long a string is, what was
cut said, and every other number of the trace unchanged."""
from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

import traceviz
from traceviz.errors import TraceError
from traceviz.parse import long_strings as ls
from traceviz.parse import reader
from traceviz.parse.strings import decode_raw

CAP = 100
TOKENS = ["a", "é", "中", "😀", '\\"', "\\\\", "\\u00e9", "\\ud83d\\ude00", "\\n", "x"]


def _compacted(raw: bytes, chunk: int) -> tuple[bytes, np.ndarray]:
    """``raw`` fed to :func:`compact` ``chunk`` bytes at a time, as the reader refills."""
    buf = np.zeros(len(raw) + 8, dtype=np.uint8)
    n, st = 0, ls.new_state()
    for i in range(0, len(raw), chunk):
        part = raw[i:i + chunk]
        buf[n:n + len(part)] = np.frombuffer(part, dtype=np.uint8)
        n = ls.compact(buf, n + len(part), st, CAP)
    return bytes(buf[:n]), st


def _cut(body: bytes) -> str:
    """What decoding cuts a string body to."""
    end = ls.cut_point(np.frombuffer(body, dtype=np.uint8), 0, len(body), CAP)
    return decode_raw(body[:end]) + (ls.marker(len(body) - end) if end < len(body) else "")


def test_cutting_in_the_buffer_equals_cutting_when_decoded():
    """Random strings of escapes and multi-byte characters, fed in random pieces: the
    text left in the buffer is the text the decoder's cut makes, never split inside an
    escape or a character, and the counts say what was removed."""
    rng = np.random.default_rng(7)
    cuts = 0
    for _ in range(2000):
        tokens = [TOKENS[k] for k in rng.integers(0, len(TOKENS), int(rng.integers(0, 300)))]
        body, short = "".join(tokens).encode(), "".join(tokens[:40]).encode()
        raw = b'{"name":"' + body + b'","k":[1,"' + short + b'"]}'
        out, st = _compacted(raw, int(rng.integers(1, 60)))
        whole, whole_st = _compacted(raw, len(raw))
        assert out == whole and list(st) == list(whole_st)
        head, tail = b'{"name":"', b'","k":[1,"'
        assert decode_raw(out[len(head):out.rindex(tail)]) == _cut(body)
        assert decode_raw(out[out.rindex(tail) + len(tail):-3]) == _cut(short)
        assert int(st[ls.C_GONE]) == len(raw) - len(out)
        long = len(body) > CAP + ls.ROOM
        assert int(st[ls.C_CUTS]) == long + (len(short) > CAP + ls.ROOM)
        if long:
            assert int(st[ls.C_FIRST]) == len(head)
        cuts += long
        if long:
            assert "…(+" in _cut(body) and len(_cut(body).encode()) < CAP + 4 + 40
        else:
            assert _cut(body) == decode_raw(body)
    assert cuts > 500  # both kinds seen often


def test_invalid_utf8_is_cut_too():
    """Bytes that are no UTF-8 (continuation bytes only) still end in a cut."""
    body = b"\x80" * 1000
    out, st = _compacted(b'["' + body + b'"]', 17)
    assert int(st[ls.C_CUTS]) == 1 and len(out) < CAP + 4 + 45
    assert ls.cut_point(np.frombuffer(body, dtype=np.uint8), 0, 1000, CAP) == CAP + 4


def _trace(name: bytes, after: bytes = b"") -> bytes:
    return (b'{"traceEvents":[{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel",'
            b'"pid":1,"tid":1,"ts":10,"dur":1,"args":{"correlation":5}},'
            b'{"ph":"X","cat":"kernel","name":"' + name + b'","pid":0,"tid":7,"ts":11,'
            b'"dur":3,"args":{"correlation":5,"stream":7,"device":0,"note":"'
            + b"n" * 200_000 + b'"}},'
            b'{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":20,"dur":2,'
            b'"args":{"correlation":6,"stream":7,"device":0}}' + after + b"]}")


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_a_long_name_is_cut_the_same_whatever_the_buffer(chunk):
    """A 300 KB kernel name (and a 200 KB unread argument): with a 4 KB buffer (the
    event cut as it arrives) or a 1 MB one (cut when decoded), the table holds the same
    cut name, every number of the trace, and a warning names where the first cut
    string began."""
    name = "void kernel<" + "T" * 300_000 + ">"
    raw = _trace(name.encode())
    parsed = traceviz.parse_trace(io.BytesIO(raw), chunk_size=chunk)
    t = parsed.activities.sort_by("ts")
    kept = name.encode()[:ls.MAX_STRING].decode()
    assert t["name"].to_pylist() == [kept + ls.marker(len(name) - ls.MAX_STRING), "gemm"]
    assert t["ts"].to_pylist() == [11_000, 20_000] and t["dur"].to_pylist() == [3000, 2000]
    assert t["launch_ts"].to_pylist() == [10_000, None]
    first = raw.index(b"void kernel<")
    warned = [w for w in parsed.warnings if "longer than 64 KiB" in w]
    assert len(warned) == 1 and f"first at byte {first})" in warned[0], parsed.warnings
    # the unread argument is cut where its event passes through the buffer; decoded
    # strings only otherwise (an argument traceviz skips is never held)
    cut = 2 if chunk < 200_000 else 1
    assert f"{cut} string(s)" in warned[0]
    assert parsed.meta["stats"]["notes"]["strings longer than 64 KiB (cut)"] == cut
    parsed.close()


def test_offsets_after_a_cut_event_are_the_files():
    """An error after an event whose strings were cut in the buffer names its byte in
    the file, not in the shortened buffer."""
    raw = _trace(b"k" * 500_000, after=b',{"ph":"X",,"ts":1},{"ph":"X"}')
    for chunk in (4096, 8 << 20):  # cut in the buffer, and not
        with pytest.raises(TraceError) as err:
            traceviz.parse_trace(io.BytesIO(raw), chunk_size=chunk)
        assert err.value.offset == raw.index(b",,") + 1


def test_a_gigantic_name_is_read_through_a_small_buffer(tmp_path, monkeypatch):
    """A 64 MB name in a compressed trace: the read buffer (256 KB here) never grows,
    the name is cut as it arrives."""
    path = tmp_path / "big.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(_trace(b"Z" * (64 << 20)))
    made: list[int] = []
    real = np.empty

    def watch(shape, *a, **k):  # every buffer the reader makes
        if a[:1] == (np.uint8,) or k.get("dtype") is np.uint8:
            made.append(shape)
        return real(shape, *a, **k)

    monkeypatch.setattr(np, "empty", watch)
    parsed = traceviz.parse_trace(path, chunk_size=256 << 10)
    monkeypatch.undo()
    assert made and max(made) == 256 << 10
    name = parsed.activities.sort_by("ts")["name"][0].as_py()
    assert name == "Z" * ls.MAX_STRING + ls.marker((64 << 20) - ls.MAX_STRING)
    parsed.close()


def test_an_event_too_large_even_cut_is_refused(monkeypatch):
    """An event that stays larger than MAX_EVENT once its strings are cut (a list of a
    hundred thousand numbers here, with MAX_EVENT at 128 KB) is an error naming where it starts,
    not a buffer grown to hold it."""
    monkeypatch.setattr(reader, "MAX_EVENT", 128 << 10)
    numbers = json.dumps(list(range(100_000))).encode()
    raw = _trace(b"gemm", after=b',{"ph":"X","cat":"kernel","args":{"x":' + numbers + b"}}")
    with pytest.raises(TraceError) as err:
        traceviz.parse_trace(io.BytesIO(raw), chunk_size=4096)
    assert err.value.offset == raw.index(b',{"ph":"X","cat":"kernel","args":{"x":') + 1
    assert "larger than 0 MB" not in str(err.value)


def test_text_store_canonical_merge_and_arrow():
    """Texts by id without a Python object each: the first id of each text (hash
    matches confirmed by the bytes, so texts whose hashes collide stay apart), a merge
    that adds only what is new, and Arrow arrays made from the arena."""
    from traceviz.parse import text_store as T

    a = T.TextStore()
    a.extend(["x", "y", "x", "é", "", "y"])
    assert list(a) == ["x", "y", "x", "é", "", "y"] and a[3] == "é" and a[-1] == "y"
    assert a.canonical().tolist() == [0, 1, 0, 3, 4, 1]
    assert a.find("é") == 3 and a.find("zz") is None
    b = T.TextStore()
    b.extend(["y", "new", "new", "x", "w"])
    assert a.merge(b)[0].tolist() == [1, 6, 6, 0, 7] and list(a)[6:] == ["new", "w"]
    assert a.arrow(np.array([0, 3, 4, 6])).to_pylist() == ["x", "é", "", "new"]
    assert a.nbytes(np.array([3, 6])) == 2 + 3
    real = T._hash
    T._hash = lambda text: 5  # every text one hash: the bytes keep them apart
    try:
        c = T.TextStore()
        c.extend(["p", "q", "p"])
        assert c.canonical().tolist() == [0, 1, 0] and list(c) == ["p", "q", "p"]
    finally:
        T._hash = real


def test_a_dictionary_of_many_texts_is_made_per_row_group(tmp_path, monkeypatch):
    """Past LAZY_BYTES of texts a dictionary column keeps its texts in the store: each
    parquet row group holds the names it uses only, and the table read back (and the
    table in memory) equals the one built whole."""
    from traceviz.parse import names, output_columns
    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=1, pp=1, dp=2, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    trace = sorted((tmp_path / "job").rglob("rank_*.json*"))[0]
    whole = traceviz.parse_trace(trace, cpu=True)
    whole.write(str(tmp_path / "whole.parquet"))
    monkeypatch.setattr(names, "LAZY_BYTES", 0)
    monkeypatch.setattr(output_columns, "ROW_GROUP", 20)
    lazy = traceviz.parse_trace(trace, cpu=True)
    lazy.columns.row_group = lazy.cpu_columns.row_group = 20
    lazy.write(str(tmp_path / "lazy.parquet"))
    import pyarrow.parquet as pq

    for got, want in ((lazy.activities, whole.activities), (lazy.cpu, whole.cpu)):
        assert got.to_pylist() == want.to_pylist()
    a, b = (pq.read_table(tmp_path / f"{n}.parquet") for n in ("lazy", "whole"))
    assert a.to_pylist() == b.to_pylist() and a.schema == b.schema
    meta = pq.ParquetFile(tmp_path / "lazy.parquet").metadata
    assert meta.num_row_groups >= 5
    name = a.schema.get_field_index("name")
    distinct = len(set(a["name"].to_pylist()))
    first = pq.ParquetFile(tmp_path / "lazy.parquet").read_row_group(0)["name"]
    own = set(first.to_pylist())  # its own names only
    assert sorted(first.chunk(0).dictionary.to_pylist()) == sorted(own) and len(own) < distinct
    assert meta.row_group(0).column(name).total_uncompressed_size < \
        pq.ParquetFile(tmp_path / "whole.parquet").metadata.row_group(0).column(
            name).total_uncompressed_size
    whole.close()
    lazy.close()


def test_text_store_past_its_limit_reads_from_its_file(tmp_path):
    """Texts past the store's limit go to a file (unlinked once open: nothing left in
    the folder) and read back the same: by id, in order, as Arrow, in merges."""
    from traceviz.parse.text_store import TextStore

    names = iter(range(100))
    texts = [f"text-{i}-" + "é" * (i % 7) for i in range(300)]
    store = TextStore(limit=50, new_path=lambda: str(tmp_path / f"t{next(names)}"))
    for i in range(0, 300, 7):
        store.extend(texts[i:i + 7])
    store.extend(texts[:20])
    assert store._base > 4000 and not list(tmp_path.iterdir())  # spilled, unlinked
    assert list(store) == texts + texts[:20]
    assert [store[i] for i in (0, 150, 299)] == [texts[0], texts[150], texts[299]]
    assert store.canonical()[300:].tolist() == list(range(20))
    assert store.arrow(np.array([0, 5, 299, 310])).to_pylist() == [
        texts[0], texts[5], texts[299], texts[10]]
    other = TextStore(limit=30, new_path=lambda: str(tmp_path / f"t{next(names)}"))
    other.extend(["new", texts[3], "n2"] + texts[100:140])
    mapped, folded = store.merge(other)
    assert folded == 0
    assert mapped[:5].tolist() == [320, 3, 321, 100, 101] and store[320] == "new"
    assert store.find(texts[250]) == 250


@pytest.mark.parametrize("pending", [None, 97])
def test_many_distinct_names_grow_the_string_table(monkeypatch, pending):
    """40,000 distinct kernel names (the string table starts with room for 32,768, so it
    grows while events are being read, with categories and counts carried over; with a
    queue of 97 new strings the scanner returns to have them taken ~400 times a buffer):
    every name and count comes back."""
    from traceviz.parse import strings

    if pending:
        monkeypatch.setattr(strings, "PENDING", pending)
    n = 40_000
    events = b",".join(
        b'{"ph":"X","cat":"kernel","name":"k%d \\u00e9","pid":0,"tid":7,"ts":%d,"dur":1,'
        b'"args":{"correlation":%d,"stream":7,"device":0}}' % (i, 10 + 2 * i, i + 1)
        for i in range(n))
    parsed = traceviz.parse_trace(io.BytesIO(b'{"traceEvents":[' + events + b"]}"),
                                  chunk_size=1 << 16 if pending is None else 8 << 20)
    t = parsed.activities.sort_by("ts")
    assert t["name"].to_pylist() == [f"k{i} é" for i in range(n)]
    assert parsed.meta["stats"]["events_by_cat"] == {"kernel": n}
    parsed.close()


def test_id_table_keys_that_collide():
    """The id tables (ids keyed by a per-id row): keys equal in their low bits probe on,
    a key an earlier id has maps to that first id, lookups of absent keys find -1, and a
    table filled at once equals one filled id by id."""
    from traceviz.parse.id_table import fill, lookup_insert, new_table

    keys = np.array([[5 << 20, 7 << 20, 5 << 20, 9 << 20, 3, 7 << 20]], dtype=np.int64)
    one = new_table(6, minimum=16)
    found = np.empty(6, dtype=np.int32)
    lookup_insert(one, keys, 0, keys[0], np.arange(6, dtype=np.int32), found)
    assert found.tolist() == [0, 1, 0, 3, 4, 1]
    whole = new_table(6, minimum=16)
    fill(whole, keys, 0, 6)
    assert whole.tolist() == one.tolist() and sorted(whole[whole > 0] - 1) == [0, 1, 3, 4]
    probe = np.array([9 << 20, 11 << 20, 3], dtype=np.int64)
    lookup_insert(whole, keys, 0, probe, np.full(3, -1, np.int32), found[:3])
    assert found[:3].tolist() == [3, -1, 4]


@pytest.mark.parametrize("chunk", [4096, 1 << 18, 8 << 20])
def test_long_names_in_a_row_are_each_cut_once(chunk):
    """Events with long names back to back (the end of one and the start of the next in
    one refill of the buffer): each name is cut once, by its own length, and an error
    after them names its byte in the file, whatever the buffer."""
    name = [b"A" * 1_000_000, b'},{\\"ph\\":\\"X\\"' * 60_000, b"C" * 700_000]
    events = b",".join(
        b'{"ph":"X","cat":"kernel","name":"' + n + b'","pid":0,"tid":7,"ts":%d,"dur":1,'
        b'"args":{"correlation":%d,"stream":7,"device":0}}' % (10 + i, i + 1)
        for i, n in enumerate(name))
    raw = b'{"traceEvents":[' + events + b',{"ph":"X",,"ts":1},{"ph":"X"}]}'
    with pytest.raises(TraceError) as err:
        traceviz.parse_trace(io.BytesIO(raw), chunk_size=chunk)
    assert err.value.offset == raw.index(b",,") + 1
    parsed = traceviz.parse_trace(io.BytesIO(raw[:raw.index(b',{"ph":"X",,')] + b"]}"),
                                  chunk_size=chunk)
    got = parsed.activities.sort_by("ts")["name"].to_pylist()
    want = [decode_raw(n[:ls.MAX_STRING]) + ls.marker(len(n) - ls.MAX_STRING) for n in name]
    assert got == want
    assert parsed.meta["stats"]["notes"]["strings longer than 64 KiB (cut)"] == 3
    parsed.close()



def test_a_sealed_text_store_finds_and_adds_without_its_table(tmp_path):
    """Sealed (its hash table dropped after the scan), a store still finds the first id
    of a text, even among texts whose hashes collide, gives an added text its first id,
    reads any ascending selection of ids across its file and memory, and refuses a
    merge."""
    from traceviz.parse import text_store as T

    names = iter(range(10))
    store = T.TextStore(limit=40, new_path=lambda: str(tmp_path / f"t{next(names)}"))
    texts = [f"t{i % 50}-" + "é" * (i % 5) for i in range(200)]
    store.extend(texts)
    store.seal()
    assert store._table is None and store.find("t7-éé") == 7 and store.find("no") is None
    assert store.find(texts[120]) == 20  # the first id of the text
    ids = np.array([0, 3, 49, 50, 120, 199])
    assert list(store.select(ids)) == [texts[i] for i in ids.tolist()]
    assert list(store.select(np.zeros(0, dtype=np.int64))) == []
    store.extend(["t3-ééé", "fresh"])
    assert store.canonical()[-2:].tolist() == [3, 201] and store.find("fresh") == 201
    real = T._hash
    T._hash = lambda text: 5  # every text one hash: the bytes keep them apart
    try:
        c = T.TextStore()
        c.extend(["p", "q", "p"])
        c.seal()
        assert (c.find("q"), c.find("p"), c.find("r")) == (1, 0, None)
        c.extend(["q", "r"])
        assert c.canonical().tolist() == [0, 1, 0, 1, 4]
    finally:
        T._hash = real
    with pytest.raises(AssertionError):
        store.merge(T.TextStore())


def test_distinct_strings_past_the_cap_fold_into_one_marker():
    """Past the plan's room for distinct strings (default: what the budget holds at
    STRING_BYTES each), each new string reads as one marker: every kernel is still a
    row, names are kept up to the first fold (in the order the trace first has them)
    and one marker after it, a warning names the cap and the byte of the first folded
    name, an NCCL kernel past the cap is COMP (its name no longer says), and the table
    without a cap keeps every name."""
    from traceviz.parse import budget as B
    from traceviz.parse.strings import fold_marker

    n, cap = 3000, 700
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
               "tid": 2, "ts": 10 * k, "dur": 2, "args": {"correlation": k}} for k in range(n)]
    events += [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10 * k + 3, "dur": 5,
                "name": (f"ncclDevKernel_AllReduce {k:06d}" if k % 10 == 0
                         else f"gemm {k:06d}"), "args": {"correlation": k, "stream": 7}}
               for k in range(n)]
    data = json.dumps({"traceEvents": events}).encode()
    capped = traceviz.parse_trace(io.BytesIO(data), plan=B.MemoryPlan.fixed(64 << 20, cap))
    t = capped.activities.sort_by("ts")
    names, kinds = t["name"].to_pylist(), t["kind"].to_pylist()
    first = next(k for k, name in enumerate(names) if name == fold_marker(cap))
    assert len(names) == n and cap - 10 < first < cap
    assert names[:first] == [e["name"] for e in events[n:n + first]]
    assert set(names[first:]) == {fold_marker(cap)}
    assert kinds[:first:10] == ["COMM"] * len(range(0, first, 10))
    assert set(kinds[first:]) == {"COMP"}
    at = data.index(b'"' + events[n + first]["name"].encode() + b'"') + 1
    warned = [w for w in capped.warnings if "distinct strings" in w]
    assert len(warned) == 1 and f"more than {cap:,} distinct" in warned[0]
    assert f"(the first at byte {at})" in warned[0]
    capped.close()
    whole = traceviz.parse_trace(io.BytesIO(data), plan=B.MemoryPlan.fixed(64 << 20))
    assert whole.activities.sort_by("ts")["name"].to_pylist() == [e["name"] for e in events[n:]]
    assert not [w for w in whole.warnings if "distinct strings" in w]
    whole.close()
    plan = B.MemoryPlan(budget=512 << 20, runtime=200 << 20)
    assert plan.max_strings == (((512 - 200) << 20) - B.FIXED_WORK) // B.STRING_BYTES
    assert B.MemoryPlan(budget=100 << 20, runtime=200 << 20).max_strings == B.MIN_STRINGS


def test_a_row_group_crowded_with_names_is_written_in_pieces(tmp_path, monkeypatch):
    """Names are not spread evenly (all distinct before a fold, the marker after): a
    row group whose text dictionary would pass GROUP_TEXT_BYTES is written as pieces
    whose dictionaries each stay within it (plus one text), and the file reads back as
    the table in memory."""
    import pyarrow.parquet as pq

    from traceviz.parse import budget as B
    from traceviz.parse import names, output_columns

    monkeypatch.setattr(names, "LAZY_BYTES", 0)
    monkeypatch.setattr(output_columns, "GROUP_TEXT_BYTES", 2000)
    n = 3000
    events = [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10 * k, "dur": 5,
               "name": f"gemm {k:06d} " + "x" * 100, "args": {"correlation": k, "stream": 7}}
              for k in range(n)]  # 700 names of 112 bytes kept: 78 KB in the first group
    parsed = traceviz.parse_trace(io.BytesIO(json.dumps({"traceEvents": events}).encode()),
                                  plan=B.MemoryPlan.fixed(64 << 20, 700))
    parsed.columns.row_group = 1000
    out = tmp_path / "t.parquet"
    parsed.write(str(out))
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups >= 2 + 78_400 // 2000  # the crowded group came in pieces
    f = pq.ParquetFile(out)
    for k in range(meta.num_row_groups):
        dictionary = f.read_row_group(k, columns=["name"])["name"].chunk(0).dictionary
        assert sum(len(s.encode()) for s in dictionary.to_pylist()) <= 2000 + 112
    assert pq.read_table(out).to_pylist() == parsed.activities.to_pylist()
    parsed.close()
