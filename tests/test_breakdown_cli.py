"""traceviz breakdown end to end on a synthesized job: files written, numbers equal to a
plain-Python union over the ground-truth kernels, bad ranks skipped."""
from __future__ import annotations

import csv
import json
import re

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import union_length

from traceviz.cli import main
from traceviz.ingest.discover import find_traces
from traceviz.synth import SynthConfig, synthesize


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=4, layers=4, with_stack=False,
                           skew_us=300.0, gpus_per_node=2), root)
    return root


def _step_beyond_kernels(job, rank: int) -> int:
    """ns by which the rank's ProfilerStep (its trace's CPU span) starts before its first
    device activity and ends after its last, read from the trace itself."""
    (trace,) = job.rglob(f"rank_{rank:04d}_*.json")
    events = json.loads(trace.read_text())["traceEvents"]
    (step,) = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    first, last = min(e["ts"] for e in device), max(e["ts"] + e["dur"] for e in device)
    return round(1000 * (max(first - step["ts"], 0) + max(step["ts"] + step["dur"] - last, 0)))


def test_breakdown_matches_ground_truth(job, tmp_path):
    out = tmp_path / "bd"
    result = CliRunner().invoke(main, ["breakdown", str(job), "-o", str(out)])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    for table in ("temporal_breakdown", "kernel_type_breakdown", "idle_time_breakdown",
                  "launch_stats", "queue_length_summary", "memory_bw_summary"):
        assert {f"{table}.csv", f"{table}.parquet"} <= names
    assert {"temporal_breakdown.png", "kernel_type_breakdown.png",
            "idle_time_breakdown.png"} <= names
    truth = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist()
    # the whole trace is the row with no iteration (empty in the CSV)
    rows = {(int(r["rank"]), r["iteration"]): r
            for r in csv.DictReader(open(out / "temporal_breakdown.csv"))}
    for rank in range(4):
        mine = [t for t in truth if t["rank"] == rank]
        spans = {k: [(t["ts"], t["ts"] + t["dur"]) for t in mine if t["kind"] == k]
                 for k in ("COMP", "COMM", "MEM")}
        everything = [s for v in spans.values() for s in v]
        r = rows[(rank, "")]
        assert int(r["compute_ns"]) == union_length(spans["COMP"])
        assert int(r["comm_ns"]) == union_length(spans["COMM"])
        # the kernels' span, reaching to the profiled step's CPU span where it starts
        # before the first kernel or ends after the last (the step's window is in it)
        span = (max(e for _, e in everything) - min(s for s, _ in everything)
                + _step_beyond_kernels(job, rank))
        assert int(r["kernel_time_ns"]) == span
        assert int(r["idle_ns"]) == span - union_length(everything)
        both = (union_length(spans["COMP"]) + union_length(spans["COMM"])
                - union_length(spans["COMP"] + spans["COMM"]))
        assert int(r["compute_overlapped_comm_ns"]) == both
        assert re.search(rf"^rank {rank}: \d+ profiled steps?, ", result.output, re.M)


def test_breakdown_skips_a_bad_rank(job, tmp_path):
    traces = find_traces(job)
    broken = tmp_path / "notjson.json"
    broken.write_text("this is not a trace")
    args = ["breakdown", str(traces[0].path), str(broken), "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    # the other rank's outputs are written; the rank left out is named and the exit is 1
    assert result.exit_code == 1, result.output
    assert "failed: " in result.output and "notjson.json" in result.output
    assert "1 rank(s) left out" in result.output
    assert "rank 0: 1 profiled step, " in result.output and (tmp_path / "o" / "temporal_breakdown.csv").exists()
    missing = CliRunner().invoke(main, ["breakdown", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "no such file" in missing.output
    assert "Traceback" not in missing.output


def test_top_kernels_match_ground_truth(job, tmp_path):
    out = tmp_path / "bd"
    assert CliRunner().invoke(main, ["breakdown", str(job), "-o", str(out),
                                     "--num-kernels", "3"]).exit_code == 0
    rows = pq.read_table(out / "top_kernels.parquet").to_pylist()
    truth = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist()
    label = {"COMP": "COMPUTATION", "COMM": "COMMUNICATION", "MEM": "MEMORY"}
    for rank in range(4):
        for kind, kernel_type in label.items():
            durs: dict[str, list[int]] = {}
            for t in truth:
                if t["rank"] == rank and t["kind"] == kind:
                    durs.setdefault(t["name"], []).append(t["dur"])
            mine = [r for r in rows if r["rank"] == rank and r["kernel_type"] == kernel_type]
            assert sum(r["count"] for r in mine) == sum(map(len, durs.values()))
            assert sum(r["sum_ns"] for r in mine) == sum(map(sum, durs.values()))
            named = [r for r in mine if r["name"] != "others"]
            assert len(named) <= 3
            for r in named:
                d = durs[r["name"]]
                assert (r["count"], r["sum_ns"], r["max_ns"], r["min_ns"]) == (
                    len(d), sum(d), max(d), min(d))
            # the named kernels are the heaviest ones
            if named and len(durs) > len(named):
                lightest = min(r["sum_ns"] for r in named)
                assert all(sum(d) <= lightest for n, d in durs.items()
                           if n not in {r["name"] for r in named})
    assert {"top_kernels_computation.png", "kernel_durations_computation.png"} <= {
        p.name for p in out.iterdir()}
