"""Property tests: random traces (every JSON number form, escapes, unicode, nesting, keys
before and after traceEvents, tiny read buffers) parse exactly like the reference."""
from __future__ import annotations

import io
import json
from decimal import ROUND_HALF_UP, Decimal, localcontext

import numpy as np
from helpers import parking_everything
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonwriter import Raw, dumps
from reference import DEVICE_SIDE, activities, complete, event_count, load

import traceviz
from traceviz.parse.budget import MemoryPlan
from traceviz.parse.lexer import (
    NUM_OK,
    NUM_RANGE,
    hash_bytes,
    number_token,
    scan_string,
    skip_string,
    string_hash,
)



def _text(*parts) -> st.SearchStrategy[str]:
    """The concatenation of strategies of strings (``st.from_regex`` of a simple pattern,
    drawn several times faster: hypothesis's regex strategy was most of these tests' time)."""
    return st.tuples(*parts).map("".join)


def _digits(least: int, most: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=least, max_size=most)


def _maybe(part) -> st.SearchStrategy[str]:
    return st.one_of(st.just(""), part)


def _exponent(most: int) -> st.SearchStrategy[str]:
    return _text(st.sampled_from("eE"), st.sampled_from(["", "-", "+"]), _digits(1, most))


# -?(0|[1-9][0-9]{0,12})(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?
INTEGER_PART = st.one_of(st.just("0"), _text(st.sampled_from("123456789"), _digits(0, 12)))
NUMBER = _text(_maybe(st.just("-")), INTEGER_PART, _maybe(_text(st.just("."), _digits(1, 12))),
               _maybe(_exponent(2))).map(Raw)
TIME = st.one_of(NUMBER, NUMBER.map(str), st.integers(0, 10**15),  # and (0|[1-9][0-9]{0,12})\.[0-9]{3}
                 _text(INTEGER_PART, st.just("."), _digits(3, 3)).map(Raw))
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
NAMES = st.one_of(TEXT, st.sampled_from(["ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                         "ProfilerStep#3", "ProfilerStep#4", "aten::mm",
                                         "cudaLaunchKernel", "Memcpy DtoH", "ampere_sgemm"]))
CATS = st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "Kernel", "cuda_runtime",
                        "cuda_driver", "cpu_op", "user_annotation", "python_function",
                        "gpu_user_annotation", "cuda_sync", "ac2g", "weird", "Trace"])
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT, st.integers(-2**63, 2**63 - 1))
NESTED = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
KNOWN_ARGS = st.fixed_dictionaries({}, optional={
    "correlation": st.one_of(st.integers(0, 40), NUMBER, st.just("7")),
    "External id": st.integers(-1, 50), "external id": st.integers(0, 50),
    "stream": st.integers(-1, 8), "device": st.integers(0, 8),
    "Collective name": st.sampled_from(["allreduce", "_allgather_base", "send"]),
    "In msg nelems": st.integers(0, 10**9), "dtype": st.sampled_from(["Float", "BFloat16"]),
    "Process Group Ranks": st.sampled_from(["[0, 1]", "[0, 1, ..., 63]"]),
    "Sequence number": st.integers(-1, 100), "Python id": st.integers(0, 100)})


@st.composite
def events(draw):
    ev = {}
    keys = draw(st.permutations(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args",
                                 "id", "bp", "extra"]))
    for key in keys:
        if key == "ph":
            if draw(st.integers(0, 20)):
                ev["ph"] = draw(st.sampled_from(["X", "X", "X", "X", "i", "s", "f", "M", "C",
                                                 "B", ""]))
        elif key == "cat":
            ev["cat"] = draw(CATS)
        elif key == "name":
            if draw(st.integers(0, 9)):
                ev["name"] = draw(NAMES)
        elif key in ("pid", "tid"):
            ev[key] = draw(st.one_of(st.integers(0, 3), st.sampled_from(["7", "stream 7", "x"])))
        elif key == "ts" and draw(st.integers(0, 15)):
            ev["ts"] = draw(TIME)
        elif key == "dur" and draw(st.integers(0, 15)):
            ev["dur"] = draw(st.one_of(TIME, NUMBER))
        elif key == "args" and draw(st.booleans()):
            args = draw(KNOWN_ARGS)
            args.update(draw(st.dictionaries(TEXT, NESTED, max_size=3)))
            ev["args"] = args
        elif key == "id" and ev.get("ph") in ("s", "f"):
            ev["id"] = draw(st.integers(0, 40))
        elif key == "extra" and draw(st.booleans()):
            ev[draw(TEXT)] = draw(NESTED)
    return ev


