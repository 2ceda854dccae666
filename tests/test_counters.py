"""traceviz counters: the trace copied unchanged with counter tracks whose values equal a
plain-Python recomputation from the raw events; the insertion handles every layout."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from click.testing import CliRunner
from helpers import needs_shared, shared

from traceviz.cli import main
from traceviz.parse.source import ByteSource
from traceviz.render.trace_copy import write_with_events
from traceviz.synth import SynthConfig, synthesize

LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
            "cudaMemsetAsync"}


def _events(path) -> dict:
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def _queue_truth(events: list[dict]) -> dict[int, list[tuple[float, int]]]:
    """Per stream, (ts µs, length) after every launch (+1) and activity start (-1)."""
    launch = {e["args"]["correlation"]: e for e in events if e.get("ph") == "X"
              and e.get("name") in LAUNCHES and "correlation" in e.get("args", {})}
    steps = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = e["args"].get("correlation")
            if c in launch:
                s = e["args"]["stream"]
                steps[s] += [(float(launch[c]["ts"]), 0, +1), (float(e["ts"]), 1, -1)]
    out = {}
    for s, pts in steps.items():
        n, series = 0, []
        for ts, _, d in sorted(pts):
            n += d
            series.append((ts, n))
        out[s] = series
    return out


def _check(original: dict, written: dict) -> None:
    counters = [e for e in written["traceEvents"] if e.get("ph") == "C"]
    others = [e for e in written["traceEvents"] if e.get("ph") != "C"]
    assert others == original["traceEvents"]  # every original event, in order
    assert {k: v for k, v in written.items() if k != "traceEvents"} == {
        k: v for k, v in original.items() if k != "traceEvents"}
    got = defaultdict(list)
    for e in counters:
        if e["name"] == "Queue Length":
            got[e["id"]].append((e["ts"], e["args"]["Queue Length"]))
    truth = _queue_truth(original["traceEvents"])
    assert got.keys() == truth.keys()
    for s in truth:  # ties (launch and start in one ns) are ordered launch first
        assert [n for _, n in got[s]] == [n for _, n in truth[s]], s
        assert [t for t, _ in got[s]] == pytest.approx([t for t, _ in truth[s]], abs=1e-3)


def test_synthesized_rank(tmp_path):
    synthesize(SynthConfig(tp=1, pp=1, dp=2, microbatches=2, layers=2), tmp_path / "job")
    trace = next((tmp_path / "job").rglob("rank_0000*.json"))
    result = CliRunner().invoke(main, ["counters", str(trace)])
    assert result.exit_code == 0, result.output
    stem = trace.name.split(".json")[0]
    out = tmp_path / "traceviz-out" / stem / f"{stem}_with_counters.json.gz"
    assert out.exists() and "counter events added" in result.output
    _check(_events(trace), _events(out))


@needs_shared
def test_real_trace_with_memcpy(tmp_path):
    trace = shared("hta/trace_filter/sampled_rank-0.json.gz")
    out = tmp_path / "x.json.gz"
    assert CliRunner().invoke(main, ["counters", str(trace), "-o", str(out)]).exit_code == 0
    written = _events(out)
    _check(_events(trace), written)
    bw = defaultdict(list)
    for e in written["traceEvents"]:
        if e.get("ph") == "C" and e["name"] != "Queue Length":
            bw[e["name"]].append(e["args"]["Memcpy BW"])
    # every copy's bandwidth is added at its start and removed at its end
    copies = [e for e in _events(trace)["traceEvents"] if e.get("cat") in
              ("gpu_memcpy", "gpu_memset") and "memory bandwidth (GB/s)" in e["args"]]
    assert sum(map(len, bw.values())) == 2 * len(copies)
    assert max(max(v) for v in bw.values()) >= max(
        e["args"]["memory bandwidth (GB/s)"] for e in copies)
    assert all(v[-1] == 0 for v in bw.values())


@pytest.mark.parametrize("text,events", [
    ('{"a": 1, "traceEvents": [{"ph": "X"}], "b": [1]}', [{"ph": "X"}]),
    ('{"traceEvents"  :\n  [  ], "z": 2}', []),
    ('{"deviceProperties": [{"traceEvents": 0}],\n "traceEvents":[\n{"ph": "i"}\n]}',
     [{"ph": "i"}]),
    ('  [{"ph": "X", "ts": 1}]', [{"ph": "X", "ts": 1}]),
    ('[]', []),
])
def test_insertion_in_every_layout(tmp_path, text, events):
    src = tmp_path / "t.json"
    src.write_text(text)
    added = [{"ph": "C", "name": "n", "pid": 0, "ts": 1500, "args": {"v": 1}}]
    source = ByteSource(src)
    assert write_with_events(source, str(src), tmp_path / "o.json.gz", added) == 1
    source.close()
    out = _events(tmp_path / "o.json.gz")
    got = out if isinstance(out, list) else out["traceEvents"]
    assert got == [{"ph": "C", "name": "n", "pid": 0, "ts": 1.5, "args": {"v": 1}}] + events


def test_not_a_trace_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    result = CliRunner().invoke(main, ["counters", str(bad), "-o", str(tmp_path / "o.json.gz")])
    assert result.exit_code == 1
    assert "bad.json" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o.json.gz").exists()
