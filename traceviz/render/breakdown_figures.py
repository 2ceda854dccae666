"""Figures of the breakdown, each answering the question in its title and readable from
1 to 1,000+ ranks: where each rank's GPU time goes, why it does not compute, which kernels
take the time and how long one call of each takes. Beyond :data:`MAX_ROWS` ranks a
figure draws representative ranks (min, percentiles, max and the most extreme ones) and
says how many it leaves out. Each function returns a matplotlib figure (see
:mod:`.figures`); a figure without data says so instead of drawing empty axes."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from ..analysis.diff import short_name
from ..table.result import Drawing
from ..table.text import middle_cut
from .figures import Figure, new_figure, no_data

PARTS = (("compute_only_ns", "compute only", "#4c72b0"),
         ("compute_overlapped_comm_ns", "compute overlapped with comm", "#55a868"),
         ("comm_only_ns", "comm only", "#c44e52"), ("mem_only_ns", "memory only", "#8172b2"),
         ("other_only_ns", "other only", "#ccb974"),
         ("idle_ns", "no kernel running (HTA's idle)", "#d0d0d0"))
# the ledger's parts besides compute (traceviz.analysis.diagnose.ledger), as drawn
CAUSES = (("bubble", "pipeline bubble", "#C9B3E3"),
          ("wait_rank", "waiting for other ranks", "#A8A8A8"),
          ("transfer", "exposed transfer", "#2E5AAC"),
          ("grad_sync", "exposed gradient sync", "#76E5DF"),
          ("comm_unsplit", "comm (wait n/a)", "#B28FCE"),
          ("memory", "memory copies", "#C9B458"),
          ("cpu_bound", "CPU / launch bound", "#dd8452"),
          ("idle", "idle", "#e6e6e6"))
MAX_ROWS = 24     # ranks drawn one by one; beyond, representative ranks
TOP = 12          # kernels named per type
PERCENTILES = (5, 25, 50, 75, 95)


def representative(values: Mapping[int, float], extremes: int = 5) -> list[tuple[int, str]]:
    """The ranks to draw, as (rank, label): every rank in rank order when there are at
    most :data:`MAX_ROWS`; else, ordered by ``values``, the lowest, the ranks at
    :data:`PERCENTILES` (nearest rank) and the ``extremes`` highest, each labelled with
    what it stands for."""
    if len(values) <= MAX_ROWS:
        return [(r, f"rank {r}") for r in sorted(values)]
    ranks = sorted(values, key=lambda r: (values[r], r))
    picked: dict[int, str] = {ranks[0]: "min"}
    for p in PERCENTILES:
        picked.setdefault(ranks[round(p / 100 * (len(ranks) - 1))], f"p{p}")
    for i, r in enumerate(ranks[-extremes:][::-1]):
        picked.setdefault(r, "max" if i == 0 else f"top {i + 1}")
    return [(r, f"rank {r} ({picked[r]})") for r in ranks if r in picked]


def _ranks(n: int) -> str:
    return f"{n} rank{'s' if n != 1 else ''}"


def _scope(shown: int, total: int, by: str) -> str:
    """The subtitle saying which ranks a figure shows."""
    if shown == total:
        return _ranks(total)
    return (f"{shown} of {total} ranks: min, p5-p95 and the 5 highest by {by} "
            "(the tables have every rank)")


def _hbars(ax, labels: list[str], parts: list[tuple[str, str, np.ndarray]],
           fmt, total_fmt=None, legend_fmt=None, min_width: float = 1e-12) -> None:
    """Horizontal stacked bars, first label on top: each part's value written inside
    its segment when it is wide enough, the total (``total_fmt``) after the bar; only
    parts with a value somewhere are drawn, each named in the legend with
    ``legend_fmt(values)`` (so a part too thin to see still says how much it is). The
    axis spans the longest bar, at least ``min_width`` (a negligible total looks it)."""
    y = np.arange(len(labels))[::-1]
    left = np.zeros(len(labels))
    width = max(float(np.sum([p[2] for p in parts], axis=0).max()) if parts else 0.0,
                min_width)
    for label, color, values in parts:
        if not np.any(values > 0):
            continue
        ax.barh(y, values, left=left, color=color, height=0.75,
                label=f"{label} ({legend_fmt(values)})" if legend_fmt else label)
        for yi, v, x0 in zip(y, values, left):
            if v >= 0.07 * width:
                ax.text(x0 + v / 2, yi, fmt(v), ha="center", va="center", fontsize="x-small")
        left = left + values
    if total_fmt:
        for yi, v in zip(y, left):
            ax.text(v + 0.01 * width, yi, total_fmt(v), va="center", fontsize="x-small")
        ax.set_xlim(0, width * 1.18)
    ax.set_yticks(y, labels, fontsize="small")


def _small_pct(value: float) -> str:
    """A share below 1 %: two significant digits down to 0.01 %, "<0.01%" below (a thin
    part still says it is there, never in scientific notation: 8.8e-05%), "0%" for none."""
    if value >= 0.01:
        return f"{value:.2g}%"
    return "<0.01%" if value > 0 else "0%"


def _share(value: float) -> str:
    """A share written after a bar: one decimal from 1 % up, :func:`_small_pct` below (a
    kernel of 0.004 % never reads 0.0 %)."""
    return f"{value:.1f}%" if value >= 1 else _small_pct(value)


def _segment_pct(value: float) -> str:
    """A share written inside its bar segment: whole percents, :func:`_small_pct` below
    1 % (a bar of 0.09 % never reads 0 %)."""
    return f"{value:.0f}%" if value >= 1 else _small_pct(value)


def _mean_pct(values: np.ndarray) -> str:
    """A legend's mean share: one decimal from 1 % up, :func:`_small_pct` below (a thin
    part still says how much it is; 99.8 % never reads 1e+02 %)."""
    return f"mean {_share(float(np.mean(values)))}"


def _legend_below(fig, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(handles)),
                   fontsize="small", frameon=False)


def _height(rows: int) -> float:
    return 1.6 + 0.3 * rows


def temporal(table: pa.Table):
    """Stacked bars: share of each rank's GPU span per part (whole trace)."""
    title = "Where does each rank's GPU time go? (% of its GPU span)"
    rows = {r["rank"]: r for r in table.to_pylist()
            if r["iteration"] is None and r["kernel_time_ns"]}
    if not rows:
        return no_data(title, "no rank has GPU activities")
    pick = representative({k: r["idle_ns"] / r["kernel_time_ns"] for k, r in rows.items()})
    fig = new_figure((10, _height(len(pick))), layout="constrained")
    ax = fig.subplots()
    parts = [(label, color, np.array([100 * rows[r][col] / rows[r]["kernel_time_ns"]
                                      for r, _ in pick]))
             for col, label, color in PARTS]
    _hbars(ax, [lab for _, lab in pick], parts, _segment_pct,
           legend_fmt=_mean_pct)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the GPU span (first to last kernel, or its steps' windows where wider); "
                  + _scope(len(pick), len(rows), "share with no kernel running"), wrap=True)
    ax.set_title(title, loc="left")
    _legend_below(fig, ax)
    return fig


