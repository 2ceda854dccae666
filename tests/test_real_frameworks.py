"""Numbers that hold on the traces real frameworks write (the H200 jobs in
../shared/traces/gpu, recorded with PyTorch 2.11 and Megatron-LM): batched point-to-point
under ``nccl:coalesced``, iterations the GPU runs long after the CPU's ProfilerStep, ranks
of one host on one clock, Megatron without python frames, CUDA graph replays, and no
straggler claim across pipeline stages. Every expectation comes from the traces' own
events (read here with plain JSON) or from ../shared/reference/gpu, never from
traceviz's outputs."""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import traceviz
from traceviz.analysis.activities import activities
from traceviz.analysis.calls import rank_calls
from traceviz.analysis.clocks import ends_of, synchronize
from traceviz.analysis.iterations import windows
from traceviz.cli import main

from helpers import REFERENCE, shared

GPU = "gpu"
MEGATRON = ("megatron_1f1b", "megatron_moe")


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return orjson.loads(fh.read())["traceEvents"]  # as json's, ~5x faster


def _rank_files(job: str) -> list[Path]:
    return sorted(shared(f"{GPU}/{job}/iteration_5").glob("rank_*.json.gz"))


def _coalesced_blocks(events: list[dict]) -> list[dict]:
    """Per ``ncclDevKernel_SendRecv`` kernel launched in a ``nccl:coalesced`` annotation,
    from the raw events: its start and the send / receive ``record_param_comms`` ops
    recorded on its launching thread since that thread's previous kernel launch
    (PyTorch's batch_isend_irecv)."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launched = [(launches[k["args"]["correlation"]], k) for k in device
                if k["args"].get("correlation") in launches]
    rpc = [e for e in events if e.get("name") == "record_param_comms"
           and e["args"].get("Collective name") in ("send", "recv")]
    coalesced = [e for e in events if e.get("name") == "nccl:coalesced"]
    out, previous = [], {}
    for launch, kernel in sorted(launched, key=lambda lk: float(lk[0]["ts"])):
        tid, t = launch["tid"], float(launch["ts"])
        if "SendRecv" in kernel["name"] and any(  # all-to-alls are SendRecv kernels too
                a["tid"] == tid and float(a["ts"]) <= t <= float(a["ts"]) + float(a["dur"])
                for a in coalesced):
            ops = sorted((r for r in rpc if r["tid"] == tid
                          and previous.get(tid, -1.0) < float(r["ts"])
                          and float(r["ts"]) + float(r["dur"]) <= t),
                         key=lambda r: float(r["ts"]))
            out.append({"ts": kernel["ts"], "ops": ops})
        previous[tid] = t
    return out


@pytest.fixture(scope="module")
def job_cwd(module_folder):
    """A folder per real job to run its commands in: its tables, parsed once by the first
    command (in ``traceviz-out/``), are taken up to date by the next ones."""
    def cwd(job: str) -> Path:
        folder = module_folder / job
        folder.mkdir(exist_ok=True)
        return folder
    return cwd


@pytest.fixture(params=MEGATRON)
def megatron(request, job_cwd, monkeypatch):
    """One real Megatron job: its rank files, the commands run in its own folder."""
    job = request.param
    monkeypatch.chdir(job_cwd(job))
    return job, _rank_files(job)


# ---- 1. batched point-to-point --------------------------------------------------------

def test_every_batched_send_and_receive_joins_its_ops(megatron):
    """Each SendRecv kernel carries the peers of the send / receive ops of its
    coalescing block, in the pipeline group, as PyTorch recorded them."""
    job, files = megatron
    for path in files[:2] + files[-2:]:  # a first and a last stage of two pipelines
        blocks = _coalesced_blocks(_events(path))
        assert blocks and all(b["ops"] for b in blocks)
        table = traceviz.parse_table(path)
        p2p = table.filter(pc.and_(pc.equal(table["comm_group"], "PP"),
                                   pc.equal(table["collective"], "SendRecv")))
        assert p2p.num_rows == len(blocks)
        got = sorted(zip(p2p["ts"].to_pylist(), p2p["src_rank"].to_pylist(),
                         p2p["dst_rank"].to_pylist(), p2p["comm_group"].to_pylist(),
                         p2p["pg_desc"].to_pylist()))
        for (ts, src, dst, grp, desc), b in zip(got, sorted(blocks, key=lambda b: b["ts"])):
            assert ts == round(float(b["ts"]) * 1000)
            sends = [o["args"]["Dst Rank"] for o in b["ops"]
                     if o["args"]["Collective name"] == "send"]
            recvs = [o["args"]["Src Rank"] for o in b["ops"]
                     if o["args"]["Collective name"] == "recv"]
            assert (dst or [], src or []) == (sends, recvs)
            assert (grp, desc) == ("PP", "PIPELINE_MODEL_PARALLEL_GROUP")
        stats = traceviz.metadata(table)["stats"]["join"]
        assert stats["kernels of coalesced blocks joined with their ops"] == len(blocks)


def test_every_send_and_receive_is_paired_on_the_megatron_jobs(megatron, tmp_path):
    """Every pipeline send / receive of the job pairs with its peer's: its wait and
    transfer are known, its peer is the rank the trace names, and each pair's kernels
    name each other; the critical path joins all of them."""
    from traceviz.commands import critical_path, diagnose

    job, files = megatron
    result = diagnose.run(files[0].parent)
    calls = result.tables["comm_calls"]
    pp = calls.filter(pc.and_(pc.equal(calls["group"], "PP"),
                              pc.is_in(calls["kind"], pc.cast(["Send", "Recv", "SendRecv"],
                                                              "string")))).to_pylist()
    # the peers each rank's raw events name for its SendRecv kernels
    named = {}
    for path in files:
        rank = int(path.name.split("_")[1])
        for b in _coalesced_blocks(_events(path)):
            peers = {o["args"].get("Dst Rank", o["args"].get("Src Rank")) for o in b["ops"]}
            named[(rank, round(float(b["ts"]) * 1000))] = peers
    assert len(pp) == len(named) == {"megatron_1f1b": 72, "megatron_moe": 40}[job]
    for r in pp:
        assert r["wait_ns"] is not None and r["transfer_ns"] is not None
        assert r["wait_ns"] + r["transfer_ns"] == r["end_ns"] - r["start_ns"]
        assert r["members"] == r["expected_members"] == 2
        assert {r["peer_rank"]} == named[(r["rank"], r["start_ns"])]
    kinds = Counter(r["kind"] for r in pp)
    assert kinds["SendRecv"] > 0 and kinds["Send"] > 0 and kinds["Recv"] > 0
    notes = critical_path.run(files[0].parent).notes
    assert any(f"pipeline sends / receives: {len(pp)} of {len(pp)} joined" in n for n in notes)
    assert not any("could not be paired" in n for n in notes)


def test_a_block_with_two_peers_waits_for_the_later_one(tmp_path):
    """The interleaved schedule's batched exchange on a middle stage: one kernel sends to
    and receives from both neighbours (hand-built, three stages, skewed clocks synced on
    an all-reduce). Each transfer pairs with its peer's; a kernel waits until the later of
    its peers arrives (µs, true clock: rank 0 at 100, rank 1 at 120, rank 2 at 150)."""
    from handjob import K, Rank, write_job
    from traceviz.commands import diagnose

    group, pp = [0, 1, 2], dict(pg="9", desc="PIPELINE_MODEL_PARALLEL_GROUP")
    blocks = {0: (100, [("send", 1), ("recv", 1)]),
              1: (120, [("send", 2), ("recv", 0), ("send", 0), ("recv", 2)]),
              2: (150, [("send", 1), ("recv", 1)])}
    skew = {0: 0.0, 1: 40.0, 2: -25.0}
    ranks = [Rank(r, 3, [K(start, 200, "ncclDevKernel_SendRecv", 20, group=group,
                           ops=ops, **pp),
                         K(200 + 10 * r, 300, "ncclDevKernel_AllReduce", 21,
                           coll="allreduce", group=group, pg="0", desc="DATA_PARALLEL_GROUP",
                           seq=1)],
                  [(1, 0, 400)], skew=skew[r])
             for r, (start, ops) in blocks.items()]
    result = diagnose.run(write_job(tmp_path / "job", ranks))
    rows = {r["rank"]: r for r in result.tables["comm_calls"].to_pylist()
            if r["group"] == "PP"}
    want = {0: ("SendRecv", 20, 80, 1, 1), 1: ("SendRecv", 30, 50, 2, 2),
            2: ("SendRecv", 0, 50, None, 1)}
    for rank, (kind, wait, transfer, waited, peer) in want.items():
        r = rows[rank]
        assert (r["kind"], r["wait_ns"], r["transfer_ns"], r["waited_for_rank"],
                r["peer_rank"]) == (kind, wait * 1000, transfer * 1000, waited, peer)
    assert not any("not traced" in n or "state no peer" in n for n in result.notes)


def test_a_coalesced_reduce_scatter_joins_its_ops(tmp_path):
    """Megatron's gradient buckets reduced under ``_coalescing_manager`` (DP): each rank
    records two reduce-scatter ops, then one kernel in ``nccl:coalesced``; the kernel is
    the DP group's reduce-scatter of both buckets' bytes, matched across the ranks by its
    Seq: rank 1 arrives 40 µs after rank 0 (hand-built, true-clock µs)."""
    from handjob import K, Rank, write_job
    from traceviz.commands import diagnose

    group = [0, 1]
    ranks = [Rank(r, 2, [K(100 + 40 * r, 300, "ncclDevKernel_ReduceScatter_Sum_bf16", 32,
                           group=group, pg="5", desc="DATA_PARALLEL_GROUP", seq=3,
                           ops=[("_reduce_scatter_base", None)] * 2)],
                  [(1, 0, 500)]) for r in group]
    folder = write_job(tmp_path / "job", ranks)
    table = traceviz.parse_table(folder / "rank_0000.json")
    (row,) = table.to_pylist()
    assert (row["kind"], row["comm_group"], row["collective"], row["seq"],
            row["msg_in_bytes"]) == ("COMM", "DP", "ReduceScatter", 3, 2 << 20)
    rows = {r["rank"]: r for r in diagnose.run(folder).tables["comm_calls"].to_pylist()}
    assert (rows[0]["wait_ns"], rows[0]["waited_for_rank"]) == (40_000, 1)
    assert (rows[1]["wait_ns"], rows[1]["transfer_ns"]) == (0, 160_000)


def test_a_peer_not_traced_is_named(tmp_path):
    """Stage 0 of the real job alone (ranks 0-3): its sends / receives go to ranks 4-7,
    which are not there; the diagnosis names them and what it cannot split."""
    from traceviz.commands import diagnose

    files = _rank_files("megatron_1f1b")
    (tmp_path / "stage0").mkdir()
    peers = set()
    for f in files[:4]:
        (tmp_path / "stage0" / f.name).write_bytes(f.read_bytes())
        peers |= {o["args"].get("Dst Rank", o["args"].get("Src Rank"))
                  for b in _coalesced_blocks(_events(f)) for o in b["ops"]}
    assert peers == {4, 5, 6, 7}
    result = diagnose.run(tmp_path / "stage0")
    (note,) = [n for n in result.notes if "name a peer that is not traced" in n]
    assert note.startswith("WARNING: 64 send / receive transfer(s)")  # 16 per rank
    assert "rank(s) 4, 5, 6, 7" in note
    calls = result.tables["comm_calls"]
    pp = calls.filter(pc.equal(calls["group"], "PP"))
    assert pp["wait_ns"].null_count == pp.num_rows == 36


# ---- 2. GPU-side iterations ------------------------------------------------------------

@pytest.mark.parametrize("name,key", [("single_gpt", "profiled_trace"),
                                      ("single_gpt_memory", "memory_trace")])
def test_gpu_bound_iterations_carry_their_own_flops_and_time(name, key):
    """The CPU runs ahead of the GPU: each profiled step's window follows its GPU work,
    within 5 % of the CUDA-event time, with the step's own FLOPs (the analytic 24.66
    TFLOP, within 3 %): MFU about 41 %."""
    from traceviz.commands import ops

    truth = json.loads((REFERENCE / GPU / "single_gpt.truth.json").read_text())
    steps = {s["step"]: s for s in truth[key]["steps"]}
    flops = truth["flops_per_step"]["total_flops_train_causal_attn"]
    path = shared(f"{GPU}/single_gpt/{name}.json.gz")
    iters = ops.run(path).tables["ops_iterations"].to_pylist()
    assert iters and {r["iteration"] for r in iters} <= set(steps)
    for r in iters:
        cuda_ms = steps[r["iteration"]]["cuda_event_ms"]
        assert r["span_ns"] / 1e6 == pytest.approx(cuda_ms, rel=0.05)
        assert r["model_flops"] == pytest.approx(flops, rel=0.03)
        assert r["cpu_span_ns"] / 1e6 == pytest.approx(steps[r["iteration"]]["cpu_wall_ms"],
                                                       rel=0.05)
        assert 38 < r["mfu_pct"] < 45
    # the ledger's windows, the diagnosis' spans and the report's iteration times too
    from traceviz.commands import diagnose, report

    table = traceviz.parse_table(path)
    win = windows(activities(table, rank=0))
    assert [int(w) for w in win.end - win.start] == [r["span_ns"] for r in iters]
    ledger = diagnose.run(path).tables["ledger"].to_pylist()
    assert [(r["iteration"], r["span_ns"]) for r in ledger] == [
        (r["iteration"], r["span_ns"]) for r in iters]
    assert all(r["cpu_span_ns"] < r["span_ns"] for r in ledger)  # the CPU ran ahead
    rep = report.run(path).value.report["throughput"]["iterations"]
    assert [(r["iteration"], r["time_ms"]) for r in rep] == [
        (r["iteration"], r["span_ns"] / 1e6) for r in iters]


# ---- 3. one host, one clock ------------------------------------------------------------

@pytest.mark.parametrize("job", [f"{m}/iteration_5" for m in MEGATRON] + ["tp_dp"])
def test_ranks_of_one_host_are_not_shifted(job):
    """Every rank of these jobs ran on one machine: their clocks are one (offsets 0),
    and no shift explains their collectives' ends better."""
    folder = shared(f"{GPU}/{job}")
    files = sorted(folder.glob("rank_*.json.gz"))
    tables = {i: traceviz.parse_table(f) for i, f in enumerate(files)}
    sync = synchronize({r: ends_of(rank_calls(t, r)) for r, t in tables.items()})
    assert sync.method == "own clocks", sync.why
    assert not sync.offsets.any()
    # the same ranks stating one host are not shifted whatever their ends say
    hosts = {r: "node0" for r in tables}
    sync = synchronize({r: ends_of(rank_calls(t, r)) for r, t in tables.items()}, hosts)
    assert sync.method == "own clocks" and "one host" in sync.why


