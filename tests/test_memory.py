"""``traceviz memory``: the caching allocator's events of the real single-GPU H200 job
(``profile_memory=True``; its truth: ``torch.cuda.max_memory_allocated`` and what stays
allocated after the run) and of hand-built traces whose every byte is worked out here."""
from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from helpers import REFERENCE, shared
from traceviz.cli import main
from traceviz.commands import memory as command
from traceviz.errors import TraceVizError

REAL = "gpu/single_gpt/single_gpt_memory.json.gz"


def _raw_memory(path) -> list[dict]:
    with gzip.open(path, "rb") as fh:
        events = json.loads(fh.read())["traceEvents"]
    return [e for e in events if e.get("name") == "[memory]"]


def test_the_peak_is_the_traces_own_maximum():
    """The peak equals the trace's own Total Allocated maximum, here
    torch.cuda.max_memory_allocated; what the events do not explain (allocated before
    the trace) is what stays allocated after the run (parameters, gradients, optimizer
    state); the groups live at the peak add up to it."""
    truth = json.loads((REFERENCE / "gpu" / "single_gpt.truth.json").read_text())
    mt = truth["memory_trace"]
    raw = _raw_memory(shared(REAL))
    result = command.run(shared(REAL))
    (rank,) = result.tables["memory_ranks"].to_pylist()
    assert rank["peak_bytes"] == max(e["args"]["Total Allocated"] for e in raw) \
        == mt["torch_cuda_max_memory_allocated_bytes"]
    assert rank["events"] == len(raw)
    assert rank["before_trace_bytes"] == mt["torch_cuda_memory_allocated_bytes_after"]
    assert rank["max_reserved_bytes"] == mt["torch_cuda_max_memory_reserved_bytes"]
    peak = result.tables["memory_peak"].to_pylist()
    assert sum(p["bytes"] for p in peak) == rank["peak_bytes"]
    assert sum(p["pct_of_peak"] for p in peak) == pytest.approx(100)
    # the activations of the forward, freed by the backward it peaks in
    assert rank["peak_phase"] == "BWD"
    assert rank["activations_bytes"] == sum(p["bytes"] for p in peak if p["phase"] == "FWD")
    assert rank["activations_bytes"] > 6 << 30
    # the timeline is the trace's own: each event's total, in time order
    tl = result.tables["memory_timeline"]
    assert tl["allocated_bytes"].to_pylist() == [
        e["args"]["Total Allocated"] for e in sorted(raw, key=lambda e: (e["ts"],
                                                                          e["args"]["Ev Idx"]))]
    assert result.lines[0].startswith("rank 0 (stage 0): peak 14.92 GiB allocated")


