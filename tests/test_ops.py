"""``traceviz ops``: FLOPs and bytes per call against formulas recomputed here from the
raw events' recorded shapes (real traces), and against the synthesizer's ground truth
(FLOPs per phase and iteration, MFU, GPU time per module)."""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import shared
from reference import events_of, load, read_bytes

from traceviz.analysis.op_model import model
from traceviz.cli import main
from traceviz.commands import ops as command
from traceviz.synth import SynthConfig, synthesize

REAL = ["hta/negative_queue_length_values_check/rank0.json.gz",
        "hta/trace_filter/sampled_rank-0.json.gz",
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"]


def _expected_gemm_flops(name: str, dims: list) -> float | None:
    """2 x M x K x N of the GEMM ops, written out per op (independent of op_model)."""
    if name == "aten::mm":
        return 2.0 * dims[0][0] * dims[0][1] * dims[1][1]
    if name == "aten::addmm":
        return 2.0 * dims[1][0] * dims[1][1] * dims[2][1]
    if name == "aten::bmm":
        return 2.0 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]
    if name == "aten::baddbmm":
        return 2.0 * dims[1][0] * dims[1][1] * dims[1][2] * dims[2][2]
    if name == "aten::linear":
        return 2.0 * math.prod(dims[0][:-1]) * dims[0][-1] * dims[1][0]
    return None


@pytest.mark.parametrize("path", REAL)
def test_gemm_flops_equal_the_recorded_shapes(path):
    trace = shared(path)
    events = events_of(load(read_bytes(trace)))
    calls = command.run(trace).value.calls.to_pylist()
    checked = 0
    for c in calls:
        ev = events[c["event_index"]]
        assert ev["name"] == c["op"]
        want = _expected_gemm_flops(c["op"], ev["args"]["Input Dims"])
        if want is not None:
            assert c["flops"] == pytest.approx(want), c
            checked += 1
        # a call's GPU time is the kernels it owns: positive, at most its rank's span
        assert c["gpu_ns"] > 0 and c["kernels"] >= 1
    assert checked > 0


def test_model_formulas():
    bf = '"c10::BFloat16"'
    # convolution: 32 x 3 x 224 x 224, 64 filters 7 x 7, stride 2, padding 3 -> 112 x 112
    conv = model("aten::convolution", "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], "
                 "[], [], []]", '["float", "float"]',
                 '["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]')
    assert conv.flops == 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7 and conv.dtype == "fp32"
    # causal flash attention halves the S x S work; its backward is 2.5x
    q = "[2, 16, 1024, 128]"
    fwd = model("aten::_scaled_dot_product_flash_attention", f"[{q}, {q}, {q}, [], [], [], []]",
                f"[{bf}, {bf}, {bf}]", '["", "", "", "0.0", "True", "False", ""]')
    assert fwd.flops == 2 * 2 * 16 * 1024 * 1024 * 256 / 2 and fwd.dtype == "bf16"
    # grouped GEMM of an MoE layer: 4096 tokens over 8 experts, 1024 -> 2816
    g = model("aten::_grouped_mm", "[[4096, 1024], [8, 1024, 2816], [8]]",
              f"[{bf}, {bf}, \"int\"]", '["", "", ""]')
    assert g.flops == 2 * 4096 * 1024 * 2816
    # matmul broadcasts batch dims
    m = model("aten::matmul", "[[4, 1, 64, 32], [3, 32, 16]]", '["float", "float"]', "[]")
    assert m.flops == 2 * 12 * 64 * 32 * 16
    # bytes of an elementwise op: inputs read, an output as large as the largest
    add = model("aten::add", "[[5, 128], [5, 128], []]", '["float", "float", "Scalar"]',
                '["", "", "1"]')
    assert add.flops is None and add.nbytes == 3 * 5 * 128 * 4
    # no shapes: unknown, never 0
    assert model("aten::mm", None, None, None).flops is None
    assert model("aten::unknown_op", "[[1]]", '["float"]', "[]").family is None


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("ops_job")
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=2, layers=2, recompute=True,
                           seed=4), root / "job")
    return root / "job"


