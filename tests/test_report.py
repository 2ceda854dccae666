"""`traceviz report`: every number against ground truth recomputed here.

The synthesized job has known message sizes, group sizes, per-node clock skews and one
straggler rank; the synthesizer's kernel truth (true per-rank times after removing the
skew, process group and Seq of every call) is reduced here with plain Python. Real
traces: the collective metadata of the b200 and mi300 traces against their raw JSON,
and the 8-rank DLRM set matched across ranks.
"""
from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import out_dir, shared

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.synth.truth import intersection, length, merged

STRAGGLER = 3
ELEM = {"BFloat16": 2, "Float": 4, "Long": 8, "Half": 2}
FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
          "ReduceScatter": lambda n: (n - 1) / n, "AllToAll": lambda n: (n - 1) / n,
          "SendRecv": lambda n: 1.0, "Broadcast": lambda n: 1.0}
GOLDEN = Path(__file__).parent / "data" / "report_golden.txt"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("report_job")
    cfg = SynthConfig(tp=2, pp=2, dp=2, microbatches=4, layers=4, skew_us=400.0,
                      gpus_per_node=2, straggler_rank=STRAGGLER, straggler_factor=1.4,
                      seed=3)
    synthesize(cfg, root)
    out = root / "report.txt"
    result = CliRunner().invoke(main, ["report", str(root / "iteration_10"),
                                       "--global-batch-size", "8", "--seq-len", "4096",
                                       "--flops-per-token", "6e9", "-o", str(out)])
    assert result.exit_code == 0, result.output
    truth = json.loads((root / "ground_truth" / "ground_truth.json").read_text())
    rows = pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist()
    for r in rows:  # the true clock
        r["ts"] -= truth["skew_ns"][r["rank"]]
    report = json.loads(out.with_suffix(".json").read_text())
    return root, rows, truth, report, out


def _size(r: dict) -> int:
    """nccl-tests' S of one truth kernel."""
    return r["msg_out_bytes"] if r["collective"] == "AllGather" else r["msg_in_bytes"]


def _rank_calls(rows):
    """(rank, call key) -> kernels; P2P kernels are calls of their own."""
    calls = defaultdict(list)
    for r in rows:
        if r["kind"] == "COMM":
            key = ("p2p", r["correlation"]) if r["p2p"] else (r["pg_name"], r["seq"])
            calls[(r["rank"], key)].append(r)
    return calls


def test_groups_and_collectives_equal_truth(job):
    _, rows, truth, report, _ = job
    comm = [r for r in rows if r["kind"] == "COMM"]
    by_group = {g["name"]: g for g in report["network"]["by_group"]}
    calls = _rank_calls(rows)
    for group in {r["comm_group"] for r in comm}:
        ks = [k for (_, _), k in calls.items() if k[0]["comm_group"] == group]
        got = by_group[group]
        assert got["count"] == len(ks)
        assert got["bytes"] == sum(sum(_size(x) for x in k) for k in ks)
        assert got["time_ms"] == pytest.approx(sum(x["dur"] for k in ks for x in k) / 1e6,
                                               rel=1e-12)
        bw = [sum(_size(x) for x in k) * FACTOR[k[0]["collective"]](k[0]["group_size"])
              / sum(x["dur"] for x in k) for k in ks]
        assert got["busbw_gbps"]["mean"] == pytest.approx(statistics.mean(bw), rel=1e-9)
        assert got["busbw_gbps"]["median"] == pytest.approx(statistics.median(bw), rel=1e-9)
    step_ns = sum(b - a for v in truth["ranks"].values() for a, b in v["steps"])
    for group, got in by_group.items():
        busy = hidden = 0
        for rank in {r["rank"] for r in rows}:
            mine = [x for x in rows if x["rank"] == rank]
            g = merged([(x["ts"], x["ts"] + x["dur"]) for x in mine
                        if x["kind"] == "COMM" and x["comm_group"] == group])
            comp = merged([(x["ts"], x["ts"] + x["dur"]) for x in mine if x["kind"] == "COMP"])
            busy += length(g)
            hidden += intersection(g, comp)
        assert got["share_of_iteration_pct"] == pytest.approx(100 * busy / step_ns, rel=1e-9)
        assert got["hidden_pct"] == pytest.approx(100 * hidden / busy, rel=1e-9, abs=1e-12)
    traffic = {t["name"]: t for t in report["traffic"]}
    for coll in {r["collective"] for r in comm}:
        ks = [k for k in calls.values() if k[0]["collective"] == coll]
        assert traffic[coll]["count"] == len(ks)
        assert traffic[coll]["bytes"] == sum(_size(x) for k in ks for x in k)
    assert report["network"]["total_bytes"] == sum(_size(r) for r in comm)


