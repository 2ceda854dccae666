"""traceviz export: the added tracks against the synthesizer's ground truth, the
trace's own events kept, and a job's ranks on one clock."""
from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal

import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.synth.emit import TS_OFFSET_NS

PID_BASE = 900_000_000


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("export_job")
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=4, layers=4, skew_us=300.0,
                           gpus_per_node=2, seed=5), root)
    truth = pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist()
    skew = json.loads((root / "ground_truth" / "ground_truth.json").read_text())["skew_ns"]
    return root, truth, skew


def _ns(us) -> int:
    """Exact ns of a µs JSON number (read as Decimal: no float rounding)."""
    return int(Decimal(str(us)) * 1000)


def _load(path):
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _track_names(events) -> dict:
    """(pid, tid) -> thread name."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def _on(events, names, prefix):
    """The X slices on the threads whose name starts with ``prefix``."""
    return [e for e in events if e.get("ph") == "X"
            and names.get((e.get("pid"), e.get("tid")), "").startswith(prefix)]


def _no_partial_overlap(events):
    """Per track, every slice starts at or after the previous one's end or nests in it
    (what Perfetto draws right)."""
    by_track = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_track[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in by_track.values():
        open_ends = []
        for start, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (start, end, open_ends[-1])
            open_ends.append(end)


def test_one_trace_keeps_its_events_and_gains_tracks(job, tmp_path):
    root, truth, _ = job
    trace = root / "iteration_10" / "rank_0002_iter_10.pt.trace.json"
    out = tmp_path / "annotated.json.gz"
    result = CliRunner().invoke(main, ["export", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    original = json.loads(trace.read_text())["traceEvents"]
    events = json.loads(gzip.decompress(out.read_bytes()), parse_float=Decimal)["traceEvents"]
    ours = [e for e in events if isinstance(e.get("pid"), int) and e["pid"] == PID_BASE + 2]
    assert len(events) == len(original) + len(ours)
    names = _track_names(ours)
    _no_partial_overlap(ours)
    mine = [k for k in truth if k["rank"] == 2]
    # one step slice per (iteration, phase, micro-batch, chunk), spanning its kernels
    spans = defaultdict(lambda: [None, None])
    for k in mine:
        if k["microbatch"] >= 0:
            s = spans[(k["iteration"], k["phase"], k["microbatch"], k["chunk"])]
            start = k["ts"] + TS_OFFSET_NS
            s[0] = start if s[0] is None else min(s[0], start)
            s[1] = start + k["dur"] if s[1] is None else max(s[1], start + k["dur"])
    steps = {(e["args"]["iteration"], e["args"]["phase"], e["args"]["microbatch"],
              e["args"]["chunk"]): (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
             for e in _on(ours, names, "") if names[(e["pid"], e["tid"])].split()[1:2]
             == ["steps"] and e["args"]["microbatch"] >= 0}
    assert steps == {k: tuple(v) for k, v in spans.items()}
    comm = sorted((_ns(e["ts"]), _ns(e["dur"]), e["args"]["group"], e["args"].get("bytes"))
                  for e in _on(ours, names, "comm "))
    want = sorted((k["ts"] + TS_OFFSET_NS, k["dur"], k["comm_group"],
                   k["msg_out_bytes"] if k["collective"] == "AllGather" else k["msg_in_bytes"])
                  for k in mine if k["kind"] == "COMM")
    assert comm == want
    in_flight = [e["args"]["collectives"] for e in ours if e["ph"] == "C"]
    assert len(in_flight) == 2 * len(want) and in_flight[-1] == 0 and min(in_flight) >= 0


def test_job_on_one_clock(job, tmp_path):
    root, truth, skew = job
    out = tmp_path / "job.json.gz"
    result = CliRunner().invoke(main, ["export", str(root / "iteration_10"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    events = _load(out)
    names = _track_names(events)
    _no_partial_overlap(events)
    kernels = sorted((e["pid"] - PID_BASE, _ns(e["ts"]), _ns(e["dur"]))
                     for e in _on(events, names, "stream "))
    # the rank clocks' offsets are fitted to ns: the synced times are the true ones
    want = sorted((k["rank"], k["ts"] - skew[k["rank"]] + TS_OFFSET_NS, k["dur"])
                  for k in truth)
    assert len(kernels) == len(want)
    for (r, t, d), (wr, wt, wd) in zip(kernels, want):
        assert (r, d) == (wr, wd) and abs(t - wt) <= 2
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {
        f"traceviz rank {r}" for r in range(4)}


def test_job_flows_end_at_the_straggler(job, tmp_path):
    """Every collective matched on several ranks is one flow through its members in
    arrival order; it ends (``f``) on the rank that arrived last, as the ground truth's
    kernels on the true clock say, and every flow event sits on a slice of its track."""
    root, truth, skew = job
    out = tmp_path / "job.json.gz"
    assert CliRunner().invoke(main, ["export", str(root / "iteration_10"), "-o",
                                     str(out)]).exit_code == 0
    events = _load(out)
    flows = defaultdict(list)
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            flows[e["id"]].append(e)
    assert flows
    slices = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            slices[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    arrivals = defaultdict(dict)  # (process group, seq) -> rank -> true first start
    for k in truth:
        if k["kind"] == "COMM" and k["comm_group"] != "PP" and k["seq"] is not None:
            key, t = (k["pg_name"], k["seq"]), k["ts"] - skew[k["rank"]]
            arrivals[key][k["rank"]] = min(arrivals[key].get(k["rank"], t), t)
    want = Counter()  # arrival orders of the calls on several ranks (last: straggler)
    for members in arrivals.values():
        if len(members) > 1:
            want[tuple(sorted(members, key=lambda r: (members[r], r)))] += 1
    got = Counter()
    for chain in flows.values():
        phases = [e["ph"] for e in chain]
        assert phases[0] == "s" and phases[-1] == "f" and set(phases[1:-1]) <= {"t"}
        assert [_ns(e["ts"]) for e in chain] == sorted(_ns(e["ts"]) for e in chain)
        for e in chain:
            t = _ns(e["ts"])
            assert any(a <= t <= b for a, b in slices[(e["pid"], e["tid"])])
        got[tuple(e["pid"] - PID_BASE for e in chain)] += 1
    assert sum(got.values()) == sum(want.values())
    # the same arrival orders, ending at the same stragglers (clock offsets are fitted to
    # ns: members within 2 ns of each other may order either way)
    assert sum((got & want).values()) >= 0.95 * sum(want.values())