def test_flops_and_mfu_equal_the_synthesizer_truth(job):
    truth = json.loads((job / "ground_truth" / "ground_truth.json").read_text())["ranks"]
    kernels = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pandas()
    result = command.run(job / "iteration_10")
    iters = {r["rank"]: r for r in result.value.iterations.to_pylist()}
    assert set(iters) == {int(r) for r in truth}
    for r, t in truth.items():
        it = iters[int(r)]
        assert it["model_flops"] == pytest.approx(t["flops"]["model"])
        assert it["executed_flops"] == pytest.approx(t["flops"]["executed"])
        assert it["executed_flops"] > it["model_flops"]  # recompute runs the forward again
        # MFU: the model's FLOPs over the step's span, against H100's BF16 peak
        assert it["mfu_pct"] == pytest.approx(100 * it["model_flops"] / it["span_ns"] / 1e3
                                              / 989.5)
        assert 0 < it["mfu_pct"] <= 100
    calls = result.value.calls.to_pandas()
    got = calls.groupby(["rank", "phase"]).flops.sum()
    want = kernels[kernels.flops > 0].groupby(["rank", "phase"]).flops.sum()
    assert got[got > 0].to_dict() == pytest.approx(want.to_dict())
    # every shaped call runs at the synthesizer's efficiency (60 % of peak, +- jitter)
    shaped = calls[calls.flops.notna()]
    assert ((shaped.pct_peak_flops > 50) & (shaped.pct_peak_flops < 70)).all()


