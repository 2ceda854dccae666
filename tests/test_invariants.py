"""Every command on every real trace (alone, and the multi-rank folders as jobs): never a
traceback, and the numbers keep their invariants: no negative duration or gap the raw
trace does not have, percentages in [0, 100] whose parts add up to their whole, MFU at
most 100 %, one row per (rank, iteration), unknown values null (never 0), no claim of
synced clocks without a collective that links the ranks. Each trace alone is analysed
through each command's Python API and its outputs written as the command line writes them
(figures, the critical path's copy of the trace), but for a job folder's ranks after its
first: their numbers are checked the same, their one-trace figures not drawn (a rank's
are much like the next rank's, and the folder's own, as a job, are drawn below)."""
from __future__ import annotations

import gzip
import json
import math
import shutil

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import TRACES, needs_shared, out_dir, shared_traces, trace_id
from reference import events_of, load, read_bytes

import traceviz
from traceviz.analysis.diagnose.ledger import PARTS
from traceviz.cli import main
from traceviz.commands import breakdown, critical_path, diagnose, diff
from traceviz.commands import ops as ops_command
from traceviz.job.report import make_report
from traceviz.errors import TraceVizError, UsageError
from traceviz.table.result import write
from traceviz.table.schema import COLLECTIVES, GROUPS, KINDS, NO_PAYLOAD, PHASES

pytestmark = needs_shared
TRACE_FILES = shared_traces()
# folders whose traces are the ranks of one job
JOBS = sorted({p.parent for p in TRACE_FILES
               if sum(q.parent == p.parent for q in TRACE_FILES) > 1})
# a job folder's ranks after its first: their one-trace outputs (figures, the critical
# path's trace copy) are not written, only checked; the first rank's are, like a lone trace's
ALONE_UNDRAWN = {p for job in JOBS for p in sorted(q for q in TRACE_FILES
                                                    if q.parent == job)[1:]}


