"""A compressed trace scanned in segments cut while it is inflated, one scanner thread per
core (traceviz.parse.segments, reader._scan_segments), gives the one-pass result: the
same GPU and CPU tables, metadata and warnings on real gzip and zstd traces cut into
segments of several sizes by two and three scanners; the one pass when a cut is not
between two events; the same errors and warnings for a cut or corrupt stream, corrupt
JSON in a later segment, an empty or non-JSON stream; and no thread left behind."""
from __future__ import annotations

import copy
import gzip
import re
import threading

import pytest
import zstandard
from helpers import launch_events, needs_shared, shared_traces, trace_id, trace_text

import traceviz
import traceviz.parse.reader as reader
from traceviz.errors import TraceError
from traceviz.parse.budget import FIXED_WORK, SEGMENT_OVERHEAD, MemoryPlan
from traceviz.parse.segments import EVENT_BOUNDARY
from traceviz.parse.strings import fold_marker

REAL = ("hta/trace_diff/control/control.json.gz",
        "hta/nccl_parser_config/nccl_data.json.gz",
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "tracelens/mi300/resnet_act_checkpoint.json.gz",
        "kineto/resnet50/worker0.1623143089861.pt.trace.json.gz")


def _mode(monkeypatch, segment: int | None, cores: int = 2) -> list:
    """Scan compressed traces in segments of ``segment`` bytes with ``cores`` scanners
    (None: in one pass); returns the list that counts the merges."""
    merged: list = []
    merge = reader._merge

    def counting(a, b):
        merged.append(1)
        merge(a, b)

    monkeypatch.setattr(reader, "_merge", counting)
    if segment is None:
        monkeypatch.setattr(reader, "STREAM_MIN", 1 << 62)
    else:
        monkeypatch.setattr(reader, "STREAM_MIN", 0)
        monkeypatch.setattr(reader, "SEGMENT_BYTES", segment)
        monkeypatch.setattr(reader, "_cores", lambda: cores)
    return merged


class _SmallBlocks(MemoryPlan):
    """Room for segments, and column blocks spilled past 1 MB while scanning (a later
    segment's spilled blocks are fixed as they are read, not when merged)."""

    @property
    def scan_blocks(self) -> int:
        return 1 << 20


# the parses' memory shares, whatever the test process already holds: blocks spilled
# early, or never
SPILLING, IN_MEMORY = _SmallBlocks.fixed(64 << 20), MemoryPlan.fixed(8 << 30)


def _parse(path, monkeypatch, segment: int | None, cores: int = 2,
           plan: MemoryPlan = SPILLING, spilled: list | None = None):
    """(GPU table, CPU table, metadata, warnings, merges) of ``path``; the metadata
    without the bytes spilled (a fact of the run: blocks differ in size and number),
    which go to ``spilled``."""
    spilled = [] if spilled is None else spilled
    merged = _mode(monkeypatch, segment, cores)
    parsed = traceviz.parse_trace(path, cpu=True, plan=plan)
    try:
        meta = copy.deepcopy(parsed.meta)
        spilled.append(meta["stats"].pop("spilled_bytes"))
        return (parsed.activities.replace_schema_metadata(None),
                parsed.cpu.replace_schema_metadata(None), meta, parsed.warnings,
                len(merged))
    finally:
        parsed.close()


def _error(path, monkeypatch, segment: int | None) -> str:
    _mode(monkeypatch, segment)
    with pytest.raises(TraceError) as exc:
        traceviz.parse_trace(path, plan=SPILLING)
    return str(exc.value)


@needs_shared
@pytest.mark.parametrize("name", REAL)
def test_segments_equal_one_pass(name, monkeypatch):
    path = next(p for p in shared_traces() if trace_id(p) == name)
    gpu, cpu, meta, warnings, _ = _parse(path, monkeypatch, None)
    merges, spilled = 0, []
    for segment, cores, plan in ((64 << 10, 2, SPILLING), (1 << 20, 3, SPILLING),
                                 (3 << 20, 2, SPILLING), (1 << 20, 2, IN_MEMORY)):
        g, c, m, w, merged = _parse(path, monkeypatch, segment, cores, plan, spilled)
        assert g.equals(gpu) and c.equals(cpu), (name, segment)
        assert m == meta and w == warnings, (name, segment)
        merges += merged
    assert merges >= 4  # the cuts were made and used
    assert all(spilled[:3]) and not spilled[3]  # blocks spilled before their merge, or not


