"""Numbers a user can trust beyond Megatron: throughput over the job's world size,
communication that is not an ``nccl*`` kernel, accelerators other than CUDA (Ascend's
NPU tasks, unknown device events), HIP launches, CUDA graph replays, the whole-trace row,
phases where the evidence is weak, absurd headline values, rank-less folders, and
``--hta-compat`` figures HTA's rounding makes impossible. Expected values come from the
raw traces (plain ``json``) or from what the hand-written traces here state."""
from __future__ import annotations

import csv
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from helpers import needs_shared, shared
from reference import activities, events_of, load, read_bytes

import traceviz
from traceviz.analysis.activities import Options
from traceviz.cli import main
from traceviz.commands import breakdown
from traceviz.job.report import make_report

US = 1000  # ns per µs


def _raw(path: Path) -> list:
    return events_of(load(read_bytes(path)))


def _copy(folder: str, tmp_path: Path, names: list[str] | None = None) -> Path:
    """A writable copy of shared traces (the shared folder is read-only)."""
    out = tmp_path / "job"
    out.mkdir()
    for f in (sorted(shared(folder).iterdir()) if names is None else map(shared, names)):
        if ".json" in f.name:
            shutil.copyfile(f, out / f.name)
    return out


# ---- 1. throughput per GPU over the world size, MFU capped ---------------------------

@needs_shared
def test_tflops_per_gpu_divides_by_the_world_size(tmp_path):
    """2 of a 128-rank job's ranks are traced: TFLOP/s per GPU is the job's FLOPs over
    all 128 GPUs; an MFU above 100 % is no number but a note."""
    job = _copy("hta/trace_filter", tmp_path)
    spans = {}  # iteration -> longest rank's ProfilerStep (clocks are not linked)
    for f in sorted(job.iterdir()):
        for e in _raw(f):
            m = re.match(r"ProfilerStep#(\d+)$", str(e.get("name", "")))
            if m and e.get("ph") == "X":
                it = int(m.group(1))
                spans[it] = max(spans.get(it, 0), int(round(float(e["dur"]) * US)))
    facts = {"global_batch_size": 64, "seq_len": 4096, "flops_per_token": 1e9}
    rep = make_report(job, overrides={**facts, "peak_tflops": 1000.0})
    assert rep["configuration"]["world_size"] == 128 and rep["configuration"]["gpus"] == 2
    tokens = 64 * 4096
    for row in rep["throughput"]["iterations"]:
        seconds = spans[row["iteration"]] / 1e9
        assert row["time_ms"] == pytest.approx(spans[row["iteration"]] / 1e6)
        assert row["tflops_per_gpu"] == pytest.approx(1e9 * tokens / seconds / 128 / 1e12)
        assert row["mfu_pct"] == pytest.approx(100 * row["tflops_per_gpu"] / 1000.0)
    tiny_peak = make_report(job, overrides={**facts, "peak_tflops": 1e-6})
    assert all(r["mfu_pct"] is None for r in tiny_peak["throughput"]["iterations"])
    assert any("MFU is impossible" in n for n in tiny_peak["notes"])
    assert tiny_peak["throughput"]["mfu"]["mfu_pct"] is None


# ---- 2. communication that is not an nccl* kernel ------------------------------------