def _pct_ok(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or \
        -1e-9 <= value <= 100 + 1e-9


def _walk(value):
    """Every (key, value) of a nested dict / list."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _diagnosis_invariants(diag, one_rank: bool) -> None:
    """The ledger adds up to each rank's span with no negative part; wait + transfer is
    each communication kernel's duration where known, unknown (null) otherwise, and
    always unknown without synced clocks (or for one rank alone) but for kernels that
    move no payload; the job's mean parts are percentages that add up to 100."""
    parts = [f"{p}_ns" for p in PARTS]
    for r in diag.ledger.to_pylist():
        assert sum(r[p] for p in parts) == r["span_ns"] and min(r[p] for p in parts) >= 0
    for c in diag.comm_calls.to_pylist():
        assert (c["wait_ns"] is None) == (c["transfer_ns"] is None)
        if c["wait_ns"] is not None:
            assert c["wait_ns"] >= 0 and c["transfer_ns"] >= 0
            assert c["wait_ns"] + c["transfer_ns"] == c["end_ns"] - c["start_ns"]
            if one_rank or not diag.synced:
                assert c["kind"] in NO_PAYLOAD and c["transfer_ns"] == 0, c
    for t in diag.totals.to_pylist():
        pcts = [t[f"{p}_pct"] for p in PARTS]
        assert all(_pct_ok(v) for v in pcts) and sum(pcts) == pytest.approx(100)
    for s in diag.speed.table.to_pylist():
        assert s["p_value"] is None or 0 <= s["p_value"] <= 1


def _raw_negative_durations(path) -> int:
    return sum(1 for e in events_of(load(read_bytes(path)))
               if isinstance(e, dict) and e.get("ph") == "X"
               and str(e.get("dur", "0")).strip().startswith("-"))


@pytest.mark.parametrize("path", TRACE_FILES, ids=[trace_id(p) for p in TRACE_FILES])
def test_every_trace_keeps_the_invariants(path, tmp_path):
    try:
        table = traceviz.parse_table(path)
    except TraceVizError as exc:  # not a trace with device activities: one clear line
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    stats = traceviz.metadata(table)["stats"]
    assert sum(stats["kinds"].values()) == table.num_rows == stats["join"]["activities"]
    assert stats["join"]["launched"] <= table.num_rows
    # the table: enums from the schema, durations as the trace has them
    for column, names in (("kind", KINDS), ("phase", PHASES), ("comm_group", GROUPS),
                          ("collective", COLLECTIVES)):
        assert set(pc.unique(table[column]).drop_null().to_pylist()) <= set(names), column
    negative = int(pc.sum(pc.less(table["dur"], 0)).as_py() or 0)
    assert negative <= _raw_negative_durations(path)
    ts = table["ts"].to_numpy()
    assert (np.diff(ts) >= 0).all()
    is_comm = pc.equal(table["kind"], "COMM").to_numpy(zero_copy_only=False)
    assert (table["comm_group"].is_null().to_numpy(zero_copy_only=False) == ~is_comm).all()

    # the breakdown
    result = breakdown.run([path])
    temporal = result.tables["temporal_breakdown"].to_pylist()
    keys = [(r["rank"], r["iteration"]) for r in temporal]
    assert len(keys) == len(set(keys)), "one row per (rank, iteration)"
    parts = ("compute_only_ns", "compute_overlapped_comm_ns", "comm_only_ns", "mem_only_ns",
             "other_only_ns", "idle_ns")
    for r in temporal:
        assert sum(r[p] for p in parts) == r["kernel_time_ns"]
        assert r["idle_ns"] + r["compute_ns"] + r["non_compute_ns"] == r["kernel_time_ns"]
        assert min(r[p] for p in parts) >= 0
        assert all(_pct_ok(r[k]) for k in ("idle_pct", "compute_pct", "non_compute_pct",
                                          "overlap_pct"))
        assert (r["overlap_pct"] is None) == (r["comm_ns"] == 0)
    types = result.tables["kernel_type_breakdown"].to_pylist()
    if types:
        assert all(_pct_ok(r["percentage"]) for r in types)
        assert sum(r["percentage"] for r in types) == pytest.approx(100)
    for r in result.tables["idle_time_breakdown"].to_pylist():
        assert r["idle_ns"] >= 0 and (math.isnan(r["idle_ratio"]) or 0 <= r["idle_ratio"] <= 1)

    # the report, with run facts that give an impossible MFU on purpose
    rep = make_report(path, overrides={"global_batch_size": 1024, "seq_len": 8192,
                                              "flops_per_token": 6e15, "peak_tflops": 100.0})
    for key, value in _walk(rep):
        if key.endswith("_pct") and not isinstance(value, dict):
            assert _pct_ok(value), key
    for r in rep["throughput"]["iterations"]:
        assert r["mfu_pct"] is None or r["mfu_pct"] <= 100
        assert r["time_ms"] >= 0
    for r in rep["network"]["by_collective"] + rep["network"]["by_group"]:
        assert (r["bytes"] is None) == (r["with_size"] == 0)  # unknown is null, never 0
    assert rep["cross_rank"] is None  # one rank: nothing to match

    # the critical path (of the first ProfilerStep, else of the whole trace)
    out = tmp_path if path not in ALONE_UNDRAWN else None
    cp, said = _command(critical_path.run, path, out=out and out / "cp")
    if said is not None and "no annotation named like 'ProfilerStep'" in said:
        cp, said = _command(critical_path.run, path, annotation="", out=out and out / "cp")
    if cp is not None:
        # the parts add up to the iteration; the path's edges to the path
        rows = cp.tables["critical_path_by_category"].to_pylist()
        shares = [r["pct"] for r in rows if r["pct"] is not None]
        assert all(_pct_ok(p) for p in shares)
        assert not shares or sum(shares) == pytest.approx(100)
        edges = cp.tables["critical_path"].to_pylist()
        outside = sum(r["ns"] for r in rows
                      if r["category"] in ("before the path", "after the path"))
        if edges:
            assert sum(r["ns"] for r in rows) - outside == \
                edges[-1]["to_ns"] - edges[0]["from_ns"]
            assert all(r["own_ns"] >= 0 and r["wait_ns"] >= 0 for r in edges)
            # the path runs to the window's end: no activity the step launched ends after
            steps = traceviz.metadata(table).get("steps") or []
            if steps:
                first = min(steps, key=lambda st: st["ts"])
                lt = table["launch_ts"].to_numpy(zero_copy_only=False)
                inside = (lt >= first["ts"]) & (lt <= first["ts"] + first["dur"])
                ends = (table["ts"].to_numpy() + np.maximum(table["dur"].to_numpy(), 0))
                if inside.any():
                    assert ends[inside].max() <= edges[-1]["to_ns"]

    # the op model: shares in [0, 100] adding up to the whole, MFU <= 100 %
    ops, _ = _command(ops_command.run, path, out=out and out / "ops")
    if ops is not None:
        for r in ops.tables["ops_by_shape"].to_pylist():
            for k in ("pct_peak_flops", "pct_peak_bw", "pct_peak_p10", "pct_peak_p90"):
                assert r.get(k) is None or 0 <= r[k] <= 100, (k, r)
        rows = ops.tables["ops_iterations"].to_pylist()
        assert all(r["mfu_pct"] is None or 0 <= r["mfu_pct"] <= 100 for r in rows)
        missing = ops.tables["ops_not_modelled"].to_pylist()
        assert all(0 <= r["pct_of_gpu_time"] <= 100 for r in missing)

    # the diagnosis of one rank alone: its waits n/a (never 0), the ledger adds up
    _diagnosis_invariants(diagnose.run(path).value.diagnosis, one_rank=True)

    # the trace against itself: nothing changed
    same, _ = _command(diff.run, path, path, out=out and out / "d")
    if same is not None:
        said = "\n".join(same.lines)
        assert "counts: 0 added, 0 deleted, 0 increased, 0 decreased" in said
        assert "time: 0 slower, 0 faster" in said


def _command(run, *args, out, **kwargs):
    """A command's :class:`Result` through its Python API, and the one line it refused
    with (a trace it cannot analyse: None); written under ``out`` when given (its figures
    and trace copy, what the command line writes) and never a traceback."""
    try:
        result = run(*args, **kwargs)
    except TraceVizError as exc:  # exit 1 on the command line; a usage error (2) is not
        assert not isinstance(exc, UsageError), str(exc)
        assert "\n" not in str(exc) and "internal error" not in str(exc)
        return None, str(exc)
    if out is not None:
        write(result, out)
    return (None if result.failed else result), None


@pytest.mark.parametrize("job", JOBS, ids=[str(j.relative_to(TRACES)) for j in JOBS])
def test_every_command_on_every_job(job, tmp_path):
    """Each multi-trace folder as a job (copied: the shared folders are read-only, as
    shared job folders often are: every command writes under ./traceviz-out or -o, never
    into the job's folder)."""
    root = tmp_path / "job"
    shutil.copytree(job, root, copy_function=shutil.copyfile)
    root.chmod(0o755)
    before = sorted(root.rglob("*"))
    runner = CliRunner()
    outputs = {}
    for args in (["batch", root, "-q", "-j", "1"], ["aggregate", root, "--no-figures"],
                 ["ops", root, "-o", tmp_path / "ops"],
                 ["breakdown", root, "-o", tmp_path / "bd"], ["pipeline", root, "-o",
                                                              tmp_path / "pp"],
                 ["report", out_dir(root), "--json", "-o", tmp_path / "r.json"],
                 ["export", out_dir(root), "-o", tmp_path / "job.json.gz"],
                 ["critical-path", root, "-o", tmp_path / "cp"],
                 ["diagnose", root, "-o", tmp_path / "diag"],
                 ["html", root, "-o", tmp_path / "job.html"]):
        result = runner.invoke(main, [str(a) for a in args])
        outputs[args[0]] = result
        assert "Traceback" not in result.output and "internal error" not in result.output, \
            (args[0], result.output)
        assert result.exit_code in (0, 1), (args[0], result.output)
        if result.exit_code:
            assert result.output.strip().splitlines()[-1].startswith("traceviz: error:"), \
                result.output
    assert sorted(root.rglob("*")) == before, "nothing written into the job's folder"
    if outputs["report"].exit_code:  # only refused for traces that are not one job
        said = outputs["report"].output
        assert "are both rank" in said or "both state no rank" in said \
            or "traces of separate runs" in said, said
        return
    rep = json.loads((tmp_path / "r.json").read_text())
    x = rep["cross_rank"]
    synced_claimed = x is not None and x["clock_synced"]
    linked = x is not None and x["calls_with_several_ranks"] > 0
    assert not synced_claimed or linked, "synced clocks need a collective that links ranks"
    if "clocks not synced" in outputs["aggregate"].output:
        assert "clock offsets up to" not in outputs["aggregate"].output
    events = json.loads(gzip.open(tmp_path / "job.json.gz").read())["traceEvents"]
    assert all(e.get("dur", 0) >= 0 for e in events)
    # traceviz's step and communication tracks: no two slices of a track overlap
    tracks: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("tid", 0) >= 1_000_000:
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-3 for a, b in zip(spans, spans[1:]))
    assert (tmp_path / "job.html").read_text().count("<section") >= 6
    _diagnosis_invariants(diagnose.run(out_dir(root)).value.diagnosis, one_rank=False)
    for r in pq.read_table(tmp_path / "bd" / "temporal_breakdown.parquet").to_pylist():
        if r["comm_wait_ns"] is not None:
            assert r["comm_wait_ns"] + r["comm_transfer_ns"] == r["comm_ns"]