def test_skewed_clocks_are_still_shifted(tmp_path):
    """A job whose hosts' clocks differ (the synthesizer's per-node skew) is shifted
    back onto one clock: the offsets the synthesizer applied, to the nanosecond."""
    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=4, layers=4, skew_us=250.0,
                           gpus_per_node=2), tmp_path)
    truth = json.loads((tmp_path / "ground_truth" / "ground_truth.json").read_text())
    files = sorted((tmp_path).rglob("*.pt.trace.json*"))
    tables = {}
    for f in files:
        t = traceviz.parse_table(f)
        tables[traceviz.metadata(t)["rank"]] = t
    sync = synchronize({r: ends_of(rank_calls(t, r)) for r, t in tables.items()})
    assert sync.method == "shifted"
    skew = np.array([truth["skew_ns"][r] for r in sorted(tables)])
    assert len(set(skew.tolist())) == 4  # four hosts, four clocks
    assert np.abs(sync.offsets - (skew - skew[0])).max() <= 1_000


# ---- 4. frameless micro-batches --------------------------------------------------------

def _strip_frames(src: Path, dst: Path) -> None:
    """A copy of the job folder ``src`` with every python_function event of its traces
    removed (other files copied as they are)."""
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if ".pt.trace.json" not in path.name:
            out.write_bytes(path.read_bytes())
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            doc = orjson.loads(fh.read())
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if e.get("cat") != "python_function"]
        with (gzip.open(out, "wb", compresslevel=1) if path.suffix == ".gz"
              else open(out, "wb")) as fh:
            fh.write(orjson.dumps(doc))