@needs_shared
def test_zstd_segments_equal_one_pass(tmp_path, monkeypatch):
    path = next(p for p in shared_traces() if trace_id(p) == REAL[1])
    zst = tmp_path / "nccl.json.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(gzip.decompress(path.read_bytes())))
    one = _parse(zst, monkeypatch, None)
    parts = _parse(zst, monkeypatch, 256 << 10)
    assert parts[4] and parts[0].equals(one[0]) and parts[1].equals(one[1])
    assert parts[2] == one[2] and parts[3] == one[3]


def _gz(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, compresslevel=6))
    return path


def test_a_cut_not_between_events_falls_back_to_one_pass(tmp_path, monkeypatch):
    """Names ending in "}, {" and objects in an event's args look like boundaries: the
    segment before such a cut does not end between two events there, and the trace is
    scanned again in one pass, with the same result."""
    events = launch_events(3000, tricky="a}, {")
    for e in events[::5]:
        e.setdefault("args", {})["nested"] = [{"a": 1}, {"b": 2}]
    data = trace_text(events)
    in_name = data.index(b'a}, {"')
    assert EVENT_BOUNDARY.search(data, in_name).start(1) == in_name + 2  # looks like one
    path = _gz(tmp_path, "tricky.json.gz", data)
    one = _parse(path, monkeypatch, None)
    fell_back = []
    take = reader._InOrder.take

    def taking(self, got, last):
        ok = take(self, got, last)
        fell_back.append(not ok)
        return ok

    monkeypatch.setattr(reader._InOrder, "take", taking)
    for segment in (1000, 4096, 50_000):
        parts = _parse(path, monkeypatch, segment)
        assert parts[0].equals(one[0]) and parts[1].equals(one[1])
        assert parts[2] == one[2] and parts[3] == one[3]
    assert any(fell_back)


def test_a_bare_array_of_events_in_segments(tmp_path, monkeypatch):
    path = _gz(tmp_path, "array.json.gz",
               b"\xef\xbb\xbf  " + trace_text(launch_events(2000), array=True))
    one = _parse(path, monkeypatch, None)
    parts = _parse(path, monkeypatch, 20_000, cores=3)
    assert parts[4] and parts[0].equals(one[0]) and parts[1].equals(one[1])
    assert parts[2] == one[2] and parts[3] == one[3]


def test_a_cut_stream_as_one_pass(tmp_path, monkeypatch):
    """A gzip file cut short: the same kept events, truncation offset and warnings."""
    whole = gzip.compress(trace_text(launch_events(4000)), compresslevel=6)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[:int(len(whole) * 0.7)])
    one = _parse(path, monkeypatch, None)
    assert one[2]["stats"]["truncated_at"] is not None
    assert any("stream ends early" in w for w in one[3])
    for segment in (10_000, 100_000):
        parts = _parse(path, monkeypatch, segment)
        assert parts[4] and parts[0].equals(one[0]) and parts[2] == one[2]
        assert parts[3] == one[3]


def test_errors_in_a_later_segment_as_one_pass(tmp_path, monkeypatch):
    data = trace_text(launch_events(4000))
    at = data.index(b'"cat"', int(len(data) * 0.8))
    bad_json = _gz(tmp_path, "bad.json.gz", data[:at] + b'"cat" ]] ' + data[at + 5:])
    whole = gzip.compress(data, compresslevel=6)
    mid = int(len(whole) * 0.6)
    bad_gzip = tmp_path / "badgz.json.gz"
    bad_gzip.write_bytes(whole[:mid] + bytes(b ^ 0x5A for b in whole[mid:mid + 64])
                         + whole[mid + 64:])
    for path, says in ((bad_json, "after"), (bad_gzip, "corrupt")):
        one = _error(path, monkeypatch, None)
        assert says in one and "byte" in one
        for segment in (5000, 60_000):
            assert _error(path, monkeypatch, segment) == one


def test_empty_or_not_json_as_one_pass(tmp_path, monkeypatch):
    for name, data in (("empty.json.gz", b""), ("text.json.gz", b"hello, world\n" * 100),
                       ("events.json.gz", b'{"traceEvents": 5}')):
        path = _gz(tmp_path, name, data)
        assert _error(path, monkeypatch, 64) == _error(path, monkeypatch, None)


