"""The figures answer their question at any scale: the breakdown's tables of a synthesized
job, alone (1 rank), as they are (4 ranks) and tiled to 512 ranks, give figures of bounded
size whose rank rows are the representative ranks of the values computed here, numbers
written on the bars equal to the table's, log-scaled durations, and "no data" with its
reason instead of empty axes; the pipeline page has a readable axis and table."""
from __future__ import annotations

import io
import re
import statistics
from collections import defaultdict

import matplotlib.image as mpimg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from traceviz.commands import breakdown
from traceviz.render import breakdown_figures as bf
from traceviz.render.figures import DPI
from traceviz.render.pipeline_figure import nice_step, stages_html
from traceviz.render.timeline import overlap_bars
from traceviz.synth import SynthConfig, synthesize


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, pa.Table]:
    root = tmp_path_factory.mktemp("fig_job")
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=4, layers=4, with_stack=False),
               root)
    return breakdown.run([root]).tables


def _tile(t: pa.Table, copies: int) -> pa.Table:
    """``copies`` copies of the table's ranks, renumbered, the k-th copy's times scaled by
    1 + k / copies (so ranks differ)."""
    if "rank" not in t.column_names:
        return t
    n = len(set(t.column("rank").to_pylist()))
    parts = []
    for k in range(copies):
        d = t.to_pydict()
        d["rank"] = [r + n * k for r in d["rank"]]
        for c in t.column_names:
            if c.endswith("_ns"):
                d[c] = [None if v is None else type(v)(v * (1 + k / copies)) for v in d[c]]
        parts.append(pa.table(d, schema=t.schema))
    return pa.concat_tables(parts)


def _one(t: pa.Table) -> pa.Table:
    return t.filter(pc.equal(t["rank"], 0)) if "rank" in t.column_names else t


def _size(fig) -> tuple[int, int]:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    buf.seek(0)
    h, w = mpimg.imread(buf).shape[:2]
    return w, h


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


@pytest.mark.parametrize("scale", ["1", "4", "512"])
def test_every_breakdown_figure_stays_readable(tables, scale):
    scaled = {n: (_one(t) if scale == "1" else _tile(t, 128) if scale == "512" else t)
              for n, t in tables.items()}
    figures = bf.breakdown_figures(scaled, [])
    assert {"temporal_breakdown.png", "idle_time_breakdown.png",
            "top_kernels_computation.png", "kernel_durations_computation.png"} <= set(figures)
    for name, figure in figures.items():
        fig = figure.figure()
        w, h = _size(fig)
        assert 400 <= w <= 1600 and 150 <= h <= 1400, (name, w, h)
        for ax in fig.axes:  # at most MAX_ROWS rank rows, whatever the number of ranks
            ranks = [t.get_text() for t in ax.get_yticklabels() if "rank" in t.get_text()]
            assert len(ranks) <= bf.MAX_ROWS, name


def test_many_ranks_show_the_representative_ones(tables):
    big = _tile(tables["temporal_breakdown"], 128)
    share = {r["rank"]: r["idle_ns"] / r["kernel_time_ns"] for r in big.to_pylist()
             if r["iteration"] is None}
    order = sorted(share, key=lambda r: (share[r], r))
    fig = bf.temporal(big)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert f"rank {order[0]} (min)" in labels and f"rank {order[-1]} (max)" in labels
    assert f"rank {order[round(0.5 * (len(order) - 1))]} (p50)" in labels
    assert "11 of 512 ranks" in fig.axes[0].get_xlabel()
    # every rank, in rank order, when they fit
    few = bf.representative({r: -r for r in range(bf.MAX_ROWS)})
    assert [r for r, _ in few] == list(range(bf.MAX_ROWS))