def _microbatch_rows(folder: Path) -> dict:
    from traceviz.commands import aggregate

    rows = aggregate.run(folder, figures=False).tables["microbatches"].to_pylist()
    return {(r["rank"], r["iteration"], r["phase"], r["microbatch"], r["chunk"]): r
            for r in rows}


def _assert_rows_equal(framed: dict, frameless: dict) -> None:
    assert set(framed) == set(frameless)
    for key, a in framed.items():
        b = frameless[key]
        for col in ("wall_clock_ns", "comp_ns", "comm_ns"):
            assert abs(a[col] - b[col]) <= 1_000, (key, col, a[col], b[col])


def test_frameless_megatron_equals_framed(tmp_path, job_cwd, monkeypatch):
    """The real 1F1B Megatron job with its python frames removed: the same micro-batch
    rows as with them (wall, compute, communication within 1 µs), the frames' own
    micro-batches (forward_step / backward_step) giving the keys."""
    src = shared(f"{GPU}/megatron_1f1b")
    _strip_frames(src, tmp_path / "stripped")
    monkeypatch.chdir(job_cwd("megatron_1f1b"))
    framed = _microbatch_rows(src / "iteration_5")
    monkeypatch.chdir(tmp_path)
    frameless = _microbatch_rows(tmp_path / "stripped" / "iteration_5")
    # the frames' micro-batch steps: 8 forward and 8 backward per rank
    forward_steps = Counter()
    for path in _rank_files("megatron_1f1b"):
        forward_steps[int(path.name.split("_")[1])] = sum(
            1 for e in _events(path) if e.get("cat") == "python_function"
            and e["name"].endswith(": forward_step") and "schedules.py" in e["name"])
    assert set(forward_steps.values()) == {8}
    assert Counter(k[0] for k in framed) == {r: 16 for r in forward_steps}
    _assert_rows_equal(framed, frameless)


