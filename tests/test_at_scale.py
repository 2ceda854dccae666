"""At 128 ranks every text output is a summary (min / median / max naming ranks, the
median per pipeline stage, the outliers) with the per-rank detail in tables, and the
HTML timeline is a heatmap over a drill-down into one pipeline group. Checked on a
synthesized 128-rank job with one slow GPU (the synthesizer's ground truth), numbers
recomputed from the tables the commands wrote."""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_html import _driver

from traceviz.cli import main
from traceviz.analysis.coverage import busy_grid
from traceviz.render.rank_spread import spread_lines
from traceviz.synth import SynthConfig, synthesize
from traceviz.topology.layout import Layout

SLOW = 77  # tp2 pp4 dp16: stage 2, pipeline group [13, 45, 77, 109]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    synthesize(SynthConfig(tp=2, pp=4, dp=16, microbatches=4, layers=4, skew_us=300.0,
                           with_stack=False, straggler_rank=SLOW), root / "job")
    r = CliRunner().invoke(main, ["batch", str(root / "job"), "-o", str(root / "tables"),
                                  "-q"])
    assert r.exit_code == 0, r.output
    return root, root / "tables" / "iteration_10"


def _run(*args: str) -> tuple[list[str], str]:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines(), r.stderr


def _stats(line: str) -> tuple[float, int, float, float, int]:
    m = re.search(r"min ([-\d.,]+) \S+ \(rank (\d+)\), median ([-\d.,]+) \S+, max "
                  r"([-\d.,]+) \S+ \(rank (\d+)\)", line)
    assert m, line
    a, ra, med, b, rb = m.groups()
    return float(a.replace(",", "")), int(ra), float(med.replace(",", "")), \
        float(b.replace(",", "")), int(rb)


def test_report_is_a_summary_with_every_rank_in_its_table(job):
    root, tables = job
    lines, err = _run("report", str(tables), "-o", str(root / "rep" / "r.txt"))
    assert len(lines) <= 250
    assert sum("128 ranks, summarized (every rank: r_ranks.csv)" in x for x in lines) == 2
    assert not any(re.match(r"\s+rank \d+:", x) for x in lines)  # no per-rank walls
    ranks = pq.read_table(root / "rep" / "r_ranks.parquet").to_pylist()
    assert sorted(r["rank"] for r in ranks) == list(range(128))
    rep = json.loads((root / "rep" / "r.json").read_text())
    assert {r["rank"]: r["overlap_pct"] for r in rep["overlap"]["per_rank"]} == \
        {r["rank"]: r["overlap_pct"] for r in ranks}
    stage = Layout(128, tp=2, pp=4).pp_stages()
    assert all(r["pp_stage"] == stage[r["rank"]] for r in ranks)
    # the summary's numbers are the table's, recomputed
    comp = np.array([r["comp_ms"] for r in ranks])
    line = next(x for x in lines if x.strip().startswith("compute: min"))
    lo, lo_rank, med, hi, hi_rank = _stats(line)
    assert lo == pytest.approx(comp.min(), abs=0.006) and lo_rank == ranks[comp.argmin()]["rank"]
    assert hi == pytest.approx(comp.max(), abs=0.006) and hi_rank == SLOW
    assert med == pytest.approx(np.median(comp), abs=0.006)
    # the slow GPU is the one outlier of its stage's compute
    after = lines[lines.index(line) + 1:lines.index(line) + 3]
    out = next(x for x in after if "outliers" in x)
    assert re.findall(r"rank (\d+)", out) == [str(SLOW)]
    assert "wrote" in err and "r_ranks.csv" in err


def test_breakdown_prints_a_summary(job):
    root, tables = job
    lines, _ = _run("breakdown", str(tables), "-o", str(root / "brk"))
    assert len(lines) <= 60 and lines[0].startswith("128 ranks over their profiled steps")
    rows = pq.read_table(root / "brk" / "temporal_breakdown.parquet").to_pylist()
    steps = [r for r in rows if r["iteration"] is not None and r["iteration"] >= 0]
    assert len({r["rank"] for r in steps}) == 128
    compute = next(i for i, x in enumerate(lines) if x.strip().startswith("compute: min"))
    lo, _, med, hi, hi_rank = _stats(lines[compute])
    # each rank's compute over its profiled steps: their ns summed
    pct = np.array([100 * sum(r["compute_ns"] for r in steps if r["rank"] == k)
                    / sum(r["kernel_time_ns"] for r in steps if r["rank"] == k)
                    for k in range(128)])
    assert (lo, med, hi) == pytest.approx((pct.min(), np.median(pct), pct.max()), abs=0.006)
    assert hi_rank == SLOW
    assert lines[compute + 1].strip().startswith("by pp stage: 0: ")
    assert re.findall(r"rank (\d+)", lines[compute + 2]) == [str(SLOW)]