def test_module_attribution_equals_the_truth(job, tmp_path):
    out = tmp_path / "ops"
    r = CliRunner().invoke(main, ["ops", str(job / "iteration_10"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    got = pq.read_table(out / "ops_by_module.parquet").to_pandas()
    assert set(got.kind) >= {"COMP", "COMM TP"}  # each comm group apart
    got["kind"] = got.kind.str.split(" ").str[0]
    got = got.groupby(["module", "phase", "kind"]).gpu_ns.sum()
    kernels = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pandas()
    want = kernels[kernels.module.notna()].groupby(["module", "phase", "kind"]).dur.sum()
    assert {k: v for k, v in got.items() if k[0] != "(no module)"} == want.to_dict()
    for name in ("ops_roofline.png", "ops_by_module.png", "ops_calls.parquet",
                 "ops_by_shape.csv", "ops_not_modelled.csv", "ops_iterations.csv"):
        assert (out / name).stat().st_size > 0, name


def test_what_is_not_modelled_is_named(tmp_path):
    """An MoE layer's expert GEMMs (bmm) carry no shapes in the synthesized job: their
    time is named, and the three shares add up to the whole."""
    synthesize(SynthConfig(tp=1, pp=1, dp=2, ep=2, microbatches=2, layers=2, moe_every=1,
                           seed=5), tmp_path / "moe")
    result = command.run(tmp_path / "moe" / "iteration_10")
    table = result.tables["ops_not_modelled"].to_pylist()
    whys = {(r["op"], r["why"]) for r in table}
    assert ("aten::bmm", "modelled op without shapes") in whys
    model = result.value
    assert sum(r["pct_of_gpu_time"] for r in table) + \
        100.0 * model.modelled_ns / model.total_ns == pytest.approx(100)
    assert all(0 <= r["pct_of_gpu_time"] <= 100 for r in table)
    assert np.isfinite([r["pct_of_gpu_time"] for r in table]).all()


def test_notebook_api_gives_the_command_tables(job):
    import traceviz

    nb = traceviz.Job(job).ops()
    cli = command.run(job / "iteration_10")
    for name in ("ops_by_shape", "ops_iterations", "ops_by_module"):
        assert nb.tables()[name].equals(cli.tables[name]), name
    assert nb.calls.equals(cli.value.calls) and nb.calls.num_rows


def test_html_page_has_the_op_model_once_cpu_tables_exist(job, tmp_path):
    """Tables parsed without their CPU tables (and no traces to parse them from): the
    page says how to get the op model; the job's traces: the page parses them (for the
    advice) and has it."""
    runner = CliRunner()
    tables = tmp_path / "tables"
    assert runner.invoke(main, ["batch", str(job), "-o", str(tables), "-q"]).exit_code == 0
    before = runner.invoke(main, ["html", str(tables / "iteration_10"), "-o",
                                  str(tmp_path / "a.html")])
    assert before.exit_code == 0, before.output
    text = (tmp_path / "a.html").read_text()
    assert "<section id='model'>" in text and "run &#x27;traceviz ops JOB&#x27;" in text
    after = runner.invoke(main, ["html", str(job), "-o", str(tmp_path / "b.html")])
    assert after.exit_code == 0, after.output
    text = (tmp_path / "b.html").read_text()
    model = text[text.index("<section id='model'>"):]
    model = model[:model.index("</section>")]
    assert "aten::mm" in model and "TransformerLayer_1/MLP_1" in model
    assert "MFU" in model


def test_one_mfu_naming_its_source(job, tmp_path):
    """The report and the page show one MFU: the configuration's model FLOPs when given,
    else the traced ops' own (mean over ranks and iterations); the other is at most a
    TFLOP/s cross-check."""
    from traceviz.job.report import make_report
    from traceviz.render.report_text import report_text

    first = make_report(job)["throughput"]["mfu"]  # its advice parses the CPU tables
    iters = command.run(job).value.iterations.to_pylist()
    assert first["source"] == "trace" and first["why"] is None
    assert first["mfu_pct"] == pytest.approx(np.mean([r["mfu_pct"] for r in iters]))
    rep = make_report(job, overrides={"peak_tflops": 989.5})
    mfu = rep["throughput"]["mfu"]
    assert mfu["source"] == "trace"
    assert mfu["mfu_pct"] == pytest.approx(np.mean([r["mfu_pct"] for r in iters]))
    assert mfu["tflops_per_gpu"] == pytest.approx(np.mean([r["model_tflops"] for r in iters]))
    text = report_text(rep)
    assert text.count("MFU") == 1 and "traced ops' own FLOPs" in text
    # given the model's size, the configuration's FLOPs are the MFU's source
    facts = {"peak_tflops": 989.5, "global_batch_size": 8, "seq_len": 4096, "flops_per_token": 6e8}
    rep = make_report(job, overrides=facts)
    mfu, spans = rep["throughput"]["mfu"], rep["throughput"]["iterations"]
    assert mfu["source"] == "config"
    want = np.mean([6e8 * 8 * 4096 / (r["time_ms"] / 1e3) / 4 / 1e12 for r in spans])
    assert mfu["tflops_per_gpu"] == pytest.approx(want)
    assert mfu["mfu_pct"] == pytest.approx(100 * want / 989.5)
    assert "Cross-check: the traced ops' own FLOPs give" in report_text(rep)
    out = tmp_path / "page.html"
    r = CliRunner().invoke(main, ["html", str(job), "-o", str(out), "--flops-per-token", "6e8",
                                  "--global-batch-size", "8", "--seq-len", "4096"])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    # one value (the summary card) naming its source; the op model section points there
    assert page.count("MFU") == 2 and page.count("class='kpi'>MFU") == 1
    assert "title='the run&#x27;s configuration: model FLOPs per token" in page
    assert "config FLOPs</small><b>" in page
    model = page[page.index("<section id='model'>"):]
    assert "MFU: the summary's" in model[:model.index("</section>")]


def test_per_microbatch_totals_equal_the_truth(job):
    kernels = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pandas()
    want = kernels[kernels.flops > 0].groupby(["phase", "microbatch"]).flops.sum().to_dict()
    table = command.run(job).tables["ops_by_microbatch"].to_pylist()
    got = {(r["phase"], r["microbatch"]): r["flops"] for r in table if r["flops"]}
    assert got == pytest.approx(want)
    for r in table:  # the group's throughput is over the calls that have FLOPs
        if r["flops"]:
            assert r["tflops"] == pytest.approx(r["pct_peak_flops"] * 989.5 / 100, rel=1e-6)


def _attention_trace(path, ops: list[tuple]) -> None:
    """A trace of nested operator calls ``(name, ts, dur, dims, concrete, kernel)`` (µs;
    ``kernel``: the name of a kernel the call launches itself, or None), with their
    launches and kernels as PyTorch's profiler writes them."""
    events = []
    for i, (name, ts, dur, dims, concrete, kernel) in enumerate(ops):
        types = ["c10::BFloat16" if d else "Scalar" for d in dims]
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2,
                       "ts": ts, "dur": dur,
                       "args": {"Input Dims": dims, "Input type": types,
                                "Concrete Inputs": concrete}})
        if kernel:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": 2, "ts": ts + 1, "dur": 1,
                           "args": {"correlation": i + 1}})
            events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                           "ts": 1000 + 100 * i, "dur": 50,
                           "args": {"correlation": i + 1, "stream": 7, "device": 0}})
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def test_attention_causal_flags_at_their_schema_positions_counted_once(tmp_path):
    """Each attention op's causal argument sits where PyTorch's native_functions.yaml
    puts it (the Concrete Inputs of ``_flash_attention_forward`` hold ``max_q`` /
    ``max_k`` at 5 / 6 and ``is_causal`` at 8); SDPA's wrappers around the kernel-level op
    are not counted again, and a kernel a wrapper launches itself is named as not
    modelled."""
    b, s, h, d = 2, 1024, 16, 64
    bhsd, bshd = [b, h, s, d], [b, s, h, d]
    full = 2.0 * b * h * s * s * 2 * d  # non-causal forward FLOPs, hand-computed
    sdpa = [bhsd] * 3 + [[]] * 5
    flash = [bshd] * 3 + [[]] * 12
    flash_concrete = ["", "", "", "", "", str(s), str(s), "0.", "True", "False", "0.125"]
    eff = [bshd] * 3 + [[]] * 11
    eff_concrete = ["", "", "", "", "", "", str(s), str(s), "0.", "1", "True", "0.125"]
    cudnn_bwd = [bhsd] * 5 + [[b, h, s]] + [[]] * 10
    cudnn_concrete = [""] * 9 + ["", "", str(s), str(s), "0.", "True", "0.125"]
    _attention_trace(tmp_path / "t.json", [
        ("aten::scaled_dot_product_attention", 0, 100, sdpa,
         ["", "", "", "", "0.", "True", "0.125", "False"], "transpose_kernel"),
        ("aten::_scaled_dot_product_flash_attention", 10, 80, sdpa[:7],
         ["", "", "", "0.", "True", "False", "0.125"], None),
        ("aten::_flash_attention_forward", 20, 60, flash, flash_concrete,
         "flash_fwd_kernel"),
        ("aten::_efficient_attention_forward", 200, 50, eff, eff_concrete,
         "fmha_cutlassF_kernel"),
        ("aten::_efficient_attention_forward", 300, 50, eff,
         eff_concrete[:9] + ["0"] + eff_concrete[10:], "fmha_cutlassF_kernel"),
        ("aten::_scaled_dot_product_cudnn_attention_backward", 400, 50, cudnn_bwd,
         cudnn_concrete, "cudnn_bwd_kernel"),
    ])
    result = command.run(tmp_path / "t.json")
    calls = result.value.calls.to_pylist()
    got = [(c["op"], c["flops"]) for c in calls]
    assert got == [("aten::_flash_attention_forward", full / 2),
                   ("aten::_efficient_attention_forward", full / 2),  # mask type 1
                   ("aten::_efficient_attention_forward", full),  # mask type 0: none
                   ("aten::_scaled_dot_product_cudnn_attention_backward", 2.5 * full / 2)]
    assert sum(c["flops"] for c in calls) == pytest.approx(full * (0.5 + 0.5 + 1 + 1.25))
    free = {(r["op"], r["why"]): r for r in result.tables["ops_not_modelled"].to_pylist()}
    assert ("aten::scaled_dot_product_attention", "no modelled operator") in free