def test_frameless_interleaved_equals_framed(tmp_path):
    """A synthesized interleaved job (2 model chunks per stage, no batched P2P) with and
    without frames: the same micro-batch rows."""
    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=1, pp=2, dp=1, vpp=2, schedule="interleaved", layers=8,
                           microbatches=4), tmp_path / "framed")
    _strip_frames(tmp_path / "framed", tmp_path / "stripped")
    folder = next(p.parent for p in (tmp_path / "framed").rglob("*.pt.trace.json*"))
    rel = folder.relative_to(tmp_path / "framed")
    _assert_rows_equal(_microbatch_rows(folder), _microbatch_rows(tmp_path / "stripped" / rel))


def test_last_stage_loss_is_forward_and_its_scaling_backward(tmp_path):
    """On the real job's last stage, without frames, every main-thread launch takes the
    phase its frames give it: inside forward_step (the model and the loss computation)
    FWD, inside backward_step (Megatron's loss scaling, its first autograd node, and the
    root gradient) BWD, between the steps (the running token count, total_num_tokens +=
    num_tokens) no micro-batch."""
    path = _rank_files("megatron_1f1b")[4]  # stage 1 of 2
    events = _events(path)
    main = next(e["tid"] for e in events if e.get("name", "").startswith("ProfilerStep#"))

    def spans(suffix):
        return [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                if e.get("cat") == "python_function" and e["name"].endswith(suffix)
                and "schedules.py" in e["name"]]

    forward, backward = spans(": forward_step"), spans(": backward_step")
    stripped = tmp_path / "rank_0004.json"
    stripped.write_text(json.dumps({"traceEvents": [
        e for e in events if e.get("cat") != "python_function"]}))
    table = traceviz.parse_table(stripped)
    tids = {t["tid"] for t in traceviz.metadata(table)["threads"] if t["tid"] == main}
    assert tids
    seen = Counter()
    for lt, tid, ph, mb, op in zip(table["launch_ts"].to_pylist(),
                                   table["launch_tid"].to_pylist(),
                                   table["phase"].to_pylist(),
                                   table["microbatch"].to_pylist(),
                                   table["cpu_op"].to_pylist()):
        if lt is None or tid != main:
            continue
        t = lt / 1000
        if any(a <= t <= b for a, b in forward):
            assert ph == "FWD", op
            seen["forward"] += 1
        elif any(a <= t <= b for a, b in backward):
            assert ph == "BWD", op
            seen[op] += 1
        elif op == "aten::add_":
            assert mb == -1, op
            seen["between"] += 1
    # the scaling and the root gradient of each of the 8 backward steps, 8 token counts
    assert seen["aten::mul"] == 8 and seen["aten::fill_"] == 8 and seen["between"] == 8
    assert seen["forward"] > 1000


