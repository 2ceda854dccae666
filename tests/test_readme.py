"""The README, run: its first command (``traceviz demo``: the whole pipeline on a
synthesized job, from nothing), then every command line and Python snippet of its code
blocks on the job that command wrote, each shown output compared with the command's, and
each value a snippet shows (``# -> value``) with what it gives."""
from __future__ import annotations

import ast
import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import shared, write_timer_dumps

from traceviz.cli import main
from traceviz.synth.op_timeline import TimelineConfig, write_timeline

README = Path(__file__).resolve().parents[1] / "README.md"
DEMO = "traceviz-demo"  # the README's first command's folder
# what the README's examples name that a demo cannot make: taken from ../shared/traces
CLUSTER = "tcp://10.0.0.5:8786"
TOML = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 4096
[parallelism]
tensor_parallel_degree = 2
pipeline_parallel_degree = 4
"""


@dataclass
class Demo:
    folder: Path
    result: Result


@pytest.fixture(scope="module")
def demo(module_folder) -> Demo:
    """The README's first command (after its install) in the module's folder, and the
    inputs its examples name that a demo cannot make."""
    result = CliRunner().invoke(main, ["demo", DEMO])
    shutil.copy(shared("gpu/single_gpt/single_gpt_memory.json.gz"),
                module_folder / "rank0_memory.json.gz")
    shutil.copytree(shared("gpu/flight_recorder"), module_folder / "nccl_dumps")
    (module_folder / "llama3_8b.toml").write_text(TOML)
    # an op timeline and PP-Schedule-Visualization's timer dumps
    write_timeline(TimelineConfig(pp=4, dp=4, microbatches=6, steps=6, slow_rank=13,
                                  slow_from=2), module_folder / "timers.parquet")
    write_timer_dumps(module_folder / "pp_timer_logs", [1.0, 1.0, 1.0, 1.4], 6)
    # the table the snippets load, as the README's parse block writes it before them
    first_parse = next(cmd for _, cmd in _commands() if cmd.startswith("traceviz parse"))
    assert _run(first_parse, module_folder)[0] == 0
    return Demo(module_folder, result)


def blocks(kind: str) -> list[tuple[int, str]]:
    """(line, text) of every fenced block of the README in language ``kind`` ("" for
    the untagged ones)."""
    text = README.read_text()
    return [(text[:m.start()].count("\n") + 1, m.group(2))
            for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S) if m.group(1) == kind]


def _commands() -> list[tuple[int, str]]:
    """Every command line of the README's bash blocks (``pip`` lines are the set-up the
    test suite itself runs under)."""
    out = []
    for line, text in blocks("bash"):
        for i, cmd in enumerate(text.splitlines()):
            if cmd.startswith(("traceviz ", "cat ")) and not cmd.startswith("traceviz demo"):
                out.append((line + 1 + i, cmd))
    return out


def _run(cmd: str, folder: Path) -> tuple[int, str]:
    """``cmd`` as a user types it, in ``folder``: (exit status, output)."""
    if any(c in cmd.split("#")[0] for c in "|>"):  # a pipe or a redirect: the shell
        exe = shutil.which("traceviz")
        line = cmd if exe else cmd.replace("traceviz ", f"{sys.executable} -m traceviz ")
        done = subprocess.run(line, shell=True, cwd=folder, capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr
    result = CliRunner().invoke(main, shlex.split(cmd, comments=True)[1:])
    return result.exit_code, result.output


@pytest.mark.parametrize("where,cmd", _commands(), ids=[f"line{n}" for n, _ in _commands()])
def test_every_command_line_runs(demo, where, cmd, monkeypatch):
    monkeypatch.chdir(demo.folder)
    if CLUSTER in cmd:
        distributed = pytest.importorskip("distributed", reason="dask is in the test extra")
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                      dashboard_address=None) as cluster:
            code, out = _run(cmd.replace(CLUSTER, cluster.scheduler_address), demo.folder)
    else:
        code, out = _run(cmd, demo.folder)
    assert code == 0, f"README line {where}: {cmd}\n{out}"
    # every command ends one way: a note is said once, with one prefix
    assert "note: note:" not in out and "warning: warning:" not in out, out


def _samples() -> list[tuple[int, str, list[str]]]:
    """The README's shown outputs: (line, the command after ``$``, the lines shown)."""
    out = []
    for line, text in blocks(""):
        first, *shown = text.splitlines()
        if first.startswith("$ traceviz "):
            out.append((line, first[2:], shown))
    return out


@pytest.mark.parametrize("where,cmd,shown", _samples(), ids=[f"line{n}" for n, *_ in _samples()])
def test_shown_outputs_are_the_demos(demo, where, cmd, shown, monkeypatch):
    """Every line a README block shows is in the command's output on the demo job, in
    the order shown; a line with "..." shows what comes before it."""
    monkeypatch.chdir(demo.folder)
    code, out = _run(cmd, demo.folder)
    assert code == 0, out
    lines = out.splitlines()
    at = 0
    for want in shown:
        if want.strip() in ("", "..."):
            continue
        head = want.split("...")[0].rstrip() if "..." in want else want
        found = next((i for i in range(at, len(lines)) if lines[i].startswith(head)), None)
        assert found is not None, f"README line {where}: not in the output, in order: {want}"
        at = found + 1