def test_top_kernel_bars_carry_the_tables_numbers(tables):
    top = tables["top_kernels"]
    rows = [r for r in top.to_pylist() if r["kernel_type"] == "COMPUTATION"]
    per_name: dict[str, int] = defaultdict(int)
    for r in rows:
        per_name[r["name"]] += r["sum_ns"]
    ranks = len({r["rank"] for r in rows})
    total = sum(per_name.values())
    first = max((n for n in per_name if n != "others"), key=per_name.get)
    expect = (f"{per_name[first] / ranks / 1e6:,.2f} ms "
              f"({100 * per_name[first] / total:.1f}%)")
    texts = [t.strip() for t in _texts(bf.top_kernels(top, "COMPUTATION"))]
    assert expect in texts
    labels = [t.get_text() for t in bf.top_kernels(top, "COMPUTATION").axes[0]
              .get_yticklabels()]
    assert len(labels) == len(set(labels)), "labels are distinct"
    assert all("<" not in lab and len(lab) <= 66 for lab in labels)


def test_durations_are_log_scaled_with_medians(tables):
    top = tables["top_kernels"]
    fig = bf.kernel_durations(top, "COMPUTATION")
    assert fig.axes[0].get_xscale() == "log"
    rows = [r for r in top.to_pylist() if r["kernel_type"] == "COMPUTATION"
            and r["name"] != "others"]
    totals: dict[str, int] = defaultdict(int)
    for r in rows:
        totals[r["name"]] += r["sum_ns"]
    first = max(totals, key=totals.get)
    med = statistics.median(r["mean_ns"] / 1e3 for r in rows if r["name"] == first)
    shown = f"median {med / 1e3:,.2f} ms" if med >= 1e3 else f"median {med:,.1f} µs"
    assert shown in _texts(fig)


def test_no_data_says_why(tables):
    empty = {n: t.slice(0, 0) for n, t in tables.items()}
    for draw, args in ((bf.temporal, ()), (bf.idle, ()), (bf.kernel_types, ()),
                       (bf.top_kernels, ("MEMORY",)), (bf.kernel_durations, ("MEMORY",))):
        table = {bf.temporal: "temporal_breakdown", bf.idle: "idle_time_breakdown",
                 bf.kernel_types: "kernel_type_breakdown"}.get(draw, "top_kernels")
        fig = draw(empty[table], *args)
        assert not fig.axes, draw.__name__  # no empty axes
        assert any(t.startswith("no data: ") for t in _texts(fig)), draw.__name__


def test_overlap_bars_name_the_iteration_when_there_are_several():
    rows = [dict(phase=p, iteration=it, microbatch=0, chunk=0, start_ns=it * 10, comp_only_ns=1,
                 overlap_ns=1, comm_only_ns=1, wall_clock_ns=4)
            for it in (3, 4) for p in ("Forward", "Backward")]
    fig = overlap_bars(rows, 0)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["it3 0", "it4 0"]
    one = overlap_bars(rows[:2], 0)
    assert [t.get_text() for t in one.axes[0].get_xticklabels()] == ["0"]


def test_pipeline_page_axis_and_table():
    assert nice_step(47.3, 10) == 5 and nice_step(0.8, 10) == 0.1 and nice_step(120, 10) == 20
    html = stages_html(pa.table({"stage": [0], "busy_ns": [2477194], "bubble_pct": [12.5],
                                 "ideal_bubble_pct": pa.array([None], pa.float64())}))
    assert "2.477" in html and "2477194" not in html and "busy (ms)" in html
    assert "n/a" in html and "overflow-x:auto" in html
    assert re.search(r"bubble \(%\)", html)


@pytest.mark.parametrize("n", [1, 16, 512])
def test_timelines_stay_readable_at_any_rank_count(n):
    """A model group's combined timeline: bounded height, at most MAX_LABELS rank labels,
    the lowest rank first."""
    from traceviz.analysis.microbatches import CATEGORIES, RankCategories
    from traceviz.render.timeline import MAX_LABELS, timeline

    rng = np.random.default_rng(n)
    ranks = []
    for r in range(n):
        ts = np.sort(rng.integers(0, 10**8, 200))
        ranks.append(RankCategories(r, ts, ts + 10**5, rng.integers(0, len(CATEGORIES), 200),
                                    np.zeros(200, np.int64)))
    fig = timeline([("", ranks)], "all ranks combined")
    w, h = _size(fig)
    assert h <= 1700 and w <= 1600, (w, h)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert 1 <= len(labels) <= MAX_LABELS and labels[-1] == "rank 0"


