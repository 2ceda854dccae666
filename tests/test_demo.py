"""traceviz demo: the whole pipeline on a synthesized job, from nothing."""
from __future__ import annotations

import csv

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
