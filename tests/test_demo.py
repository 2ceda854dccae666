"""traceviz demo: the whole pipeline on a synthesized job, from nothing."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from traceviz.cli import main


def test_demo_runs_every_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative folder, as the README's first command gives
    out = Path("demo")
    result = CliRunner().invoke(main, ["demo", str(out)])
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