def test_no_thread_left_behind(tmp_path, monkeypatch):
    data = trace_text(launch_events(4000))
    at = data.index(b'"cat"', int(len(data) * 0.5))
    bad = _gz(tmp_path, "bad.json.gz", data[:at] + b'"cat" ]] ' + data[at + 5:])
    good = _gz(tmp_path, "good.json.gz", data)
    before = threading.active_count()
    _error(bad, monkeypatch, 4096)
    _parse(good, monkeypatch, 4096)
    assert threading.active_count() == before

    def interrupted(a, b):  # the merging thread stopped mid-scan (Ctrl-C)
        raise KeyboardInterrupt

    monkeypatch.setattr(reader, "_merge", interrupted)
    with pytest.raises(KeyboardInterrupt):
        traceviz.parse_trace(good, plan=SPILLING)
    assert threading.active_count() == before


def test_parts_wait_for_a_slow_merge(tmp_path, monkeypatch):
    """Where merging is the slower side, the scanners wait: at most one finished part
    beyond the ones being scanned is unmerged at any time (they piled up: 11 on 2 M
    distinct names), and the table is the one pass's."""
    import time

    path = _gz(tmp_path, "t.json.gz", trace_text(launch_events(3000)))
    one = _parse(path, monkeypatch, None)
    live, peak = [0], [0]
    scan, merge = reader._scan, reader._merge

    def scanned(*args, **kwargs):
        part = scan(*args, **kwargs)
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        return part

    def slow(a, b):
        time.sleep(0.02)
        live[0] -= 1
        merge(a, b)

    parts = _parse(path, monkeypatch, 4096, cores=2)  # sets its own counting _merge
    monkeypatch.setattr(reader, "_scan", scanned)
    monkeypatch.setattr(reader, "_merge", slow)
    again = traceviz.parse_trace(path, plan=SPILLING)
    assert parts[4] > 20 and parts[0].equals(one[0])
    assert again.activities.equals(one[0]) and 2 <= peak[0] <= 2 + 1 + 1
    again.close()