def kernel_types(table: pa.Table):
    """Shares of kernel time by the combination of kinds running at once."""
    title = "What runs on the GPUs, alone or together? (all ranks)"
    rows = [r for r in table.to_pylist() if r["time_ns"] > 0]
    if not rows:
        return no_data(title, "no GPU kernel time")
    rows.sort(key=lambda r: r["time_ns"])
    fig = new_figure((9, _height(len(rows))), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))
    ms = np.array([r["time_ns"] for r in rows]) / 1e6
    ax.barh(y, ms, color="#4c72b0", height=0.7)
    for yi, v, r in zip(y, ms, rows):
        ax.text(v, yi, f" {v:,.1f} ms ({_share(r['percentage'])})", va="center",
                fontsize="x-small")
    ax.set_xlim(0, ms.max() * 1.3)
    ax.set_yticks(y, [r["kernel_type"] for r in rows], fontsize="small")
    ax.set_xlabel("ms, summed over ranks")
    ax.set_title(title, loc="left")
    return fig


def idle(table: pa.Table):
    """The time each rank's GPU does not compute, by cause, as % of its iterations (the
    ledger's parts besides compute: they add up with compute to the whole span)."""
    title = "Where does each rank's GPU time go besides compute? (% of its iterations)"
    rows = [r for r in table.to_pylist() if r["iteration"] is None and r["ns"] > 0]
    if not rows:
        return no_data(title, "the GPUs compute all the time (or there is no activity)")
    share: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        key = "transfer" if r["cause"].startswith("transfer_") else r["cause"]
        share[r["rank"]][key] += r["pct_of_span"] or 0.0
    pick = representative({r: sum(v.values()) for r, v in share.items()})
    fig = new_figure((11, _height(len(pick))), layout="constrained")
    ax = fig.subplots()
    _hbars(ax, [lab for _, lab in pick],
           [(label, color, np.array([share[r].get(key, 0.0) for r, _ in pick]))
            for key, label, color in CAUSES], _segment_pct,
           lambda v: f"{v:.1f} %" if v >= 1 else _small_pct(v), _mean_pct, min_width=1.0)
    ax.set_xlabel("% of the rank's iterations (ProfilerStep to its last kernel); "
                  + _scope(len(pick), len(share), "time without compute"), wrap=True)
    ax.set_title(title, loc="left")
    _legend_below(fig, ax)
    return fig