def test_spread_lines_compare_a_rank_with_its_group():
    """Rank 5 is inside the job's range but far from its own group's median: named; an
    unknown value is counted as n/a, never as 0."""
    ranks = list(range(9))
    values = [10, 10.1, 9.9, 10, 20, 15, 20.2, 19.8, None]
    groups = {r: str(r // 4) for r in ranks}
    lines = spread_lines("x", ranks, values, lambda v: f"{v:.1f} u", groups)
    assert lines[0] == "x: min 9.9 u (rank 2), median 12.6 u, max 20.2 u (rank 6); n/a on 1 rank(s)"
    assert lines[1] == "  by pp stage: 0: 10.0 u (9.9 u to 10.1 u); 1: 19.9 u (15.0 u to 20.2 u)"
    assert re.findall(r"rank (\d+)", lines[2]) == ["5"]
    assert spread_lines("x", ranks, values, str)[1:] == []  # one group: 15 is no outlier
    assert spread_lines("x", [0, 1], [None, float("nan")], str) == ["x: n/a on every rank"]


def test_busy_grid_is_the_union_of_the_windows():
    """Shares per bin against a brute-force count on a 1-ns grid, windows overlapping."""
    rng = np.random.default_rng(3)
    rows = [{"rank": int(rng.integers(0, 3)), "start_ns": int(s), "wall_clock_ns": int(w)}
            for s, w in zip(rng.integers(0, 900, 40), rng.integers(1, 120, 40))]
    edges, share = busy_grid(rows, [0, 1, 2], bins=7)
    t0 = min(r["start_ns"] for r in rows)
    grid = np.arange(edges[-1]) + 0.5  # every ns, by its middle
    for i in range(3):
        on = np.zeros(grid.size, dtype=bool)
        for r in rows:
            if r["rank"] == i:
                on |= (grid >= r["start_ns"] - t0) & (grid < r["start_ns"] - t0
                                                      + r["wall_clock_ns"])
        want = [on[(grid >= a) & (grid < b)].sum() / (b - a) for a, b in
                zip(edges[:-1], edges[1:])]
        assert share[i] == pytest.approx(want, abs=1 / (edges[1] - edges[0]) + 1e-9)


def test_page_is_a_heatmap_with_a_drilldown(job):
    """The page draws 128 heatmap rows by stage, the slow GPU's pipeline group first in
    the drill-down; a click on another rank's row shows that rank's group."""
    root, tables = job
    out = root / "page.html"
    _run("html", str(tables), "-o", str(out))
    driver = _driver()
    try:
        driver.get(out.as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        rows = driver.execute_script(
            "var h = document.getElementById('job-timeline');"
            "return [h.data[0].type, h.data[0].y.length, h.data[0].y[0], h.data[0].y[127]]")
        assert rows == ["heatmap", 128, "stage 0 · PP0 · rank 0", "stage 3 · PP31 · rank 127"]
        shown = ("var d = document.getElementById('job-drilldown');"
                 "return Array.from(new Set(d.data.filter(t => t.visible === true)"
                 ".flatMap(t => Array.from(t.y)))).sort()")
        assert driver.execute_script(shown) == [
            f"PP13 stage {s} · rank {r}" for s, r in enumerate([13, 45, 77, 109])]
        driver.execute_script(
            "var h = document.getElementById('job-timeline');"
            "h.emit('plotly_click', {points: [{y: 'stage 1 · PP2 · rank 34'}]})")
        assert driver.execute_script(shown) == [
            f"PP2 stage {s} · rank {r}" for s, r in enumerate([2, 34, 66, 98])]
        assert driver.execute_script("return document.getElementById('job-drilldown')"
                                     ".layout.updatemenus[0].active") == 2
    finally:
        driver.quit()


def test_a_terminal_sees_progress_and_a_pipe_does_not(job):
    """Reading the ranks' tables shows a bar on a terminal's stderr, never in a pipe."""
    import os
    import shutil
    import subprocess
    import sys
    import threading

    root, tables = job
    # the report kept beside the tables by an earlier test is dropped: reading the
    # ranks is what shows the bar
    shutil.rmtree(tables / ".traceviz-cache", ignore_errors=True)
    cmd = [sys.executable, "-m", "traceviz", "report", str(tables), "-o",
           str(root / "tty" / "r.txt")]
    master, slave = os.openpty()
    seen = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=slave, timeout=300)
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert done.returncode == 0
    assert b"reading ranks" in seen and b"/128" in seen, bytes(seen[-300:])
    piped = subprocess.run(cmd, capture_output=True, timeout=300)
    assert piped.returncode == 0 and b"reading ranks" not in piped.stderr