def test_batch_workers_share_the_cores(tmp_path, monkeypatch):
    """``batch -j N``'s workers (share_cores(N)) scan with their share of the cores: a
    compressed or large plain trace is scanned in one pass where that share is one."""
    monkeypatch.setattr(reader, "_PROCESSES", 1)
    monkeypatch.setattr(reader.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(reader, "STREAM_MIN", 0)
    path = _gz(tmp_path, "t.json.gz", trace_text(launch_events(100)))
    assert reader._cores() == 4 and reader._parts_plan(path) is not None
    reader.share_cores(2)
    assert reader._cores() == 2 and reader._parts_plan(path) is not None
    reader.share_cores(4)
    assert reader._cores() == 1 and reader._parts_plan(path) is None


def test_no_segments_without_room_in_the_budget(tmp_path, monkeypatch):
    """A budget that does not cover the segments' read ahead (runtime + fixed working
    memory + what segments take here: reader.segment_work) scans a compressed trace in
    one pass."""
    _mode(monkeypatch, 4096)
    path = _gz(tmp_path, "t.json.gz", trace_text(launch_events(2000)))
    used = []
    segments = reader._scan_segments
    monkeypatch.setattr(reader, "_scan_segments", lambda *a: used.append(1) or segments(*a))
    runtime = 200 << 20
    least = runtime + FIXED_WORK + reader.segment_work()
    for budget, expected in ((least - (1 << 20), []), (least, [1])):
        parsed = traceviz.parse_trace(path, plan=MemoryPlan(budget=budget, runtime=runtime))
        parsed.close()
        assert used == expected, budget


def test_streams_of_several_members_or_frames(tmp_path, monkeypatch):
    """A gzip file of several members, and a zstd file of several frames (streaming
    writers that flush), cut at arbitrary bytes of the text: the same tables in segments
    as in one pass."""
    data = trace_text(launch_events(3000))
    cuts = [0, 1234, len(data) // 3, len(data) // 3 + 7, 2 * len(data) // 3, len(data)]
    pieces = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    gz = tmp_path / "members.json.gz"
    gz.write_bytes(b"".join(gzip.compress(p) for p in pieces))
    zst = tmp_path / "frames.json.zst"
    zst.write_bytes(b"".join(zstandard.ZstdCompressor().compress(p) for p in pieces))
    for path in (gz, zst):
        one = _parse(path, monkeypatch, None)
        parts = _parse(path, monkeypatch, 30_000, cores=3)
        assert parts[4] and parts[0].equals(one[0]) and parts[1].equals(one[1])
        assert parts[2] == one[2] and parts[3] == one[3] == []


def test_read_ahead_grows_with_the_scanners(monkeypatch):
    """Each scanner but one may have a whole segment waiting (so that all of them read
    while the next segment is inflated), at most MAX_PARTS scanners; what segments take
    above one pass grows with it."""
    for cores, segments_ahead in ((1, 1), (2, 1), (3, 2), (8, 7), (64, 7)):
        monkeypatch.setattr(reader, "_cores", lambda n=cores: n)
        ahead = segments_ahead * reader.SEGMENT_BYTES
        assert reader._read_ahead(min(cores, reader.MAX_PARTS)) == ahead
        assert reader.segment_work() == SEGMENT_OVERHEAD + ahead


def test_category_counts_of_many_parts_add_up(tmp_path, monkeypatch):
    """A part keeps only its category strings' event counts (not a row per string), and
    the counts merged from dozens of parts (summed whenever they double) equal the one
    pass's and the events written: 500 distinct categories, each in many segments."""
    events = launch_events(4000)
    for k, e in enumerate(events):
        if e["cat"] == "user_annotation":
            e["cat"] = f"cat {k % 500}"
    path = _gz(tmp_path, "cats.json.gz", trace_text(events))
    one = _parse(path, monkeypatch, None)
    parts = _parse(path, monkeypatch, 8192)
    assert parts[4] >= 30 and parts[2] == one[2] and parts[1].equals(one[1])
    want: dict[str, int] = {}
    for e in events:
        want[e["cat"]] = want.get(e["cat"], 0) + 1
    assert parts[2]["stats"]["events_by_cat"] == dict(sorted(want.items()))


def _named_kernels(n: int) -> bytes:
    """``n`` launches and kernels, each kernel its own name (every 10th an NCCL one)."""
    events = launch_events(n)
    for k, e in enumerate(e for e in events if e["cat"] == "kernel"):
        e["name"] = f"ncclDevKernel_AllReduce {k:06d}" if k % 10 == 0 else f"gemm {k:06d}"
    return trace_text(events)


def test_strings_past_the_cap_fold_the_same_in_segments(tmp_path, monkeypatch):
    """With room for 1,000 distinct strings, scanned in one pass or in segments (each
    part capped, the merge capped again), the same table: the first names kept, the rest
    one marker, no kernel lost; the same warning (where the first fold was met inside a
    merge its byte is not known, so not named)."""
    path = _gz(tmp_path, "names.json.gz", _named_kernels(4000))
    plan = _SmallBlocks.fixed(64 << 20, strings=1000)
    one = _parse(path, monkeypatch, None, plan=plan)
    names = one[0].sort_by("ts")["name"].to_pylist()
    kept = sum(not n.startswith("…") for n in names)
    assert len(names) == 4000 and 900 < kept < 1000
    for segment in (8192, 100_000):
        parts = _parse(path, monkeypatch, segment, plan=plan)
        assert parts[4] and parts[0].equals(one[0]) and parts[1].equals(one[1])
        assert [re.sub(r" \(the first at byte \d+\)", "", w) for w in parts[3]] == \
            [re.sub(r" \(the first at byte \d+\)", "", w) for w in one[3]]


def test_categories_traceviz_reads_never_fold(tmp_path, monkeypatch):
    """Kineto writes the CPU side first: 3,000 distinct op names fill a room of 700
    strings before the first runtime or kernel event. The categories traceviz reads are
    kept past the cap (in one pass, in each segment and in their merge): every kernel is
    still a GPU activity joined to its op, only the names past the cap fold."""
    n = 3000
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op {k}", "pid": 1, "tid": 2,
               "ts": 10 * k, "dur": 3, "args": {"External id": k}} for k in range(n)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 2, "ts": 10 * k + 1, "dur": 1, "args": {"correlation": k}}
               for k in range(n)]
    events += [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 10 * k + 3, "dur": 5,
                "name": f"gemm {k}", "args": {"correlation": k, "stream": 7}}
               for k in range(n)]
    path = _gz(tmp_path, "ops_first.json.gz", trace_text(events))
    plan = _SmallBlocks.fixed(64 << 20, strings=700)
    for segment in (None, 8192):
        gpu, cpu, meta, warnings, _ = _parse(path, monkeypatch, segment, plan=plan)
        assert meta["stats"]["events_by_cat"] == {"cpu_op": n, "cuda_runtime": n, "kernel": n}
        t = gpu.sort_by("ts")
        assert t.num_rows == n and cpu.num_rows == 2 * n
        ops = t["cpu_op"].to_pylist()
        kept = sum(not o.startswith("…") for o in ops)
        assert ops[:kept] == [f"op {k}" for k in range(kept)] and 600 < kept < 700
        assert set(t["name"].to_pylist()) == {fold_marker(700)}
        assert len([w for w in warnings if "distinct strings" in w]) == 1