def test_the_cli_writes_the_tables_and_figure(tmp_path):
    r = CliRunner().invoke(main, ["memory", str(shared(REAL)), "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    for name in ("memory_timeline.csv", "memory_peak.parquet", "memory_peak_ops.csv",
                 "memory_ranks.csv", "memory.png"):
        assert (tmp_path / name).stat().st_size > 0


# ---- hand-built ---------------------------------------------------------------------------

def _trace(rank: int, scale: int, pre: int = 5000, stage_group=None) -> dict:
    """Two micro-batches (µs): forward 0 (main thread) allocates an activation A, its
    backward (autograd thread) frees it and allocates a gradient G, forward 1 allocates
    B, its backward frees B. ``scale`` multiplies every block; ``pre`` bytes are
    allocated before the trace."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
           "tid": 1, "ts": 0, "dur": 5000}]
    total = [pre]
    corr = [0]

    def op(name, tid, ts, seq, kernel):
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid,
                   "ts": ts, "dur": 100, "args": {"Sequence number": seq}})
        corr[0] += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": tid, "ts": ts + 50, "dur": 5, "args": {"correlation": corr[0]}})
        ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                   "ts": ts + 60, "dur": 20, "args": {"correlation": corr[0], "stream": 7,
                                                      "device": 0}})

    def mem(tid, ts, nbytes, addr):
        total[0] += nbytes
        ev.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                   "pid": 1, "tid": tid, "ts": ts, "args": {
                       "Total Reserved": 1 << 20, "Total Allocated": total[0], "Bytes": nbytes,
                       "Device Id": 0, "Device Type": 1, "Addr": addr}})

    op("aten::linear", 1, 100, 1, "gemm_fwd_0")
    mem(1, 120, 1000 * scale, 0xA000)
    op("autograd::engine::evaluate_function: AddmmBackward0", 2, 500, 1, "gemm_bwd_0")
    mem(2, 520, -1000 * scale, 0xA000)
    mem(2, 530, 300 * scale, 0xC000)
    op("aten::linear", 1, 1000, 2, "gemm_fwd_1")
    mem(1, 1020, 1000 * scale, 0xB000)
    op("autograd::engine::evaluate_function: AddmmBackward0", 2, 1500, 2, "gemm_bwd_1")
    mem(2, 1520, -1000 * scale, 0xB000)
    doc = {"schemaVersion": 1, "traceEvents": ev}
    if stage_group is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": len(stage_group),
                                  "pg_config": [{"pg_name": "9",
                                                 "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP",
                                                 "pg_size": 2, "ranks": stage_group}]}
    return doc


def test_live_bytes_at_the_peak_by_micro_batch(tmp_path):
    """Peak 6300 B at forward 1's allocation: 5000 B from before the trace, forward
    micro-batch 1's activation (1000 B) and backward 0's gradient (300 B); forward 0's
    activation was freed by its backward."""
    (tmp_path / "t.json").write_text(json.dumps(_trace(0, 1)))
    result = command.run(tmp_path / "t.json")
    (rank,) = result.tables["memory_ranks"].to_pylist()
    assert (rank["peak_bytes"], rank["peak_phase"], rank["peak_microbatch"],
            rank["activations_bytes"], rank["before_trace_bytes"]) == (6300, "FWD", 1, 1000,
                                                                        5000)
    got = [(p["origin"], p["phase"], p["microbatch"], p["bytes"])
           for p in result.tables["memory_peak"].to_pylist()]
    assert got == [("before the trace", None, None, 5000),
                   ("the peak's iteration", "FWD", 1, 1000),
                   ("the peak's iteration", "BWD", 0, 300)]
    ops = {(o["op"], o["phase"]): o["bytes"] for o in
           result.tables["memory_peak_ops"].to_pylist()}
    assert ops == {("aten::linear", "FWD"): 1000,
                   ("autograd::engine::evaluate_function: AddmmBackward0", "BWD"): 300}
    tl = result.tables["memory_timeline"].to_pylist()
    assert [(r["delta"], r["phase"], r["microbatch"]) for r in tl] == [
        (1000, "FWD", 0), (-1000, "BWD", 0), (300, "BWD", 0), (1000, "FWD", 1),
        (-1000, "BWD", 1)]


def test_a_job_by_stage(tmp_path):
    """Two pipeline stages (ranks 0 and 1 of one PP group): each rank's peak with its
    stage, the first stage's the larger here (blocks 3x)."""
    job = tmp_path / "job"
    job.mkdir()
    for rank, scale in ((0, 3), (1, 1)):
        (job / f"rank_{rank}.json").write_text(json.dumps(
            _trace(rank, scale, stage_group=[0, 1])))
    result = command.run(job)
    ranks = {r["rank"]: r for r in result.tables["memory_ranks"].to_pylist()}
    assert {r: (x["stage"], x["peak_bytes"]) for r, x in ranks.items()} == {
        0: (0, 5000 + 3000 + 900), 1: (1, 5000 + 1000 + 300)}
    stages = result.value.stage_peaks()
    assert [(s["stage"], s["rank"]) for s in stages] == [(0, 0), (1, 1)]


def test_a_trace_without_allocator_events_says_how_to_record_them():
    with pytest.raises(TraceVizError, match="profile_memory=True"):
        command.run(shared("gpu/single_gpt/single_gpt.json.gz"))


def test_the_page_shows_memory_and_the_hang(tmp_path):
    """Once the trace's allocator table is parsed (traceviz memory), the HTML page has a
    memory section; with --hang a hang section naming the rank that stopped; without
    either, neither."""
    trace = shared(REAL)
    runner = CliRunner()
    plain = tmp_path / "plain.html"
    assert runner.invoke(main, ["html", str(trace), "-o", str(plain)]).exit_code == 0
    assert "<section id='memory'>" not in plain.read_text()
    assert runner.invoke(main, ["memory", str(trace)]).exit_code == 0
    page = tmp_path / "page.html"
    r = runner.invoke(main, ["html", str(trace), "-o", str(page), "--hang",
                             str(shared("gpu/flight_recorder"))])
    assert r.exit_code == 0, r.output
    text = page.read_text()
    assert "<section id='memory'>" in text and "14.917" in text
    assert "<section id='hang'>" in text and "rank 2 never entered 3 op(s)" in text
    assert "<a href='#memory'>Memory</a>" in text and "<a href='#hang'>Hang</a>" in text


# ---- hostile allocator events ---------------------------------------------------------------

def _hostile(doc: dict, **args) -> dict:
    """``doc`` with one more allocator event (last in ``traceEvents``, at 600 µs on the
    autograd thread) whose args are ``args`` over a readable event's that changes
    nothing: Total Allocated the running total there (5300 B), 0 bytes at 0xD000
    (an arg given as ``...`` is left out)."""
    base = {"Total Reserved": 1 << 20, "Total Allocated": 5300, "Bytes": 0, "Device Id": 0,
            "Device Type": 1, "Addr": 0xD000}
    base.update(args)
    doc["traceEvents"].append({"ph": "i", "cat": "cpu_instant_event", "s": "t",
                               "name": "[memory]", "pid": 1, "tid": 2, "ts": 600,
                               "args": {k: v for k, v in base.items() if v is not ...}})
    return doc


@pytest.mark.parametrize("args", [
    # an unreadable size of a free of the gradient G (live at the peak); read as a
    # 1-byte free at its address, it moved G's 300 B to "before the trace"
    {"Bytes": 1e30, "Addr": 0xC000}, {"Bytes": float("nan"), "Addr": 0xC000},
    {"Bytes": "abc", "Addr": 0xC000}, {"Bytes": 1.5, "Addr": 0xC000},
    # an allocation of 300 B at an unreadable address: read as one shared address, it
    # was live at the peak
    {"Bytes": 300, "Addr": 1e30}, {"Bytes": 300, "Addr": float("nan")},
    {"Bytes": 300, "Addr": "abc"}, {"Bytes": 300, "Addr": 1.5}, {"Bytes": 300, "Addr": ...},
], ids=lambda a: "-".join(f"{k}={v}" for k, v in a.items()))
def test_an_unreadable_size_or_address_is_left_out_with_a_note(tmp_path, args):
    """An allocator event whose Bytes or Addr cannot be read (beyond int64, NaN, a word,
    a fraction, absent) is left out: every table is as without it, and one note counts
    it and names it (its position in traceEvents, its ts)."""
    clean, bad = tmp_path / "clean.json", tmp_path / "bad.json"
    clean.write_text(json.dumps(_trace(0, 1)))
    doc = _hostile(_trace(0, 1), **args)
    bad.write_text(json.dumps(doc))  # NaN as the bare literal NaN
    want, got = command.run(clean), command.run(bad)
    for name, table in want.tables.items():
        assert got.tables[name].to_pylist() == table.to_pylist(), name
    assert want.notes == []
    assert got.notes == [
        f"rank 0: 1 allocator event(s) with an unreadable Bytes or Addr left out (first: "
        f"the allocator event traceEvents[{len(doc['traceEvents']) - 1}] at ts 600 µs)"]


def _one_line_error(tmp_path, trace) -> str:
    """The CLI's error on ``trace``: exit code 1, one line, no traceback."""
    r = CliRunner().invoke(main, ["memory", str(trace), "-o", str(tmp_path / "out")])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    (line,) = r.stderr.strip().splitlines()
    return line


def test_an_absurd_device_id_is_refused_in_one_line(tmp_path):
    """A Device Id of 1e12 on rank 1 of a job: one line naming the rank's trace and the
    event, never a suggestion of an option ``memory`` does not have."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank_0.json").write_text(json.dumps(_trace(0, 1, stage_group=[0, 1])))
    doc = _hostile(_trace(1, 1, stage_group=[0, 1]), **{"Device Id": 1e12})
    (job / "rank_1.json").write_text(json.dumps(doc))
    line = _one_line_error(tmp_path, job)
    assert line == (f"traceviz: error: {job / 'rank_1.json'}: rank 1: the allocator event "
                    f"traceEvents[{len(doc['traceEvents']) - 1}] at ts 600 µs: Device Id "
                    "1000000000000 is no device (-1: the CPU, else 0 to 1024)")
    assert "--" not in line


@pytest.mark.parametrize("size", [1 << 62, 1 << 48], ids=["2^62-byte blocks",
                                                           "live blocks beyond 2^48"])
def test_an_absurd_size_is_refused_in_one_line(tmp_path, size):
    """Two live blocks of 2^62 bytes (their sum overflowed int64): the first is refused
    in one line naming it. Blocks of 2^48 bytes each (the bound), live at the peak with
    B's 1000 B beyond it (the totals unchanged): refused at the peak, so no sum of live
    blocks overflows."""
    doc = _trace(0, 1)
    ev = doc["traceEvents"]
    a, _, g, b, _ = (e for e in ev if e.get("name") == "[memory]")
    for block, addr in ((a, 0x1000), (g, 0x2000)):  # no longer freed: live at the peak
        block["args"].update(Bytes=size, Addr=addr)
        if size > 1 << 48:  # (each total within int64)
            block["args"]["Total Allocated"] += size
    (tmp_path / "t.json").write_text(json.dumps(doc))
    line = _one_line_error(tmp_path, tmp_path / "t.json")
    where = f"traceviz: error: {tmp_path / 't.json'}: rank 0: "
    if size > 1 << 48:
        assert line == (where + f"the allocator event traceEvents[{ev.index(a)}] at ts 120 "
                        f"µs: Bytes {1 << 62} is beyond ±2^48 bytes (256 TiB): no device "
                        "holds that")
    else:
        assert line == (where + "the blocks live at the peak, the allocator event "
                        f"traceEvents[{ev.index(b)}] at ts 1020 µs, add up to "
                        f"{2 * size + 1000} bytes, beyond 2^48 (256 TiB): no device holds "
                        "that")