def test_cross_entropy_before_an_unscaled_backward_stays_forward(tmp_path):
    """A last stage without loss scaling (no grad_scale_func): the backward's first
    autograd node differentiates the vocab-parallel cross-entropy itself, an autograd
    Function whose forward launched kernels and all-reduces in forward_step. Without
    frames those stay in the forward; only the root gradient the main thread makes after
    it (ones_like) joins the backward (hand-built, two micro-batches, µs)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
           "tid": 1, "ts": 0, "dur": 2100}]
    corr = [0]

    def op(name, tid, ts, dur, seq, kernels, rpc=False):
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid,
                   "ts": ts, "dur": dur, "args": {} if seq is None else
                   {"Sequence number": seq}})
        for j, k in enumerate(kernels):
            corr[0] += 1
            t = ts + 2 + 6 * j
            if rpc:
                ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms",
                           "pid": 1, "tid": tid, "ts": t - 1, "dur": 5, "args": {
                               "Collective name": "allreduce", "Process Group Name": "3",
                               "Process Group Description": "TENSOR_MODEL_PARALLEL_GROUP",
                               "Process Group Ranks": "[0, 1]", "Group size": 2,
                               "dtype": "Float", "In msg nelems": 8192,
                               "Out msg nelems": 8192}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 1, "tid": tid, "ts": t, "dur": 2,
                       "args": {"correlation": corr[0]}})
            ev.append({"ph": "X", "cat": "kernel", "name": k, "pid": 0, "tid": 7,
                       "ts": t + 4, "dur": 3, "args": {"correlation": corr[0], "stream": 7,
                                                       "device": 0}})

    for m in range(2):
        b, s = 1000 * m, 10 * m
        op("aten::linear", 1, b, 100, s, [f"gemm_fwd_{m}"])
        op("_VocabParallelCrossEntropy", 1, b + 110, 80, s + 1,
           [f"ce_max_{m}", f"ce_exp_{m}"])
        op("c10d::allreduce_", 1, b + 140, 30, None,
           [f"ncclDevKernel_AllReduce_Sum_f32_{m}"], rpc=True)
        op("aten::ones_like", 1, b + 700, 5, None, [f"root_grad_{m}"])
        op("autograd::engine::evaluate_function: _VocabParallelCrossEntropyBackward", 2,
           b + 730, 40, s + 1, [f"ce_bwd_{m}"])
        op("autograd::engine::evaluate_function: AddmmBackward0", 2, b + 800, 90, s,
           [f"gemm_bwd_{m}"])
    (tmp_path / "t.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    table = traceviz.parse_table(tmp_path / "t.json")
    got = {n: (p, mb) for n, p, mb in zip(table["name"].to_pylist(),
                                         table["phase"].to_pylist(),
                                         table["microbatch"].to_pylist())}
    for m in range(2):
        for k in ("gemm_fwd", "ce_max", "ce_exp", "ncclDevKernel_AllReduce_Sum_f32"):
            assert got[f"{k}_{m}"] == ("FWD", m), k
        for k in ("root_grad", "ce_bwd", "gemm_bwd"):
            assert got[f"{k}_{m}"] == ("BWD", m), k


# ---- 5. CUDA graphs -------------------------------------------------------------------

def _compiled_step_trace(path: Path) -> None:
    """One training step of a model compiled with torch.compile(mode="reduce-overhead")
    as PyTorch records it (µs): the forward graph replayed by ``cudaGraphLaunch`` inside
    ``CompiledFunction`` on the main thread (the loss inside the compiled graph), the
    root gradient, the backward graph replayed inside the autograd engine's
    ``CompiledFunctionBackward`` (the same Sequence number), then the optimizer. Graph
    kernels carry the launch's correlation and ``graph id`` / ``graph node id``
    (Kineto's CuptiActivity.h, CUDA >= 12)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
           "tid": 1, "ts": 0, "dur": 3000}]
    corr = [0]

    def launch(tid, ts, name, kernels, graph=0):
        corr[0] += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid,
                   "ts": ts, "dur": 8, "args": {"correlation": corr[0]}})
        for k, (kname, kts, kdur) in enumerate(kernels):
            args = {"correlation": corr[0], "stream": 7, "device": 0}
            if graph:
                args.update({"graph id": graph, "graph node id": k + 1})
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7,
                       "ts": kts, "dur": kdur, "args": args})

    def op(name, tid, ts, dur, seq=None, cat="cpu_op"):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                   "dur": dur, "args": {} if seq is None else {"Sequence number": seq}})

    op("CompiledFunction", 1, 100, 300, seq=7)
    launch(1, 150, "cudaGraphLaunch", [(f"triton_poi_fused_fwd_{k}", 200 + 60 * k, 50)
                                       for k in range(3)], graph=1)
    op("aten::ones_like", 1, 450, 20)
    launch(1, 455, "cudaLaunchKernel", [("fill_root_grad", 480, 4)])
    op("autograd::engine::evaluate_function: CompiledFunctionBackward", 2, 500, 400, seq=7)
    op("CompiledFunctionBackward", 2, 510, 380, seq=7)
    launch(2, 550, "cudaGraphLaunch", [(f"triton_poi_fused_bwd_{k}", 600 + 70 * k, 60)
                                       for k in range(4)], graph=2)
    op("Optimizer.step#AdamW.step", 1, 1000, 200, cat="user_annotation")
    op("aten::_foreach_add_", 1, 1010, 50)
    launch(1, 1020, "cudaLaunchKernel", [("multi_tensor_apply_kernel", 1100, 30)])
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))


