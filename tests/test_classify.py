"""Classification (phase, micro-batch, chunk, comm_group) against ground truth.

Synthesized jobs: the synthesizer knows the true phase, micro-batch, model chunk and group
of every kernel (ground_truth/kernels.parquet, keyed by rank and correlation id) and
per-rank comm totals per group (ground_truth.json). Real traces: the collective metadata
and pg_config they carry.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import shared

import traceviz
from traceviz.classify.phases import BWD, FWD, LaunchFacts, classify, schedule_position
from traceviz.cli import main
from traceviz.ingest.discover import find_traces
from traceviz.ingest.topology import find_topology_file, from_traces
from traceviz.synth import SynthConfig, synthesize
from traceviz.topology.groups_file import from_file

FIELDS = ("phase", "microbatch", "chunk", "comm_group")

JOBS = {
    "stacks": dict(tp=2, pp=4, dp=1, microbatches=6),
    "no-stacks": dict(tp=2, pp=4, dp=1, microbatches=6, with_stack=False),
    "interleaved-skewed": dict(tp=1, pp=4, dp=2, vpp=2, schedule="interleaved", layers=16,
                               microbatches=8, skew_us=700.0, gpus_per_node=2,
                               with_stack=False),
    "interleaved-stacks": dict(tp=1, pp=2, dp=2, vpp=3, schedule="interleaved", layers=12,
                               microbatches=4),
    # micro-batches not a multiple of pp: Megatron's schedule table's last group is larger
    "interleaved-uneven": dict(tp=1, pp=4, dp=1, vpp=2, schedule="interleaved", layers=16,
                               microbatches=6, with_stack=False),
    "interleaved-recompute": dict(tp=2, pp=2, dp=1, vpp=2, schedule="interleaved", layers=8,
                                  microbatches=2, recompute=True, with_stack=False),
    "recompute": dict(tp=2, pp=2, dp=2, recompute=True, with_stack=False, iterations=2),
    "recompute-stacks": dict(tp=1, pp=2, dp=2, recompute=True, microbatches=4),
    "moe-cp": dict(tp=2, pp=2, dp=2, cp=2, ep=2, moe_every=2, with_stack=False,
                   layout="torchtitan", gzip=True, microbatches=4),
    "no-pg-desc": dict(tp=2, pp=2, dp=2, cp=2, with_stack=False, pg_desc=False,
                       microbatches=4),
}


@pytest.fixture(scope="module", params=sorted(JOBS))
def job(request, tmp_path_factory):
    cfg = SynthConfig(**JOBS[request.param])
    root = tmp_path_factory.mktemp(request.param)
    synthesize(cfg, root)
    topo = find_topology_file(root)
    layout = from_file(topo) if topo else None
    # no vpp given: the schedule and its model chunks are found from the traces
    tables = {t.rank: traceviz.parse_trace(t.path, topology=layout).activities
              for t in find_traces(root)}
    return cfg, root, tables


def test_rows_match_ground_truth(job):
    cfg, root, tables = job
    truth = pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist()
    by_key = {(t["rank"], t["correlation"]): t for t in truth}
    assert sorted(tables) == list(range(cfg.world))
    rows = 0
    wrong: Counter = Counter()
    for rank, table in tables.items():
        got = table.select(["correlation", *FIELDS]).to_pylist()
        for row in got:
            want = by_key[(rank, row["correlation"])]
            rows += 1
            for f in FIELDS:
                if row[f] != want[f]:
                    wrong[(f, want[f], row[f])] += 1
    assert rows == len(truth)
    assert not wrong, wrong.most_common(5)


def test_group_totals_match_ground_truth(job):
    cfg, root, tables = job
    truth = json.loads((root / "ground_truth" / "ground_truth.json").read_text())
    for rank, table in tables.items():
        totals: dict = defaultdict(lambda: [0, 0])
        for r in table.select(["kind", "comm_group", "dur"]).to_pylist():
            if r["kind"] == "COMM":
                totals[r["comm_group"]][0] += r["dur"]
                totals[r["comm_group"]][1] += 1
        want = {g: [v["time_ns"], v["calls"]] for g, v in
                truth["ranks"][str(rank)]["groups"].items()}
        assert dict(totals) == want


def test_phase_totals_and_evidence(job):
    cfg, root, tables = job
    truth = pq.read_table(root / "ground_truth" / "kernels.parquet")
    for rank, table in tables.items():
        t = truth.filter(np.asarray(truth["rank"]) == rank).to_pydict()
        want: Counter = Counter()
        for ph, d in zip(t["phase"], t["dur"]):
            want[ph] += d
        got: Counter = Counter()
        for ph, d in zip(table["phase"].to_pylist(), table["dur"].to_pylist()):
            got[ph] += d
        assert got == want
        meta = traceviz.metadata(table)["classification"]
        assert meta["vpp"] == cfg.vpp
        ev = meta["microbatch_evidence"]
        assert ev["schedule"].startswith("1F1B" if cfg.vpp == 1 else
                                         f"interleaved 1F1B, {cfg.vpp} model chunks")
        assert ev["micro-batch ops"].startswith("python frames" if cfg.with_stack
                                                else "launching threads")
        # every backward op is paired with its forward op through the Sequence numbers
        assert ev["backward ops"] == cfg.microbatches * cfg.vpp * cfg.iterations
        assert ev["backward ops paired with their forward op by Sequence number"] == \
            ev["backward ops"]
        groups = meta["comm_group_evidence"]
        if cfg.pg_desc:
            assert groups["group ranks against the topology"] == 0
        else:
            assert groups["process group description"] == 0
            assert groups["group ranks against the topology"] > 0


def test_topology_from_synthesized_pg_config(tmp_path):
    cfg = SynthConfig(tp=2, pp=2, dp=2, cp=2, ep=2, microbatches=2, layers=4,
                      layout="megatron")
    synthesize(cfg, tmp_path)
    assert find_topology_file(tmp_path) is None  # Megatron main writes none
    layout = from_traces(tmp_path / "torch_profile")
    assert layout.groups() == cfg.layout_obj().groups()


def test_sequence_numbers_override_schedule_order():
    """Backward ops run in an order no schedule predicts; the Sequence-number links put
    each one on the micro-batch of the forward op it differentiates."""
    us = 10**3
    # forward ops (forward_step frames) at 0, 10, 20 µs; backward ops at 100, 110, 120 µs
    # differentiating forward ops 2, 0, 1; 5 launches per op
    f_ts, b_ts = np.array([0, 10, 20]) * us, np.array([100, 110, 120]) * us
    b_order = [2, 0, 1]
    ts = np.concatenate([np.repeat(f_ts, 5), np.repeat(b_ts, 5)]) + np.tile(np.arange(5), 6) * 100
    n = ts.shape[0]
    forward_ts = np.concatenate([np.full(15, -1), np.repeat(f_ts[b_order] + 10, 5)])
    facts = LaunchFacts(ts=ts, end=ts + 20, thread=np.repeat([0, 1], 15),
                        iteration=np.zeros(n, np.int64), p2p=np.zeros(n, np.int8),
                        recompute=np.zeros(n, bool), optimizer=np.zeros(n, bool),
                        forward_ts=forward_ts)
    frames = {"forward_step": (f_ts, f_ts + 9 * us), "backward_step": (b_ts, b_ts + 9 * us)}
    phase, mb, chunk, evidence = classify(facts, frames, 0, 1, 1)
    assert (phase[:15] == FWD).all() and (phase[15:] == BWD).all()
    assert mb[:15].tolist() == np.repeat([0, 1, 2], 5).tolist()  # forward k -> mb k
    assert mb[15:].tolist() == np.repeat(b_order, 5).tolist()
    assert evidence["backward ops paired with their forward op by Sequence number"] == 3
    # without the links the schedule order (0, 1, 2) is the fallback
    facts.forward_ts = np.full(n, -1)
    _, mb2, _, evidence2 = classify(facts, frames, 0, 1, 1)
    assert mb2[15:].tolist() == np.repeat([0, 1, 2], 5).tolist()
    assert evidence2["backward ops paired by schedule position"] == 3


@pytest.mark.parametrize("pp,vpp", [(2, 2), (4, 2), (4, 3)])
def test_interleaved_schedule_position(pp, vpp):
    """Megatron's interleaved order: micro-batches in groups of pp per chunk."""
    m = 2 * pp
    k = np.arange(m * vpp)
    mb, chunk = schedule_position(k, False, pp, vpp)
    # every (micro-batch, chunk) pair exactly once
    assert sorted(zip(mb.tolist(), chunk.tolist())) == [(b, c) for b in range(m)
                                                         for c in range(vpp)]
    assert mb[:pp].tolist() == list(range(pp)) and (chunk[:pp] == 0).all()
    assert (chunk[pp:2 * pp] == 1).all()
    _, bchunk = schedule_position(k, True, pp, vpp)
    assert (bchunk[:pp] == vpp - 1).all()  # backward starts with the last chunk