def _launched(kernels: list[tuple[str, dict, str]], **header) -> dict:
    """A minimal Kineto trace: per (kernel name, kernel args, cpu op), a cpu_op around a
    cudaLaunchKernel around nothing, and the kernel on stream 7, 10 µs apart."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1,
               "tid": 1, "ts": 0, "dur": 10 * len(kernels) + 100}]
    for k, (name, args, op) in enumerate(kernels):
        t = 10 * k
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t, "dur": 5,
             "args": {"External id": k + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
             "tid": 1, "ts": t + 1, "dur": 2, "args": {"correlation": k + 1}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 4,
             "dur": 3, "args": {"correlation": k + 1, "device": 0, "stream": 7, **args}}]
    return {**header, "traceEvents": events}


COMM_CASES = [  # (kernel, args, launching op) -> (kind, collective)
    ("void deep_ep::internode::dispatch<true, 8>(int4*)", {}, "deep_ep::dispatch",
     ("COMM", "AllToAll")),
    ("void dpsk::ep::internode::combine<bf16>(void*)", {}, "aten::empty",
     ("COMM", "AllToAll")),
    ("void cross_device_reduce_1stage<half, 8>(RankData*)", {}, "_C_custom_ar::all_reduce",
     ("COMM", "AllReduce")),
    ("mscclpp::allreduce_kernel", {}, "aten::empty", ("COMM", "AllReduce")),
    ("nvshmemi_transfer_kernel", {}, "aten::empty", ("COMM", None)),
    # a kernel with any name, launched inside record_param_comms: the trace says COMM
    ("fused_gemm_rs_kernel", {}, "record_param_comms", ("COMM", None)),
    # collective args on the kernel itself
    ("my_kernel", {"Collective name": "reduce_scatter", "Group size": 8}, "aten::empty",
     ("COMM", "ReduceScatter")),
    ("ampere_bf16_s16816gemm_bf16_128x128", {}, "aten::mm", ("COMP", None)),
]


def test_communication_beyond_nccl_names(tmp_path):
    path = tmp_path / "moe.json"
    path.write_text(json.dumps(_launched([c[:3] for c in COMM_CASES],
                                         distributedInfo={"rank": 0, "world_size": 8})))
    table = traceviz.parse_table(path)
    got = list(zip(table["kind"].to_pylist(), table["collective"].to_pylist()))
    assert got == [c[3] for c in COMM_CASES]
    # the breakdown sees the communication (no "no communication" on an MoE trace)
    row = breakdown.run([path]).tables["temporal_breakdown"].to_pylist()[0]
    assert row["comm_ns"] == 7 * 3 * US and row["overlap_pct"] == 0


def test_step_numbers_past_the_iteration_column_are_no_steps(tmp_path):
    """A ProfilerStep whose number does not fit the int32 iteration column (2**31,
    20 digits, 5000 digits: more than Python's int() reads) is no iteration (it was
    wrapped to another number); the parse goes on, the other step's kernels are
    iteration 3 and the rest -1."""
    doc = _launched([("gemm", {}, "aten::mm")] * 3)
    for number in (str(2**31), "9" * 20, "1" * 5000, "0" * 5000 + "7" * 19):
        doc["traceEvents"].append({"ph": "X", "cat": "user_annotation",
                                   "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
                                   "ts": 0, "dur": 500})
    doc["traceEvents"][0]["dur"] = 15  # ProfilerStep#3 holds the first two launches
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(doc))
    table = traceviz.parse_table(path).sort_by("ts")
    assert table["iteration"].to_pylist() == [3, 3, -1]


# ---- 3. accelerators: Ascend NPU tasks, unknown device events -------------------------

@needs_shared
def test_ascend_npu_tasks_are_device_activities():
    """torch_npu writes NPU tasks without a category under "Ascend Hardware"; each is
    launched by the op its async_npu flow starts in."""
    path = shared("ascend/trace_view.json")
    events = _raw(path)
    hw = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
          and e["args"].get("name") == "Ascend Hardware"}
    tasks = [e for e in events if e.get("ph") == "X" and e.get("pid") in hw]
    flows = {e["id"]: e for e in events if e.get("cat") == "async_npu" and e.get("ph") == "s"}
    ends = {(e["tid"], e["ts"]) for e in events if e.get("cat") == "async_npu"
            and e.get("ph") == "f"}
    parsed = traceviz.parse_trace(path, cpu=True)
    table = parsed.activities
    assert table.num_rows == len(tasks) == 276
    assert sorted(table["name"].to_pylist()) == sorted(e["name"] for e in tasks)
    assert table["launch_name"].drop_null().to_pylist() == ["torch_to_npu"] * len(flows)
    assert sum((e["tid"], e["ts"]) in ends for e in tasks) == len(flows) == 274
    assert Counter(table["kind"].to_pylist()) == {"COMP": 276}
    assert set(table["stream"].to_pylist()) == {e["tid"] for e in tasks}
    assert table["cpu_op"].null_count == len(tasks) - len(flows)
    meta = traceviz.metadata(table)
    assert meta["stats"]["join"]["device tasks without a category"] == 276
    assert "device events not read" not in meta["stats"]
    # the tasks are not CPU events; torch_npu's derived overlap tracks are neither
    cpu_pids = set(parsed.cpu["pid"].to_pylist())
    assert not cpu_pids & (hw | {4376751100})
    assert not parsed.warnings


def test_unknown_device_events_are_named(tmp_path):
    doc = _launched([("gemm", {}, "aten::mm")])
    doc["traceEvents"] += [
        {"ph": "M", "name": "process_labels", "pid": 9, "args": {"labels": "GPU 1"}},
        *({"ph": "X", "cat": "tpu_op", "name": f"op{k}", "pid": 9, "tid": 1, "ts": k,
           "dur": 1} for k in range(3))]
    path = tmp_path / "new_device.json"
    path.write_text(json.dumps(doc))
    parsed = traceviz.parse_trace(path)
    assert parsed.meta["stats"]["device events not read"] == {"tpu_op": 3}
    assert len(parsed.warnings) == 1 and "3 tpu_op events" in parsed.warnings[0]
    assert parsed.activities.num_rows == 1


# ---- 4. HIP launches in the launch statistics ----------------------------------------

# every HIP call that puts one kernel, copy or set on a stream
HIP_LAUNCH = re.compile(r"^hip(Ext)?(Module)?LaunchKernel$|^hip(Memcpy|Memset)\w*(Async|"
                        r"WithStream)$")


@needs_shared
@pytest.mark.parametrize("name", ["tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_hip_launches_are_counted(name):
    path = shared(name)
    expected = sum(1 for a in activities(load(read_bytes(path))).values()
                   if a["launch_name"] and HIP_LAUNCH.match(a["launch_name"]))
    assert expected > 0
    pairs = breakdown.run([path]).tables["launch_stats"]["launch_kernel_pairs"][0].as_py()
    assert pairs == expected
    hta = breakdown.run([path], Options(hta_compat=True)).tables["launch_stats"]
    assert hta["launch_kernel_pairs"][0].as_py() == 0  # HTA's list has no HIP call


# ---- 5. CUDA graphs --------------------------------------------------------------------

@needs_shared
def test_graph_replays_are_joined_and_counted():
    path = shared("hta/negative_queue_length_values_check/rank0.json.gz")
    events = _raw(path)
    graph_corr = {e["args"]["correlation"] for e in events if e.get("ph") == "X"
                  and e.get("name") == "cudaGraphLaunch"}
    replayed = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and (e.get("args") or {}).get("correlation") in graph_corr]
    table = traceviz.parse_table(path)
    join = traceviz.metadata(table)["stats"]["join"]
    assert join["launched by a graph launch"] == len(replayed) == 345
    assert join["graph launches"] == len({e["args"]["correlation"] for e in replayed})
    from_graph = table.filter(pc.equal(table["launch_name"], "cudaGraphLaunch"))
    assert from_graph.num_rows == len(replayed)
    assert from_graph["cpu_op"].null_count == 0  # joined to the op that replayed them


# ---- 6. the whole-trace row ------------------------------------------------------------

@needs_shared
def test_whole_trace_row_is_not_iteration_minus_one():
    """Activities outside every ProfilerStep are iteration -1; the whole trace is None."""
    path = shared("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    table = traceviz.parse_table(path)
    outside = pc.sum(pc.equal(table["iteration"], -1)).as_py()
    assert outside > 0
    rows = breakdown.run([path]).tables["temporal_breakdown"].to_pylist()
    whole = [r for r in rows if r["iteration"] is None]
    assert len(whole) == 1 and sum(r["iteration"] == -1 for r in rows) == 1
    first = pc.min(table["ts"]).as_py()
    last = pc.max(pc.add(table["ts"], table["dur"])).as_py()
    assert whole[0]["kernel_time_ns"] == last - first


# ---- 7. phases where the evidence is weak ----------------------------------------------

@needs_shared
def test_gpu_only_trace_claims_no_phase():
    """No launch inside a cpu_op: only kernels named backward are BWD, the rest OTHER."""
    table = traceviz.parse_table(shared("tracelens/mi210/gpu_only_trace.json.gz"))
    named = re.compile(traceviz.classify.patterns.load_patterns(None)
                       .phases["backward_name"].pattern)
    want = ["BWD" if named.search(n) else "OTHER" for n in table["name"].to_pylist()]
    assert table["phase"].to_pylist() == want
    assert "BWD" in want


@needs_shared
def test_worker_threads_of_an_inference_server_are_no_backward():
    """MTIA inference: launches from many threads, no autograd node: no BWD, no OPTIMIZER."""
    table = traceviz.parse_table(shared("hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    assert set(table["phase"].to_pylist()) <= {"FWD", "OTHER"}
    rep = make_report(shared("hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"))
    assert rep["kind"].startswith("inference")


@needs_shared
def test_single_gpu_resnet_step_order():
    """torchvision ResNet-50, 2021: forward, zero_grad (161 memsets, inside
    Optimizer.zero_grad), backward on the autograd thread, then the SGD step."""
    table = traceviz.parse_table(shared("kineto/resnet50/worker0.1623143089861.pt.trace.json.gz"))
    rows = sorted((r for r in table.select(["iteration", "phase", "launch_ts"]).to_pylist()
                   if r["launch_ts"] is not None), key=lambda r: r["launch_ts"])
    by_iteration: dict[int, list] = {}
    for r in rows:
        runs = by_iteration.setdefault(r["iteration"], [])
        if not runs or runs[-1][0] != r["phase"]:
            runs.append([r["phase"], 0])
        runs[-1][1] += 1
    assert len(by_iteration) == 6
    for runs in by_iteration.values():
        assert [p for p, _ in runs] == ["FWD", "OPTIMIZER", "BWD", "OPTIMIZER"]
        assert runs[1][1] == 161


@needs_shared
def test_backward_named_work_is_backward_on_every_trace():
    named = re.compile(traceviz.classify.patterns.load_patterns(None)
                       .phases["backward_name"].pattern)
    for path in sorted(shared("").rglob("*.json*")):
        try:
            table = traceviz.parse_table(path)
        except traceviz.errors.TraceVizError:
            continue
        for name, op, phase in zip(table["name"].to_pylist(), table["cpu_op"].to_pylist(),
                                   table["phase"].to_pylist()):
            if named.search(name or "") or named.search(op or ""):
                assert phase in ("BWD", "RECOMPUTE"), (path, name, op, phase)


# ---- 8. absurd headline values -------------------------------------------------------

RANKLESS = ["tracelens/mi210/gpu_only_trace.json.gz", "tracelens/torch_compile_triton/"
            "trace.json.gz", "kineto/docs/before_fix_trace.json"]


@needs_shared
def test_unrelated_rankless_traces_report_their_own_spans(tmp_path):
    """Three unrelated rank-less traces in one folder: separate runs, never one job.
    batch parses each; the commands that read them as a job (report, aggregate, html)
    say in one line which traces state no rank; each trace alone reports its own span
    (not the hours between their epochs)."""
    job = _copy("", tmp_path, RANKLESS)
    runner = CliRunner()
    out = runner.invoke(main, ["batch", str(job), "-q", "-j", "1"])
    assert out.exit_code == 0, out.output
    for args in (["report", str(job)], ["aggregate", str(job), "--no-figures"],
                 ["html", str(job), "-o", str(tmp_path / "page.html")]):
        out = runner.invoke(main, args)
        assert out.exit_code == 1, out.output
        (line,) = [x for x in out.output.splitlines() if x.startswith("traceviz: error:")]
        assert "both state no rank" in line and "Traceback" not in out.output
    assert not (tmp_path / "page.html").exists()
    for f in sorted(job.iterdir()):
        t = traceviz.parse_table(f)
        span = pc.max(pc.add(t["ts"], t["dur"])).as_py() - pc.min(t["ts"]).as_py()
        rep = make_report(f)
        assert rep["configuration"]["ranks"] == [0]
        assert rep["throughput"]["iterations"][0]["time_ms"] == pytest.approx(span / 1e6)


@needs_shared
def test_unknown_sizes_print_na_not_zero(tmp_path):
    job = _copy("hta/trace_filter", tmp_path)
    out = CliRunner().invoke(main, ["report", str(job)])
    assert out.exit_code == 0, out.output
    assert "n/a" in out.output
    assert not re.search(r"\b0\.00 GB", out.output)


@needs_shared
def test_inference_trace_is_titled_inference():
    out = CliRunner().invoke(main, ["report", str(shared(
        "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))])
    assert out.exit_code == 0, out.output
    assert "inference" in out.output.lower() and "TRAINING" not in out.output
    assert "-1" not in out.output.split("iterations", 1)[-1].splitlines()[0]


@needs_shared
def test_diff_compares_traces_without_profiler_steps(tmp_path):
    control = shared("kineto/docs/before_fix_trace.json")
    test = shared("kineto/docs/after_fix_trace.json")
    out = CliRunner().invoke(main, ["diff", str(control), str(test), "-o", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "counts:" in out.output


def test_diff_sees_a_memcpy_whose_time_doubled(tmp_path):
    """Same counts, one memcpy twice as long: 'slower', not 'unchanged'."""
    def trace(memcpy_us: int) -> dict:
        doc = _launched([("gemm", {}, "aten::mm")])
        doc["traceEvents"] += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1,
             "ts": 50, "dur": 5},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
             "tid": 1, "ts": 51, "dur": 2, "args": {"correlation": 99}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": 60, "dur": memcpy_us,
             "args": {"correlation": 99, "device": 0, "stream": 7, "bytes": 1 << 20}}]
        return doc
    (tmp_path / "a.json").write_text(json.dumps(trace(10)))
    (tmp_path / "b.json").write_text(json.dumps(trace(20)))
    out = CliRunner().invoke(main, ["diff", str(tmp_path / "a.json"),
                                    str(tmp_path / "b.json"), "-o", str(tmp_path / "d")])
    assert out.exit_code == 0, out.output
    assert "time: 1 slower, 0 faster" in out.output
    rows = list(csv.DictReader((tmp_path / "d" / "trace_diff.csv").open()))
    memcpy = [r for r in rows if r["name"].startswith("Memcpy HtoD")]
    assert len(memcpy) == 1 and memcpy[0]["time_change"] == "slower"


# ---- 9 / 10. rank-less folders and --hta-compat figures -------------------------------

@needs_shared
def test_hta_compat_breakdown_skips_impossible_pie(tmp_path):
    """HTA's µs rounding gives some of this trace's activities negative time: with
    --hta-compat the tables are written and the pie that cannot be drawn is skipped with
    a note."""
    path = shared("hta/mtia_inference_trace/mtia_inference_rank_0.json.gz")
    out = CliRunner().invoke(main, ["breakdown", str(path), "--hta-compat",
                                    "-o", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "top_kernels_computation.png not drawn" in out.output and "negative" in out.output
    assert not (tmp_path / "top_kernels_computation.png").exists()
    top = list(csv.DictReader((tmp_path / "top_kernels.csv").open()))
    assert any(float(r["sum_ns"]) < 0 for r in top)  # the table keeps HTA's number