def _labels(names: list[str], width: int = 60) -> list[str]:
    """Readable distinct labels: templates and arguments dropped (:func:`short_name`),
    cut in the middle beyond ``width``; names that end up alike are numbered."""
    out = [middle_cut(short_name(n), width) for n in names]
    seen: dict[str, int] = defaultdict(int)
    for s in out:
        seen[s] += 1
    count: dict[str, int] = defaultdict(int)
    for i, s in enumerate(out):
        if seen[s] > 1:
            count[s] += 1
            out[i] = f"{s} [{count[s]}]"
    return out


def _per_name(rows: list[dict]) -> tuple[dict[str, dict[int, int]], int]:
    """Per kernel name, its total ns per rank; and the number of ranks."""
    sums: dict[str, dict[int, int]] = defaultdict(dict)
    for r in rows:
        sums[r["name"]][r["rank"]] = sums[r["name"]].get(r["rank"], 0) + r["sum_ns"]
    return sums, len({r["rank"] for r in rows})


def top_kernels(table: pa.Table, kernel_type: str):
    """The kernels of one type that take the most time: mean ms per rank with the
    lowest and highest rank as whiskers, the share of the type's time written on each."""
    title = f"Which {kernel_type.lower()} kernels take the time?"
    rows = [r for r in table.to_pylist() if r["kernel_type"] == kernel_type]
    if not rows:
        return no_data(title, f"no {kernel_type.lower()} kernels in these ranks")
    sums, nranks = _per_name(rows)
    named = sorted((n for n in sums if n != "others"), key=lambda n: -sum(sums[n].values()))
    top, rest = named[:TOP], named[TOP:]
    others: dict[int, int] = defaultdict(int)
    for n in rest + (["others"] if "others" in sums else []):
        for rank, ns in sums[n].items():
            others[rank] += ns
    entries = [(n, sums[n]) for n in top] + ([("others", dict(others))] if others else [])
    grand = sum(sum(v.values()) for _, v in entries)
    fig = new_figure((11, _height(len(entries))), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(entries))[::-1]
    mean = np.array([sum(v.values()) / nranks for _, v in entries]) / 1e6
    # the lowest rank: 0 when some rank has none of it
    lo = np.array([min(v.values()) if len(v) == nranks else 0 for _, v in entries]) / 1e6
    hi = np.array([max(v.values()) for _, v in entries]) / 1e6
    colors = ["#4c72b0"] * len(top) + ["#b0b0b0"] * (len(entries) - len(top))
    ax.barh(y, mean, color=colors, height=0.7)
    if nranks > 1:
        ax.errorbar(mean, y, xerr=[mean - lo, hi - mean], fmt="none", ecolor="black",
                    elinewidth=0.8, capsize=2)
    for yi, m, h, (_, v) in zip(y, mean, hi, entries):
        ms = f"{m:,.2f} ms" if m >= 0.01 else "<0.01 ms"  # present, however small
        ax.text(max(m, h), yi, f"  {ms} ({_share(100 * sum(v.values()) / grand)})",
                va="center", fontsize="x-small")
    ax.set_xlim(0, hi.max() * 1.35 if hi.max() > 0 else 1)
    folded = ("each rank's folded tail" if not rest
              else f"{len(rest)} more names + each rank's folded tail")
    labels = _labels([n for n, _ in entries[:len(top)]]) + [
        f"others ({folded})"][:len(entries) - len(top)]
    ax.set_yticks(y, labels, fontsize="x-small")
    ax.set_xlabel(f"ms per rank, mean over {_ranks(nranks)}"
                  + ("; whiskers: lowest and highest rank" if nranks > 1 else "")
                  + "; % of the type's kernel time")
    ax.set_title(title, loc="left")
    return fig