@pytest.mark.parametrize("path", ["tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "tracelens/torch_compile_triton/trace.json.gz"])
def test_flash_attention_flops_on_real_traces(path):
    """A real causal (Qwen on MI300) and non-causal (torch.compile) flash attention:
    FLOPs recomputed from each raw event's shapes and ``is_causal`` (input 8 of
    ``_flash_attention_forward``), each call once (not again for the SDPA wrappers)."""
    trace = shared(path)
    events = events_of(load(read_bytes(trace)))
    calls = [c for c in command.run(trace).value.calls.to_pylist()
             if c["family"] == "attention"]
    raw = [e for e in events if e.get("name") == "aten::_flash_attention_forward"]
    assert len(calls) == len(raw) > 0
    causal = set()
    for c in calls:
        ev = events[c["event_index"]]
        assert ev["name"] == "aten::_flash_attention_forward"
        (b, s, h, d), (_, sk, _, _), (_, _, _, dv) = ev["args"]["Input Dims"][:3]
        flag = ev["args"]["Concrete Inputs"][8]
        causal.add(flag)
        want = 2.0 * b * h * s * sk * (d + dv) / (2 if flag == "True" else 1)
        assert c["flops"] == want
    assert causal == ({"True"} if "Qwen" in path else {"False"})


ITEMSIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8,
            "long": 8, "int": 4, "bool": 1}


@pytest.mark.parametrize("path", ["hta/negative_queue_length_values_check/rank0.json.gz",
                                  "hta/trace_diff/test/test.json.gz",
                                  "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "tracelens/b200/eager_trace.json.gz"])
def test_copy_and_fill_bytes_are_read_plus_written_once(path):
    """``copy_(dst, src)`` reads its source and writes its destination (each in its own
    dtype); ``fill_`` / ``zero_`` only write: bytes recomputed from the raw events."""
    trace = shared(path)
    events = events_of(load(read_bytes(trace)))
    checked = 0
    for c in command.run(trace).value.calls.to_pylist():
        if c["op"] not in ("aten::copy_", "aten::fill_", "aten::zero_"):
            continue
        args = events[c["event_index"]]["args"]
        dims, types = args["Input Dims"], args["Input type"]
        if not dims[0] or types[0] not in ITEMSIZE:
            continue
        want = math.prod(dims[0]) * ITEMSIZE[types[0]]
        if c["op"] == "aten::copy_" and dims[1]:
            want += math.prod(dims[1]) * ITEMSIZE[types[1]]
        assert c["bytes"] == want, (c["op"], dims, types)
        checked += 1
    assert checked > 0