def test_cross_rank_matching_equals_truth(job):
    _, rows, _, report, _ = job
    calls = defaultdict(list)
    for r in rows:
        if r["kind"] == "COMM" and not r["p2p"]:
            calls[(r["pg_name"], r["seq"])].append(r)
    by_group = defaultdict(list)
    for members in calls.values():
        members.sort(key=lambda r: (r["ts"], r["rank"]))
        last, second = members[-1], members[-2]
        s = _size(last)
        by_group[last["comm_group"]].append({
            "skew": last["ts"] - members[0]["ts"], "delay": last["ts"] - second["ts"],
            "last": last["rank"],
            "busbw": s * FACTOR[last["collective"]](last["group_size"]) / last["dur"]})
    got = {g["group"]: g for g in report["cross_rank"]["by_group"]}
    assert report["cross_rank"]["matched_calls"] == len(calls)
    for group, cs in by_group.items():
        g = got[group]
        assert g["calls"] == len(cs)
        # offsets come from a least-squares fit rounded to ns
        assert g["skew_ms"]["max"] == pytest.approx(max(c["skew"] for c in cs) / 1e6, abs=2e-6)
        assert g["skew_ms"]["mean"] == pytest.approx(
            statistics.mean(c["skew"] for c in cs) / 1e6, abs=2e-6)
        assert g["busbw_transfer_gbps"]["median"] == pytest.approx(
            statistics.median(c["busbw"] for c in cs), rel=1e-9)
        delay = defaultdict(int)
        for c in cs:
            delay[c["last"]] += c["delay"]
        top = max(delay, key=delay.get)
        assert g["last_to_arrive"][0]["rank"] == top
        assert g["last_to_arrive"][0]["delay_ns"] == pytest.approx(delay[top],
                                                                  abs=2 * len(cs))
    # the injected straggler holds up its tensor-parallel peers; the diagnosis names it
    assert got["TP"]["last_to_arrive"][0]["rank"] == STRAGGLER
    assert [s["rank"] for s in report["diagnosis"]["stragglers"]] == [STRAGGLER]


def test_throughput_and_overlap_equal_truth(job):
    _, rows, truth, report, _ = job
    skew = truth["skew_ns"]
    steps = [(a - skew[int(r)], b - skew[int(r)]) for r, v in truth["ranks"].items()
             for a, b in v["steps"]]
    time_ns = max(b for _, b in steps) - min(a for a, _ in steps)
    it = report["throughput"]["iterations"]
    assert [i["iteration"] for i in it] == [10]
    assert it[0]["time_ms"] == pytest.approx(time_ns / 1e6, abs=2e-6)
    assert it[0]["tokens_per_s"] == pytest.approx(8 * 4096 / (time_ns / 1e9), rel=1e-6)
    tflops = 6e9 * 8 * 4096 / (time_ns / 1e9) / 8 / 1e12
    assert it[0]["tflops_per_gpu"] == pytest.approx(tflops, rel=1e-6)
    assert it[0]["mfu_pct"] == pytest.approx(100 * tflops / 989.5, rel=1e-6)  # H100
    for r in report["overlap"]["per_rank"]:
        mine = [x for x in rows if x["rank"] == r["rank"]]
        comm = merged([(x["ts"], x["ts"] + x["dur"]) for x in mine if x["kind"] == "COMM"])
        comp = merged([(x["ts"], x["ts"] + x["dur"]) for x in mine if x["kind"] == "COMP"])
        assert r["comm_ms"] == pytest.approx(length(comm) / 1e6, abs=1e-9)
        assert r["overlap_pct"] == pytest.approx(
            100 * intersection(comm, comp) / length(comm), rel=1e-9)


