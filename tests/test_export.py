"""traceviz export: the added tracks against the synthesizer's ground truth, the
trace's own events kept, and a job's ranks on one clock."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
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
             for e in ours if e.get("tid") == 1 and e["ph"] == "X"
             and e["args"]["microbatch"] >= 0}
    assert steps == {k: tuple(v) for k, v in spans.items()}
    comm = sorted((_ns(e["ts"]), _ns(e["dur"]), e["args"]["group"], e["args"].get("bytes"))
                  for e in ours if e.get("tid") == 2 and e["ph"] == "X")
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
    kernels = sorted((e["pid"] - PID_BASE, _ns(e["ts"]), _ns(e["dur"])) for e in events
                     if e["ph"] == "X" and e.get("tid", 0) >= 100)
    # the rank clocks' offsets are fitted to ns: the synced times are the true ones
    want = sorted((k["rank"], k["ts"] - skew[k["rank"]] + TS_OFFSET_NS, k["dur"])
                  for k in truth)
    assert len(kernels) == len(want)
    for (r, t, d), (wr, wt, wd) in zip(kernels, want):
        assert (r, d) == (wr, wd) and abs(t - wt) <= 2
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {
        f"traceviz rank {r}" for r in range(4)}