def test_rank_figures_policy():
    """auto: every rank up to RANK_FIGURES ranks, beyond them the representative ranks
    by the idle time of their micro-batch steps (least and most idle included)."""
    from traceviz.render.aggregation_files import RANK_FIGURES, figure_ranks

    n = RANK_FIGURES + 36
    idle = {r: (r * 37) % n for r in range(n)}  # a permutation: one rank per value
    mb = pa.table({"rank": [r for r in range(n) for _ in range(2)],
                   "idle_ns": [idle[r] for r in range(n) for _ in range(2)]})
    auto = figure_ranks(mb, list(range(n)), "auto")
    order = sorted(idle, key=idle.get)
    assert order[0] in auto and order[-1] in auto and len(auto) <= bf.MAX_ROWS
    assert figure_ranks(mb, list(range(n)), "all") == set(range(n))
    assert figure_ranks(mb, list(range(n)), "none") == set()
    few = mb.filter(pc.less(mb["rank"], 8))
    assert figure_ranks(few, list(range(8)), "auto") == set(range(8))


def test_aggregate_draws_the_groups_of_the_ranks_it_draws(tmp_path, monkeypatch):
    """Beyond the rank limit, the PP-group and model-replica figures are those of the
    ranks drawn, and a note says how many ranks were drawn."""
    from traceviz.commands import aggregate
    from traceviz.render import aggregation_files

    monkeypatch.setattr(aggregation_files, "RANK_FIGURES", 2)
    monkeypatch.setattr(bf, "MAX_ROWS", 3)
    synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    res = aggregate.run(tmp_path / "job", tmp_path / "out")  # one folder: paths in it
    drawn = {int(n[5:9]) for n in res.figures if n.startswith("rank_")}
    assert 0 < len(drawn) < 8
    assert any(f"figures for {len(drawn)} of 8 ranks" in note for note in res.notes)
    for name in res.figures:
        if name.startswith("PP_group_"):
            ranks = {int(x) for x in name.split("_ranks_")[1].split("_")[:-1]}
            assert ranks & drawn, name
    assert res.tables["microbatches"].num_rows == 8 * 2 * 2  # tables keep every rank


def test_many_figures_are_drawn_in_workers_like_here(tmp_path):
    """From PARALLEL_FIGURES figures on they are drawn in worker processes: the same PNG
    bytes as drawn in this process, every file there, none left half-written."""
    from traceviz.render.figures import Figure, no_data
    from traceviz.table.result import PARALLEL_FIGURES, save_all

    figures = {f"f{i:02d}.png": Figure(no_data, f"figure {i}", f"reason {i}")
               for i in range(PARALLEL_FIGURES)}
    paths = save_all(figures, tmp_path / "par")
    assert [p.name for p in paths] == sorted(figures)
    for name, figure in figures.items():
        assert (tmp_path / "par" / name).read_bytes() == figure.png(), name
    assert sorted(p.name for p in (tmp_path / "par").iterdir()) == sorted(figures)


def test_breakdown_shares_as_written_on_the_figures():
    """Legends and bar labels: whole / one-decimal percents from 1 % up, two digits
    below, "<0.01%" for what is there but smaller (not 8.8e-05%), "0%" for nothing."""
    import numpy as np

    from traceviz.render.breakdown_figures import _mean_pct, _segment_pct, _share

    assert [_segment_pct(v) for v in (99.8, 1.0, 0.09, 0.00088, 0.0)] == [
        "100%", "1%", "0.09%", "<0.01%", "0%"]
    assert _mean_pct(np.array([99.8])) == "mean 99.8%"
    assert _mean_pct(np.array([8.8e-05])) == "mean <0.01%"
    assert _mean_pct(np.array([0.25, 0.25])) == "mean 0.25%"
    # a kernel's share after its bar (top kernels, kernel types): 0.004 % is not "0.0%"
    assert [_share(v) for v in (55.14, 1.0, 0.004, 0.0)] == ["55.1%", "1.0%", "<0.01%", "0%"]