def test_graph_replays_take_the_phase_of_their_launch(tmp_path):
    _compiled_step_trace(tmp_path / "t.json")
    table = traceviz.parse_table(tmp_path / "t.json")
    got = dict(zip(table["name"].to_pylist(), table["phase"].to_pylist()))
    for k in range(3):
        assert got[f"triton_poi_fused_fwd_{k}"] == "FWD"
    for k in range(4):
        assert got[f"triton_poi_fused_bwd_{k}"] == "BWD"
    assert got["fill_root_grad"] == "BWD"
    assert got["multi_tensor_apply_kernel"] == "OPTIMIZER"


def test_replayed_graph_flops_are_na_with_the_reason(tmp_path):
    from traceviz.commands import ops

    _compiled_step_trace(tmp_path / "t.json")
    result = ops.run(tmp_path / "t.json")
    (it,) = result.tables["ops_iterations"].to_pylist()
    assert it["model_flops"] is None and it["mfu_pct"] is None
    assert it["flops_unknown"].startswith("7 compute kernel(s) replayed from CUDA graphs")
    assert any("replayed from CUDA graphs" in n for n in result.notes)
    why = dict(zip(result.tables["ops_not_modelled"]["op"].to_pylist(),
                   result.tables["ops_not_modelled"]["why"].to_pylist()))
    assert why["CompiledFunction"].startswith("replayed from a CUDA graph")


# ---- 6. peers --------------------------------------------------------------------------

def test_no_straggler_claim_across_stages(tmp_path):
    """One pipeline of the real job (one rank per stage): no rank has a peer doing the
    same work, so none is compared or called a straggler, and the diagnosis says so."""
    from traceviz.commands import diagnose

    files = _rank_files("megatron_1f1b")
    one = tmp_path / "pipeline0"
    one.mkdir()
    for f in (files[0], files[4]):  # PP group [0, 4]
        (one / f.name).write_bytes(f.read_bytes())
    result = diagnose.run(one)
    speed = result.tables["peer_speed"].to_pylist()
    assert speed and all(r["slowdown"] is None and not r["straggler"] for r in speed)
    assert result.tables["stragglers"].num_rows == 0
    assert any("stragglers: not assessed: no two ranks do the same work" in line
               for line in result.lines)


def test_peers_are_the_ranks_of_one_stage(job_cwd, monkeypatch):
    """On the whole real job each rank is compared with the ranks of its own stage only:
    the pipeline groups its traces' pg_config states (read here from the raw JSON)."""
    from traceviz.commands import diagnose

    monkeypatch.chdir(job_cwd("megatron_1f1b"))
    files = _rank_files("megatron_1f1b")
    stage = {}
    for path in files:
        with gzip.open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
        for pg in doc["distributedInfo"]["pg_config"]:
            if pg["pg_desc"] == "PIPELINE_MODEL_PARALLEL_GROUP":
                stage.update({r: s for s, r in enumerate(pg["ranks"])})
    speed = diagnose.run(files[0].parent).tables["peer_speed"].to_pylist()
    assert {r["rank"]: r["stage"] for r in speed} == stage
    size = Counter(stage.values())
    assert all(r["peers"] == size[stage[r["rank"]]] - 1 for r in speed)