def test_synth_cli_writes_job(tmp_path):
    out = tmp_path / "job"
    result = CliRunner().invoke(main, ["synth", str(out), "--tp", "1", "--pp", "2", "--dp",
                                       "2", "--microbatches", "2", "--layers", "2",
                                       "--no-with-stack", "--layout", "torchtitan"])
    assert result.exit_code == 0, result.output
    traces = find_traces(out)
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    assert all(Path(t.path).name == f"rank{t.rank}_trace.json" for t in traces)
    truth = json.loads((out / "ground_truth" / "ground_truth.json").read_text())
    assert truth["config"]["with_stack"] is False and truth["layout"]["world"] == 4
    bad = CliRunner().invoke(main, ["synth", str(tmp_path / "x"), "--vpp", "2"])
    assert bad.exit_code == 2 and "interleaved" in bad.output


# --- real traces -------------------------------------------------------------------

REAL = {
    # file: (COMM rows, rows with a group size, pg_config entries, group sizes seen,
    #        COMM rows whose collective is known: from metadata or the kernel name)
    "tracelens/b200/eager_trace.json.gz": (74, 1, 15, {8}, 74),
    # 5 ncclDevKernel_Generic kernels without metadata: nothing says which collective
    "tracelens/mi300/resnet_act_checkpoint.json.gz": (17, 12, 1, {8}, 12),
    "hta/nccl_parser_config/nccl_data.json.gz": (21, 21, 1, {2}, 21),
}


