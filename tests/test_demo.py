"""traceviz demo: the whole pipeline on a synthesized job, from nothing."""
from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from traceviz.cli import main


def test_demo_runs_every_step(tmp_path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(main, ["demo", str(out)])
    assert result.exit_code == 0, result.output
    assert "where to look:" in result.output
    it = out / "job" / "traceviz" / "iteration_10"
    assert len(list(it.glob("rank_*.parquet"))) == 16
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
    stages = list(csv.DictReader(open(out / "pipeline" / "pipeline_stages.csv")))
    assert [int(s["rank"]) for s in stages] == [0, 4, 8, 12]
    assert (out / "pipeline" / "pipeline_group0_iter10.png").stat().st_size > 0
    assert "<section id='stragglers'>" in (out / "traceviz_report.html").read_text()