def test_hosts_stated_in_the_trace_are_one_clock_each(tmp_path):
    """Ranks that state their host share its clock: two hosts of two ranks each, one
    offset per host, whatever the ranks' own ends say (hand-built: the second host 300
    µs ahead, the kernels of one collective ending 30 µs apart on each host)."""
    from handjob import K, Rank, trace
    from traceviz.analysis.clocks import hosts_of

    group = [0, 1, 2, 3]
    tables = {}
    for r in group:
        ks = [K(100 + 200 * c, 150 + 200 * c + 30 * (r % 2), "ncclDevKernel_AllReduce", 21,
                coll="allreduce", group=group, pg="0", desc="DATA_PARALLEL_GROUP", seq=c)
              for c in range(4)]
        doc = trace(Rank(r, 4, ks, [(1, 0, 1000)], skew=300.0 * (r // 2)))
        doc["hostname"] = f"node{r // 2}"
        (tmp_path / f"rank_{r}.json").write_text(json.dumps(doc))
        tables[r] = traceviz.parse_table(tmp_path / f"rank_{r}.json")
    hosts = hosts_of(tables)
    assert hosts == {0: "hostname=node0", 1: "hostname=node0", 2: "hostname=node1",
                     3: "hostname=node1"}
    sync = synchronize({r: ends_of(rank_calls(t, r)) for r, t in tables.items()}, hosts)
    assert sync.method == "shifted"
    assert sync.offsets.tolist() == [0, 0, 300_000, 300_000]


def test_pipeline_pairs_sync_the_clocks(tmp_path):
    """Two pipeline stages linked by sends / receives alone (no collective): their
    paired kernels end together, so the clocks are synced on them (rank 1's 100 µs
    ahead) and each kernel's wait is the time to its peer's arrival (hand-built,
    true-clock µs: the first stage's blocks start at 100 / 300, the second's at 130 /
    280; each pair ends at 200 / 400)."""
    from handjob import K, Rank, write_job
    from traceviz.commands import diagnose

    group, pp = [0, 1], dict(pg="9", desc="PIPELINE_MODEL_PARALLEL_GROUP")
    starts = {0: (100, 300), 1: (130, 280)}
    ranks = [Rank(r, 2, [K(a, b, "ncclDevKernel_SendRecv", 20, group=group,
                           ops=[("send", 1 - r), ("recv", 1 - r)], **pp)
                         for a, b in zip(starts[r], (200, 400))],
                  [(1, 0, 500)], skew=100.0 * r)
             for r in (0, 1)]
    result = diagnose.run(write_job(tmp_path / "job", ranks))
    assert any("clocks synced on collective ends: offsets up to 100.0 µs" in n
               for n in result.notes), result.notes
    got = sorted((r["rank"], r["start_ns"], r["wait_ns"], r["waited_for_rank"])
                 for r in result.tables["comm_calls"].to_pylist())
    assert [(r, w, who) for r, _, w, who in got] == [
        (0, 30_000, 1), (0, 0, None), (1, 0, None), (1, 20_000, 0)]


def test_synthesized_cpu_ahead_iterations_follow_the_gpu(tmp_path):
    """A synthesized job without synchronisation between steps (``step_sync=False``):
    the CPU issues each step in a few ms and runs ahead, the GPU runs the steps back to
    back. Each rank's ledger window is where its GPU ran the step, from the
    synthesizer's own kernels (true clock: no skew): from the later of the step's CPU
    start and the end of the earlier steps' kernels to the later of its CPU end and its
    last kernel's end; the CPU's span beside it."""
    import pyarrow.parquet as pq

    from traceviz.commands import diagnose
    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=1, pp=2, dp=2, microbatches=4, layers=4, iterations=3,
                           step_sync=False), tmp_path / "job")
    truth = json.loads((tmp_path / "job" / "ground_truth" / "ground_truth.json").read_text())
    kernels = pq.read_table(tmp_path / "job" / "ground_truth" / "kernels.parquet").to_pylist()
    want = {}
    for rank, info in truth["ranks"].items():
        mine = [k for k in kernels if k["rank"] == int(rank)]
        done, spans = -1, []
        for n, (cpu_a, cpu_b) in enumerate(info["steps"]):
            it = truth["config"]["first_iteration"] + n
            own = [k for k in mine if k["iteration"] == it]
            first = min(k["ts"] for k in own)
            last = max(k["ts"] + k["dur"] for k in own)
            spans.append([it, min(max(cpu_a, done), first), max(cpu_b, last), cpu_b - cpu_a])
            done = max(done, last)
        for (it, a, b, cpu), nxt in zip(spans, spans[1:] + [None]):
            b = min(b, nxt[1]) if nxt else b  # a window ends where the next one starts
            want[(int(rank), it)] = (a - spans[0][1], b - a, cpu)
    ledger = diagnose.run(tmp_path / "job").tables["ledger"].to_pylist()
    first = {r["rank"]: min(x["start_ns"] for x in ledger if x["rank"] == r["rank"])
             for r in ledger}  # the trace's clock: the truth's plus the writer's offset
    got = {(r["rank"], r["iteration"]): (r["start_ns"] - first[r["rank"]], r["span_ns"],
                                         r["cpu_span_ns"]) for r in ledger}
    assert got == want
    assert all(cpu * 10 < span for _, span, cpu in got.values())  # the CPU ran ahead


# ---- advice knows what is on ----------------------------------------------------------

def _dp_advice(job: str, job_cwd, monkeypatch):
    from traceviz.commands import diagnose

    monkeypatch.chdir(job_cwd(job.split("/")[0]))
    rows = diagnose.run(shared(f"{GPU}/{job}")).value.advice_table.to_pylist()
    (row,) = [r for r in rows if "exposed DP communication" in r["finding"]]
    return row


def test_dp_overlap_that_is_on_is_not_advised(job_cwd, monkeypatch):
    """tp_dp's DDP reduces its gradient buckets during the backward (its truth): the
    advice turns nothing on, says what tunes the overlap, and is conditional."""
    truth = json.loads((REFERENCE / GPU / "tp_dp.truth.json").read_text())
    assert "during the 2nd micro-batch's backward" in \
        truth["comm_per_step_per_rank_expected"]["dp_all_reduce"]
    row = _dp_advice("tp_dp", job_cwd, monkeypatch)
    assert "--overlap-grad-reduce" not in row["action"] and "turn on" not in row["action"]
    assert "already reduced during the backward" in row["action"]
    assert "bucket_cap_mb" in row["action"] and row["standing"] in ("conditional", "no gain")


def test_dp_options_that_are_off_are_advised(job_cwd, monkeypatch):
    """megatron_1f1b ran without --overlap-grad-reduce and --use-distributed-optimizer
    (its Megatron arguments): both are advised."""
    run = json.loads((REFERENCE / GPU / "megatron_1f1b.run.json").read_text())
    args = run["megatron_1f1b"]["megatron_args"]
    assert not args["overlap_grad_reduce"] and not args["use_distributed_optimizer"]
    row = _dp_advice("megatron_1f1b/iteration_5", job_cwd, monkeypatch)
    assert row["action"].startswith("turn on --overlap-grad-reduce")
    assert "--use-distributed-optimizer" in row["action"]


# ---- sends on the default group --------------------------------------------------------

def _to_default_group(src: Path, dst: Path) -> int:
    """``src``'s trace with every pipeline send / receive moved to the default group
    (as interleaved Megatron's and torch.distributed.pipelining's run): its process
    group name, description and ranks those of the world. Returns the ops moved."""
    text = gzip.open(src, "rt").read()
    moved = 0

    def default(m) -> str:
        nonlocal moved
        moved += 1
        block = m.group(0)
        block = re.sub(r'"Process Group Name": "\d+"', '"Process Group Name": "0"', block)
        block = block.replace('"PIPELINE_MODEL_PARALLEL_GROUP"', '"default_pg"')
        block = re.sub(r'"Global rank start": \d+', '"Global rank start": 0', block)
        block = re.sub(r'"Global rank stride": \d+', '"Global rank stride": 1', block)
        block = re.sub(r'"Group size": \d+', '"Group size": 8', block)
        return re.sub(r'"Process Group Ranks": "\[[\d, ]*\]"',
                      '"Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"', block)

    text = re.sub(r'"args": \{[^{}]*"PIPELINE_MODEL_PARALLEL_GROUP"[^{}]*\}', default, text)
    with gzip.open(dst, "wt", compresslevel=1) as f:  # the level changes no byte read
        f.write(text)
    return moved


def test_sends_on_the_default_group_between_pipeline_ranks_are_pp(tmp_path):
    """megatron_1f1b with its pipeline sends / receives moved to the default group: with
    the job's layout every one of them is still PP (72 kernels, as the real job's), none
    OTHER."""
    from traceviz.commands import diagnose

    src = shared(f"{GPU}/megatron_1f1b")
    job = tmp_path / "megatron_1f1b"
    (job / "iteration_5").mkdir(parents=True)
    for layout in src.glob("unique_parallel_groups_*.txt"):
        (job / layout.name).write_bytes(layout.read_bytes())
    moved = sum(_to_default_group(p, job / "iteration_5" / p.name)
                for p in sorted((src / "iteration_5").glob("rank_*.json.gz")))
    assert moved > 72
    calls = diagnose.run(job / "iteration_5").tables["comm_calls"].to_pylist()
    p2p = [r for r in calls if r["kind"] in ("Send", "Recv", "SendRecv")]
    assert len(p2p) == 72 and {r["group"] for r in p2p} == {"PP"}


def test_equal_savings_are_said_to_stop_at_one_bound(job_cwd, monkeypatch, tmp_path):
    """On the real Megatron 1F1B job several what-ifs predict the same saving: each is
    re-timed on its own (critical-path re-times each spec alone, and all of them
    together, to that same iteration), and the advice says so and names what then holds
    the iteration."""
    from traceviz.commands import diagnose

    monkeypatch.chdir(job_cwd("megatron_1f1b"))
    rows = diagnose.run(shared(f"{GPU}/megatron_1f1b/iteration_5")).value.advice_table.to_pylist()
    same = [r for r in rows if r["same_as"]]
    assert len(same) >= 2
    for r in same:
        others = {int(x) for x in r["same_as"].split(", ")}
        assert others == {o["rank"] for o in same if o is not r
                          and o["saving_ns"] == r["saving_ns"]}
        assert r["bound"] and r["bound"] == same[0]["bound"]
    assert all(r["same_as"] is None for r in rows if r not in same)
    args = [a for r in same for a in ("--what-if", r["what_if"])]
    out = tmp_path / "cp"
    result = CliRunner().invoke(main, ["critical-path", str(shared(
        f"{GPU}/megatron_1f1b/iteration_5")), *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    predicted = {r["what_if"]: r["iteration_ns"] for r in
                 pq.read_table(out / "critical_path_what_if.parquet").to_pylist()}
    for r in same:
        assert predicted[r["what_if"]] == r["predicted_iteration_ns"]
    assert predicted["all together"] == same[0]["predicted_iteration_ns"]


def test_tp_advice_knows_sequence_parallelism(job_cwd, monkeypatch, tmp_path):
    """The real megatron_1f1b ran without --sequence-parallel (its run args): its TP
    advice asks for it with the overlap. A synthesized job whose TP layers reduce-scatter
    and all-gather their activations (sequence parallelism on, its truth) is not asked
    for it."""
    from traceviz.commands import diagnose
    from traceviz.synth import SynthConfig, synthesize

    run = json.loads((REFERENCE / GPU / "megatron_1f1b.run.json").read_text())
    assert run["megatron_1f1b"]["megatron_args"]["sequence_parallel"] is False
    monkeypatch.chdir(job_cwd("megatron_1f1b"))
    rows = diagnose.run(shared(f"{GPU}/megatron_1f1b/iteration_5")).value.advice_table.to_pylist()
    (tp,) = [r for r in rows if "exposed TP communication" in r["finding"]]
    assert "(with --sequence-parallel)" in tp["action"]

    monkeypatch.chdir(tmp_path)
    job = synthesize(SynthConfig(tp=2, pp=1, dp=1, layers=4, microbatches=2,
                                 with_stack=False, tp_comm_scale=4.0), tmp_path / "sp")
    truth = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist()
    tp_kinds = {k["collective"] for k in truth if k["comm_group"] == "TP"}
    assert tp_kinds == {"AllGather", "ReduceScatter"}
    rows = diagnose.run(job).value.advice_table.to_pylist()
    (tp,) = [r for r in rows if "exposed TP communication" in r["finding"]]
    assert "sequence parallelism is on already" in tp["action"]
    assert "--sequence-parallel" not in tp["action"]