@pytest.mark.parametrize("path", sorted(REAL))
def test_real_collective_metadata(path):
    n_comm, n_sized, n_pg, sizes, n_typed = REAL[path]
    parsed = traceviz.parse_trace(shared(path))
    t = parsed.activities.to_pydict()
    comm = [i for i, k in enumerate(t["kind"]) if k == "COMM"]
    assert len(comm) == n_comm
    assert len(parsed.meta["pg_config"]) == n_pg
    sized = [i for i in comm if t["group_size"][i] is not None]
    assert len(sized) == n_sized
    assert {t["group_size"][i] for i in sized} == sizes
    for i in sized:  # ranks and size agree, message sizes are element counts x dtype
        assert len(t["group_ranks"][i]) == t["group_size"][i]
        if t["msg_in_bytes"][i] is not None and t["in_nelems"][i]:
            assert t["msg_in_bytes"][i] % t["in_nelems"][i] == 0
    assert sum(t["collective"][i] is not None for i in comm) == n_typed
    assert all(t["collective"][i] is not None for i in sized)
    # every COMM row has exactly one group; other rows none
    assert all(t["comm_group"][i] for i in comm)
    assert all(t["comm_group"][i] is None for i in range(len(t["kind"]))
               if t["kind"][i] != "COMM")


@pytest.mark.parametrize("path", ["hta/trace_diff/control/control.json.gz",
                                  "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"])
def test_real_comm_without_metadata(path):
    """Traces without record_param_comms metadata: COMM rows still get a collective type
    (from the kernel name) and a group (OTHER: nothing says which)."""
    t = traceviz.parse_trace(shared(path)).activities.to_pydict()
    comm = [i for i, k in enumerate(t["kind"]) if k == "COMM"]
    assert comm
    assert all(t["collective"][i] is not None for i in comm)
    assert {t["comm_group"][i] for i in comm} == {"OTHER"}
    assert all(t["pg_desc"][i] is None for i in comm)


def test_patterns_override_comm_groups(tmp_path):
    """A user's patterns file replaces the comm_group table: its rules decide, other
    specific descriptions become OTHER."""
    synthesize(SynthConfig(tp=1, pp=2, dp=2, microbatches=2, layers=2), tmp_path / "job")
    user = tmp_path / "mine.toml"
    user.write_text('[[comm_group]]\ngroup = "TP"\npattern = "^MODEL_PARALLEL_GROUP$"\n')
    trace = find_traces(tmp_path / "job")[0].path
    base = traceviz.parse_table(trace).select(["pg_desc", "comm_group"]).to_pylist()
    mine = traceviz.parse_table(trace, patterns=user).select(["pg_desc", "comm_group"]).to_pylist()
    assert {r["pg_desc"] for r in base if r["comm_group"] == "OTHER"} >= {
        "MODEL_PARALLEL_GROUP"}
    for b, m in zip(base, mine):
        if b["comm_group"] is None:
            assert m["comm_group"] is None
        elif b["pg_desc"] == "MODEL_PARALLEL_GROUP":
            assert m["comm_group"] == "TP"
        else:
            assert m["comm_group"] == "OTHER"
    assert any(b["comm_group"] not in (None, "OTHER") for b in base)