def test_every_snippet_shows_what_it_gives(demo, monkeypatch):
    """Each Python block runs, statement by statement; a statement followed by
    ``# -> value`` gives that value."""
    monkeypatch.chdir(demo.folder)
    for line, text in blocks("python"):
        scope: dict = {}
        source = text.splitlines()
        for node in ast.parse(text).body:
            code = ast.get_source_segment(text, node)
            comment = source[node.end_lineno - 1].split("# -> ", 1)
            if isinstance(node, ast.Expr) and len(comment) == 2:
                want = ast.literal_eval(comment[1].split("   (")[0].strip())
                got = eval(compile(ast.Expression(node.value), "README", "eval"), scope)
                assert got == want, f"README line {line + node.lineno}: {code}"
            else:
                exec(compile(ast.Module([node], []), "README", "exec"), scope)


def test_a_usage_error_exits_2(demo, monkeypatch):
    """The exit status the README gives for a usage error."""
    monkeypatch.chdir(demo.folder)
    code, out = _run(f"traceviz critical-path {DEMO}/job --hta-compat", demo.folder)
    assert code == 2 and "--rank" in out


def test_demo_runs_every_step(demo, monkeypatch):
    monkeypatch.chdir(demo.folder)  # a relative folder, as the README's first command gives
    out = Path(DEMO)
    result = demo.result
    assert result.exit_code == 0, result.output
    assert "where to look:" in result.output
    it = out / "tables" / "iteration_10"
    assert len(list(it.glob("rank_*[0-9].parquet"))) == 16
    assert len(list(it.glob("rank_*.cpu.parquet"))) == 16  # for critical path and ops
    rows = list(csv.DictReader(open(it / "microbatches.csv")))
    # 16 ranks x 8 micro-batches x (forward, backward)
    assert len(rows) == 16 * 8 * 2
    assert all(int(r["wall_clock_ns"]) >= int(r["comp_ns"]) > 0 for r in rows)
    offsets = list(csv.DictReader(open(it / "clock_offsets.csv")))
    assert len(offsets) == 16 and offsets[0]["offset_ns"] == "0"
    for name in ("temporal_breakdown.csv", "top_kernels.csv", "temporal_breakdown.png"):
        assert (out / "breakdown" / name).stat().st_size > 0
    assert (it / "Model_Group_0" / "Model_Group_0_all_ranks_combined.png").exists()
    # the report: iteration time over all ranks equals the ProfilerStep spans of the
    # job's ground truth, clocks synced
    rep = json.loads((out / "report" / "report.json").read_text())
    truth = json.loads((out / "job" / "ground_truth" / "ground_truth.json").read_text())
    spans = [(a - truth["skew_ns"][int(r)], b - truth["skew_ns"][int(r)])
             for r, v in truth["ranks"].items() for a, b in v["steps"]]
    want_ms = (max(b for _, b in spans) - min(a for a, _ in spans)) / 1e6
    assert abs(rep["throughput"]["mean"]["time_ms"] - want_ms) < 1e-5
    assert (out / "report" / "report.txt").read_text().rstrip().endswith("=" * 80)
    # TFLOP/s and MFU from the synthetic model's size (12 h^2 parameters per layer),
    # recomputed here: 6 N tokens / time / 16 GPUs, over the H100's dense BF16 peak
    params = 12 * 8 * 4096 ** 2
    tokens = 8 * 2 * 1 * 4096
    tflops = 6 * params * tokens / (want_ms / 1e3) / 16 / 1e12
    mfu = rep["throughput"]["mfu"]
    assert mfu["source"] == "config"
    assert abs(mfu["tflops_per_gpu"] - tflops) < 1e-6 * tflops
    assert abs(mfu["mfu_pct"] - 100 * tflops / 989.5) < 1e-6 * 100
    assert 0 < mfu["mfu_pct"] <= 100
    assert "MFU" in result.output
    # the diagnosis finds the slow GPU; the pipeline view shows its group
    strag = list(csv.DictReader(open(out / "diagnose" / "stragglers.csv")))
    assert [int(s["rank"]) for s in strag] == [5]
    assert "stragglers (same work, slower GPU)" in result.output
    assert "pipeline bubble" in result.output
    stages = list(csv.DictReader(open(out / "pipeline" / "pipeline_stages.csv")))
    assert [int(s["rank"]) for s in stages] == [1, 5, 9, 13]
    assert (out / "pipeline" / "pipeline_group1_iter10.png").stat().st_size > 0
    assert "<section id='stragglers'>" in (out / "traceviz_report.html").read_text()
    # the critical path across the 16 ranks and the op model, also on the page
    by_rank = list(csv.DictReader(open(out / "critical-path" / "critical_path_by_rank.csv")))
    assert abs(sum(float(r["pct"]) for r in by_rank) - 100) < 1e-6
    assert (out / "critical-path" / "critical_path_trace.json.gz").stat().st_size > 0
    iters = list(csv.DictReader(open(out / "ops" / "ops_iterations.csv")))
    assert len(iters) == 16 and all(0 < float(r["mfu_pct"]) <= 100 for r in iters)
    assert rep["throughput"]["trace_flops"]["tflops_per_gpu"] is not None  # a cross-check
    assert "<section id='model'>" in (out / "traceviz_report.html").read_text()
