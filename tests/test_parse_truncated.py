"""Truncated traces (a profiler killed mid-write): every complete event before the cut."""
from __future__ import annotations

import gzip
import io
import json
import random
import zlib

import pytest
from helpers import shared
from reference import activities, load, read_bytes

import traceviz
from traceviz.errors import TraceError

TRACE = "param/dlrm_kineto/worker3_step_12.1694128201557.pt.trace.json"


def complete_prefix(data: bytes) -> int | None:
    """Events that are complete in ``data`` (None: cut before traceEvents' '[')."""
    text = data.decode("utf-8", errors="ignore")
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else -1
    if start < 0:
        return None
    dec = json.JSONDecoder()
    pos, count = start + 1, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            _, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            return count
        count += 1


def check_cut(piece: bytes, full_expected: dict) -> None:
    n = complete_prefix(piece)
    if n is None:
        with pytest.raises(TraceError, match="ends before any trace event|not a Kineto"):
            traceviz.parse_trace(io.BytesIO(piece), chunk_size=4096)
        return
    if n == 0:  # cut inside traceEvents before its first event: nothing to keep, an error
        with pytest.raises(TraceError, match="is cut before its first complete event"):
            traceviz.parse_trace(io.BytesIO(piece), chunk_size=4096)
        return
    result = traceviz.parse_trace(io.BytesIO(piece), chunk_size=4096)
    stats = result.meta["stats"]
    assert stats["events"] == n
    assert stats["truncated_at"] is not None and stats["truncated_at"] <= len(piece)
    assert result.warnings and "truncated" in result.warnings[0]
    got = result.activities.to_pydict()
    kept = {i: e for i, e in full_expected.items() if i < n}
    assert sorted(got["index"]) == sorted(kept)
    for i, idx in enumerate(got["index"]):
        assert (got["ts"][i], got["dur"][i], got["name"][i]) == (
            kept[idx]["ts"], kept[idx]["dur"], kept[idx]["name"])


def test_cut_at_random_offsets():
    data = read_bytes(shared(TRACE))
    expected = activities(load(data))
    rng = random.Random(20261121)
    cuts = rng.sample(range(1, len(data) - 2), 60)
    events_at = data.find(b'"traceEvents"')
    cuts += [events_at + 2, events_at + 16, events_at + 17, len(data) - 40, len(data) - 2]
    for cut in sorted(cuts):
        check_cut(data[:cut], expected)


def test_cut_gzip_stream():
    data = read_bytes(shared(TRACE))
    expected = activities(load(data))
    packed = gzip.compress(data)
    for cut in random.Random(7).sample(range(200, len(packed) - 10), 12):
        dec = zlib.decompressobj(wbits=31)
        prefix = dec.decompress(packed[:cut])
        n = complete_prefix(prefix)
        result = traceviz.parse_trace(io.BytesIO(packed[:cut]))
        assert result.meta["stats"]["events"] == n
        assert any("gzip stream ends early" in w for w in result.warnings)
        assert result.meta["stats"]["truncated_at"] is not None
        assert set(result.activities.column("index").to_pylist()) == {
            i for i in expected if i < n}


def test_complete_file_is_not_truncated():
    data = read_bytes(shared(TRACE))
    result = traceviz.parse_trace(io.BytesIO(data + b"\n\n  "))
    assert result.meta["stats"]["truncated_at"] is None and not result.warnings