def _last_stage_trace(path):
    """Two micro-batches of a last pipeline stage as PyTorch records them without python
    stacks (µs): forward_step (a linear, the cross-entropy, then the loss reporting: a
    cat and an all-reduce that create no autograd node, so the profiler gives them the
    *next* node's Sequence number, the loss scaling's), backward_step on the main thread
    (the loss scaling mul: that node; the root gradient's ones_like: none), then the
    autograd engine thread."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
               "tid": 1, "ts": 0, "dur": 2100}]
    corr = [0]

    def op(name, tid, ts, dur, seq, kernel, k_dur=3):
        args = {} if seq is None else {"Sequence number": seq}
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid,
                       "ts": ts, "dur": dur, "args": args})
        corr[0] += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 1, "tid": tid, "ts": ts + 1, "dur": 1,
                       "args": {"correlation": corr[0]}})
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                       "ts": ts + 3, "dur": k_dur,
                       "args": {"correlation": corr[0], "stream": 7, "device": 0}})

    for m in range(2):
        b, s = 1000 * m, 3 * m
        op("aten::linear", 1, b, 100, s, f"gemm_fwd_{m}", 80)
        op("aten::cross_entropy_loss", 1, b + 110, 50, s + 1, f"log_softmax_{m}", 30)
        op("aten::cat", 1, b + 170, 10, s + 2, f"cat_report_{m}")
        op("c10d::allreduce_", 1, b + 185, 15, s + 2,
           f"ncclDevKernel_AllReduce_Sum_f32_RING_LL_{m}", 495)
        op("aten::mul", 1, b + 700, 10, s + 2, f"scale_loss_{m}")
        op("aten::ones_like", 1, b + 715, 5, None, f"root_grad_{m}")
        op("autograd::engine::evaluate_function: MulBackward0", 2, b + 730, 10, s + 2,
           f"mul_bwd_{m}")
        op("autograd::engine::evaluate_function: NllLossBackward0", 2, b + 750, 50, s + 1,
           f"nll_bwd_{m}")
        op("autograd::engine::evaluate_function: AddmmBackward0", 2, b + 810, 90, s,
           f"gemm_bwd_{m}", 80)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def test_loss_reporting_stays_in_the_forward_on_the_last_stage(tmp_path):
    """A node's forward op is the *last* main-thread op with its Sequence number (the
    profiler stamps ops that create no node with the next node's number, as PyTorch 2.x
    does): the loss reporting (0.5 ms all-reduce) stays in the forward micro-batch, only
    backward_step's loss scaling and root gradient join the backward."""
    import traceviz

    _last_stage_trace(tmp_path / "t.json")
    table = traceviz.parse_table(tmp_path / "t.json")
    got = {n: (p, m) for n, p, m in zip(table["name"].to_pylist(), table["phase"].to_pylist(),
                                        table["microbatch"].to_pylist())}
    for m in range(2):
        for k in ("gemm_fwd", "log_softmax", "cat_report",
                  "ncclDevKernel_AllReduce_Sum_f32_RING_LL"):
            assert got[f"{k}_{m}"] == ("FWD", m), k
        for k in ("scale_loss", "root_grad", "mul_bwd", "nll_bwd", "gemm_bwd"):
            assert got[f"{k}_{m}"] == ("BWD", m), k


def test_deepep_kernels_by_what_they_do():
    """DeepEP's kernels as CUPTI names them (its csrc/kernels: layout.cu, intranode.cu,
    internode.cu): the layout kernel counts tokens per rank and expert on the GPU
    (compute), dispatch / combine move tokens (all-to-all), notify kernels only
    exchange counts with the peers (a handshake: no payload)."""
    from traceviz.classify.kinds import first_match, name_kinds
    from traceviz.classify.patterns import load_patterns
    from traceviz.table.schema import KINDS

    patterns = load_patterns()
    names = ["void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, "
             "int*, bool*, int, int, int, int)",
             "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, long*, float*)",
             "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(int4*, float*)",
             "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*)",
             "void deep_ep::internode::cached_notify<true>(int, int, int, int)",
             "void deep_ep::internode_ll::dispatch<false, 9, 7168>(void*, float*, int*)"]
    kinds = [KINDS[k] for k in name_kinds(names, patterns).tolist()]
    assert kinds == ["COMP", "COMM", "COMM", "COMM", "COMM", "COMM"]
    assert first_match(names[1:], patterns.collectives) == [
        "AllToAll", "AllToAll", "Handshake", "Handshake", "AllToAll"]