def test_text_report_golden(job):
    """The text layout of a synthesized job. After an intended change, regenerate with
    TRACEVIZ_UPDATE_GOLDEN=1 and review the diff."""
    *_, out = job
    text = out.read_text()
    if os.environ.get("TRACEVIZ_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert text.rstrip().endswith("END OF REPORT\n" + "=" * 80)


def test_torchtitan_config_and_default_name(job, tmp_path):
    root = job[0]
    toml = tmp_path / "train.toml"
    toml.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                    'local_batch_size = 2\nseq_len = 2048\nsteps = 11\n[parallelism]\n'
                    'data_parallel_replicate_degree = 1\ndata_parallel_shard_degree = -1\n'
                    'tensor_parallel_degree = 2\npipeline_parallel_degree = 2\n')
    result = subprocess.run([sys.executable, "-m", "traceviz", "report",
                             str(root / "iteration_10"), "--config", str(toml), "--json"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rep = json.loads(result.stdout)
    c = rep["configuration"]
    # shard -1 takes the ranks left: 8 / (tp 2 x pp 2) = 2; global batch 2 x 1 x 2
    assert (c["global_batch_size"], c["seq_len"], c["model"]) == (4, 2048, "llama38B")
    assert c["flops_per_token"] == pytest.approx(6 * 8.03e9)
    folder = out_dir(root, tmp_path) / "iteration_10" / "report"
    written = list(folder.glob("*_llama38B_dp2_tp2_pp2_gpu8.txt"))
    assert len(written) == 1 and written[0].with_suffix(".json").exists()
    t = rep["throughput"]["iterations"][0]
    assert t["tokens_per_s"] == pytest.approx(4 * 2048 / (t["time_ms"] / 1e3), rel=1e-9)


def test_bad_input_gives_one_line(tmp_path):
    (tmp_path / "iteration_1").mkdir()
    (tmp_path / "iteration_2").mkdir()
    for it in (1, 2):
        (tmp_path / f"iteration_{it}" / "rank0_trace.json").write_text(
            '{"traceEvents": [], "distributedInfo": {"rank": 0}}')
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert "several profiled iterations" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nothing")])
    assert result.exit_code == 1 and "no such file or folder" in result.output


# ---- real traces ----------------------------------------------------------------------

def _raw_comm_kernels(path: Path) -> list[dict]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [e for e in orjson.loads(data)["traceEvents"]
            if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {})]


@pytest.mark.parametrize("name", ["tracelens/b200/eager_trace.json.gz",
                                  "tracelens/mi300/resnet_act_checkpoint.json.gz"])
def test_real_collective_metadata(name):
    import traceviz
    from traceviz.analysis.calls import rank_calls
    from traceviz.table.schema import COLLECTIVES

    path = shared(name)
    raw = sorted(_raw_comm_kernels(path), key=lambda e: float(e["ts"]))
    assert raw, "the trace has collective metadata on its kernels"
    calls = rank_calls(traceviz.parse_table(path), 0)
    with_meta = sorted((s, i) for i, s in enumerate(calls.start.tolist())
                       if calls.nbytes[i] >= 0 and calls.size[i] > 0)
    assert len(with_meta) == len(raw)
    for e, (_, i) in zip(raw, with_meta):
        a = e["args"]
        elem = ELEM[a["dtype"]]
        coll = COLLECTIVES[calls.collective[i]]
        want = (a["Out msg nelems"] if coll == "AllGather" else a["In msg nelems"]) * elem
        assert calls.nbytes[i] == want
        assert calls.size[i] == a["Group size"]
        assert calls.groups[calls.group[i]] == str(a["Process Group Name"])


def test_dlrm_matched_across_ranks(tmp_path):
    folder = shared("param/dlrm_kineto")
    starts = {}
    for p in sorted(folder.glob("*.json")):
        doc = orjson.loads(p.read_bytes())
        rank = doc["distributedInfo"]["rank"]
        ks = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                     and e["name"].startswith("ncclKernel")), key=lambda e: e["ts"])
        starts[rank] = [(round(e["ts"] * 1000), e["name"].split("_")[1]) for e in ks]
    assert all(len(v) == 8 for v in starts.values())
    out = tmp_path / "r.txt"
    result = CliRunner().invoke(main, ["report", str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rep = json.loads(out.with_suffix(".json").read_text())
    assert rep["cross_rank"]["matched_calls"] == 8
    assert rep["cross_rank"]["calls_with_several_ranks"] == 8
    # no process groups in these traces: nothing to sync clocks on, skews on raw clocks
    skews = sorted(max(s[k][0] for s in starts.values()) - min(s[k][0] for s in starts.values())
                   for k in range(8))
    names = {s[k][1] for s in starts.values() for k in range(8)}
    assert names == {"SendRecv", "AllReduce"}
    got = [g for g in rep["cross_rank"]["by_group"]]
    assert [g["calls"] for g in got] == [8]
    assert got[0]["skew_ms"]["max"] == pytest.approx(skews[-1] / 1e6, abs=1e-9)
    assert got[0]["skew_ms"]["median"] == pytest.approx(statistics.median(skews) / 1e6,
                                                        abs=1e-9)
    assert {r["rank"] for r in rep["network"]["per_rank"]} == set(range(8))


def test_truncated_rank_is_noted(tmp_path):
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=2, layers=4, truncate_rank=1),
               tmp_path / "job")
    out = tmp_path / "r.txt"
    result = CliRunner().invoke(main, ["report", str(tmp_path / "job"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rep = json.loads(out.with_suffix(".json").read_text())
    cut = [n for n in rep["notes"] if n.startswith("rank 1: its trace is cut at byte ")]
    assert len(cut) == 1
    size = len((tmp_path / "job" / "iteration_10" / "rank_0001_iter_10.pt.trace.json")
               .read_bytes())
    assert int(cut[0].split("byte ")[1].split(";")[0]) <= size
    assert rep["configuration"]["ranks"] == [0, 1, 2, 3]


def test_one_overlap_number_per_rank(tmp_path):
    """Hand-computed (µs): a warm-up all-reduce [10, 60] launched before ProfilerStep#1
    [100, 300]; in the step, compute [110, 200] and an all-reduce [150, 250] of 1 MiB.
    The rank's overlap and its group's hidden share are over the same kernels, the
    step's: 50 / 100 = 50 % (not 50 / 150); its simple bus bandwidth is the step's call's
    bus bytes over its 100 µs."""
    from handjob import K, Rank, write_job

    from traceviz.job.report import make_report

    ar = dict(name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", coll="allreduce",
              group=[0, 1], pg="0", nbytes=1 << 20)
    job = write_job(tmp_path / "job", [Rank(0, 2, [K(10, 60, seq=0, launch_end=8, **ar),
                                                  K(110, 200, launch_end=105),
                                                  K(150, 250, seq=1, launch_end=140, **ar)],
                                            steps=[(1, 100, 300)])])
    report = make_report(job)
    (rank,) = report["overlap"]["per_rank"]
    assert rank["comm_ms"] == pytest.approx(0.1) and rank["overlap_pct"] == pytest.approx(50)
    (group,) = report["network"]["by_group"]
    assert group["hidden_pct"] == pytest.approx(50)
    (net,) = report["network"]["per_rank"]
    assert net["operations"] == 2  # every call is listed
    # all-reduce bus bytes = S x 2 (n - 1) / n = S at n = 2, over 100 µs
    assert net["simple_busbw_gbps"] == pytest.approx((1 << 20) / 100e3)