def kernel_durations(table: pa.Table, kernel_type: str):
    """For the top named kernels of one type: each rank's mean call duration (a dot per
    rank, log scale), the median over ranks written out, and the shortest to the
    longest call of any rank as a grey line."""
    title = f"How long does one call of each top {kernel_type.lower()} kernel take?"
    rows = [r for r in table.to_pylist()
            if r["kernel_type"] == kernel_type and r["name"] != "others" and r["count"] > 0]
    if not rows:
        return no_data(title, f"no named {kernel_type.lower()} kernels in these ranks")
    sums, nranks = _per_name(rows)
    names = sorted(sums, key=lambda n: -sum(sums[n].values()))[:TOP]
    fig = new_figure((11, _height(len(names))), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(names))[::-1]
    rng = np.random.default_rng(0)
    for yi, name in zip(y, names):
        mine = [r for r in rows if r["name"] == name]
        means = np.array([r["mean_ns"] for r in mine]) / 1e3
        lo, hi = min(r["min_ns"] for r in mine) / 1e3, max(r["max_ns"] for r in mine) / 1e3
        ax.plot([max(lo, 1e-3), max(hi, 1e-3)], [yi, yi], color="#b0b0b0", lw=1.5,
                solid_capstyle="butt", zorder=1)
        ax.plot([max(lo, 1e-3), max(hi, 1e-3)], [yi, yi], "|", color="#808080", ms=8)
        jitter = rng.uniform(-0.18, 0.18, len(means)) if len(means) > 1 else 0
        ax.scatter(np.maximum(means, 1e-3), yi + jitter, s=10, color="#4c72b0", zorder=2,
                   alpha=0.8 if len(means) < 64 else 0.35, linewidths=0)
        med = float(np.median(means))
        ax.plot([med, med], [yi - 0.3, yi + 0.3], color="black", lw=1.5, zorder=3)
        ax.text(max(hi, 1e-3) * 1.15, yi, f"median {_us(med)}", va="center",
                fontsize="x-small")
    ax.set_xscale("log")
    lo_all = max(min(r["min_ns"] for r in rows) / 1e3, 1e-3)
    hi_all = max(max(r["max_ns"] for r in rows) / 1e3, lo_all * 10)
    ax.set_xlim(lo_all / 1.5, hi_all * 8)
    ax.set_yticks(y, _labels(names), fontsize="x-small")
    ax.set_xlabel(f"µs per call (log scale): dot = one rank's mean ({_ranks(nranks)}), black = "
                  "median over ranks, grey = shortest to longest call", wrap=True)
    ax.set_title(title, loc="left")
    return fig


def _us(v: float) -> str:
    return f"{v / 1e3:,.2f} ms" if v >= 1e3 else f"{v:,.1f} µs"


OVERLAP_FIGURE = "temporal_breakdown.png"  # the figure a page shows as the overlap's
KERNEL_FIGURES = ("top_kernels_", "kernel_durations_")  # one per kernel type each


def kernel_figures(figures: dict[str, Drawing]) -> list[tuple[str, Drawing]]:
    """The per-kernel-type figures of :func:`breakdown_figures`, titled, in name order."""
    return [(name[:-4].replace("_", " "), fig) for name, fig in sorted(figures.items())
            if name.startswith(KERNEL_FIGURES)]


def breakdown_figures(tables: dict[str, pa.Table], notes: list[str]) -> dict[str, Drawing]:
    """Every figure of the breakdown by file name (PNG), from its tables; a figure that
    cannot be drawn is left out with a line in ``notes``."""
    top = tables["top_kernels"]
    figures: dict[str, Drawing] = {
        OVERLAP_FIGURE: Figure(temporal, tables["temporal_breakdown"]),
        "idle_time_breakdown.png": Figure(idle, tables["idle_causes"])}
    types = tables["kernel_type_breakdown"]
    if any(t < 0 for t in types.column("time_ns").to_pylist()):
        notes.append("kernel_type_breakdown.png not drawn: some kernel types have a "
                     "negative time (HTA's µs rounding makes short activities negative; the "
                     "table has them)")
    else:
        figures["kernel_type_breakdown.png"] = Figure(kernel_types, types)
    for t in sorted(set(top.column("kernel_type").to_pylist())):
        if any(r["sum_ns"] < 0 for r in top.to_pylist() if r["kernel_type"] == t):
            notes.append(f"top_kernels_{t.lower()}.png not drawn: a kernel's total "
                         "time is negative (HTA's µs rounding); the table has it")
        else:
            figures[f"{KERNEL_FIGURES[0]}{t.lower()}.png"] = Figure(top_kernels, top, t)
        figures[f"{KERNEL_FIGURES[1]}{t.lower()}.png"] = Figure(kernel_durations, top, t)
    return figures