@st.composite
def traces(draw):
    evs = draw(st.lists(events(), max_size=25))
    if draw(st.integers(0, 9)) == 0:
        doc = evs
    else:
        before = draw(st.dictionaries(st.sampled_from(["schemaVersion", "deviceProperties",
                                                       "distributedInfo", "junk"]),
                                      NESTED, max_size=3))
        after = draw(st.dictionaries(st.sampled_from(["traceName", "baseTimeNanoseconds",
                                                      "zzz"]), NESTED, max_size=2))
        doc = {**before, "traceEvents": evs, **{k: v for k, v in after.items()
                                                 if k not in before}}
    style = draw(st.sampled_from([(None, ""), (None, " "), (2, " "), (4, " ")]))
    return dumps(doc, indent=style[0], space=style[1]).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=traces(), chunk=st.integers(16, 300))
def test_random_traces_match_reference(data, chunk):
    doc = load(data)
    result = traceviz.parse_trace(io.BytesIO(data), cpu=True, chunk_size=chunk)
    assert result.meta["stats"]["events"] == event_count(doc)
    assert result.meta["stats"]["truncated_at"] is None
    expected = activities(doc)
    got = result.activities.to_pydict()
    assert sorted(got["index"]) == sorted(expected)
    for i, idx in enumerate(got["index"]):
        exp = expected[idx]
        for f in ("cat", "name", "ts", "dur", "correlation", "external_id", "launch_ts",
                  "cpu_op", "iteration", "kind"):
            assert got[f][i] == exp[f], (f, idx)
    # CPU-side table: every other complete event, and the device's sync events (what a
    # synchronisation waited on, for the critical path), with exact names and times
    evs = doc if isinstance(doc, list) else doc["traceEvents"]
    cpu_expected = {i: e for i, e in enumerate(evs) if complete(e) and (
        e.get("cat") not in DEVICE_SIDE or e.get("cat") in ("cuda_sync", "xpu_sync"))}
    cpu = result.cpu.to_pydict()
    assert sorted(cpu["index"]) == sorted(cpu_expected)
    for i, idx in enumerate(cpu["index"]):
        e = cpu_expected[idx]
        assert cpu["name"][i] == (e["name"] if isinstance(e.get("name"), str) else None)
        assert cpu["cat"][i] == e.get("cat")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=traces())
def test_partitioned_joins_equal_in_memory(data):
    """A budget too small for the joins (many hash parts, many time buckets, spilled
    columns) gives exactly the in-memory result; so do per-activity arrays parked in
    files and worked on three activities at a time."""
    full = traceviz.parse_trace(io.BytesIO(data), chunk_size=64)
    tiny = traceviz.parse_trace(io.BytesIO(data), chunk_size=64, plan=MemoryPlan.fixed(700))
    with parking_everything(slice_rows=3):
        parked = traceviz.parse_trace(io.BytesIO(data), chunk_size=64,
                                      plan=MemoryPlan.fixed(700))
    for other in (tiny, parked):
        assert other.activities.replace_schema_metadata(None).equals(
            full.activities.replace_schema_metadata(None))
        other.close()


def test_numbers_exact_beyond_float():
    """Decimal text is read exactly: 19-digit ns, many decimals (half away from zero)."""
    ev = ('{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":%s,"dur":%s,'
          '"args":{"correlation":1}}')
    cases = [("1704161511420306.491", "12.77012757357446", 1704161511420306491, 12770),
             ('"1704161511420439.502"', "4.0005", 1704161511420439502, 4001),
             ("9007199254740993.001", "0.0005", 9007199254740993001, 1),
             ("1.5e3", "2.5E-3", 1500000, 3), ("-0.0004", "1e2", 0, 100000)]
    body = ",".join(ev % (ts, dur) for ts, dur, _, _ in cases)
    table = traceviz.parse_table(io.BytesIO(('{"traceEvents":[%s]}' % body).encode()))
    got = sorted(zip(table.column("index").to_pylist(), table.column("ts").to_pylist(),
                     table.column("dur").to_pylist()))
    assert [(t, d) for _, t, d in got] == [(t, d) for _, _, t, d in cases]
    assert json.loads("1704161511420306.491") * 1000 != 1704161511420306491  # float would fail


@settings(max_examples=2000, deadline=None)
@given(text=_text(_maybe(st.just("-")), _digits(1, 21),  # -?[0-9]{1,21}(\.[0-9]{0,7})?([eE][-+]?[0-9])?
                  _maybe(_text(st.just("."), _digits(0, 7))), _maybe(_exponent(1))),
       scale=st.sampled_from([0, 3]), delim=st.sampled_from([",", "}", "]", " ", "\n"]))
def test_number_token_exact(text, scale, delim):
    """Both paths of number_token (plain decimals, and exponents / rounding / 19+
    digits) give the decimal value times 10**scale, rounded half away from zero."""
    buf = np.frombuffer((text + delim).encode(), dtype=np.uint8)
    end, value, status = number_token(buf, 0, buf.shape[0], scale)
    with localcontext() as ctx:
        ctx.prec = 80
        exact = int(Decimal(text).scaleb(scale).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if -2**63 < exact < 2**63:
        assert (end, value, status) == (len(text), exact, NUM_OK)
    else:  # beyond int64: its own status (a skip reason of its own)
        assert status == NUM_RANGE


@settings(max_examples=3000, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
       ascii_only=st.booleans(), after=st.sampled_from(["", ":", ",\"ab\\\\cdefgh\"", " " * 9]))
def test_string_hash_is_of_the_decoded_text(text, ascii_only, after):
    """scan_string and skip_string end past the closing quote (INCOMPLETE without it) and
    scan_string hashes the decoded UTF-8 bytes, however the text is escaped and wherever
    escapes fall in its 8-byte words, with the buffer ending right after the string or
    not; string_hash (Python) and hash_bytes (raw bytes) are the same hash."""
    encoded = json.dumps(text, ensure_ascii=ascii_only).encode()
    buf = np.frombuffer(encoded + after.encode(), dtype=np.uint8)
    end, h, _ = scan_string(buf, 0, buf.shape[0])
    assert end == len(encoded) == skip_string(buf, 0, buf.shape[0])
    assert skip_string(buf, 0, len(encoded) - 1) == scan_string(buf, 0, len(encoded) - 1)[0] == -1
    assert h == string_hash(text.encode())
    raw = np.frombuffer(text.encode() + b"tail", dtype=np.uint8)
    assert hash_bytes(raw, 0, len(text.encode())) == h


def test_string_hashes_differ_on_alike_names():
    """The hash stands for the string in the intern table (no byte comparison), so names
    that differ in a byte or two, or only in length, must hash apart: 400,000 of them."""
    names = [f"layer_{i:05d}.mlp.fc{i % 7}" for i in range(100_000)]
    names += [f"ncclDevKernel_AllReduce_{chr(65 + i % 26)}{i}" for i in range(100_000)]
    names += ["x" * k for k in range(1, 300)] + ["\0" * k for k in range(1, 300)]
    names += [f"{i:08x}{i:08x}" for i in range(199_402)]
    hashes = {string_hash(n.encode()) for n in names}
    assert len(names) == 400_000 and len(hashes) == len(names)
