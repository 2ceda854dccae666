"""Figures of the breakdown: temporal breakdown per rank, kernel-type shares, idle time
per stream, top kernels and their durations. Each function returns a matplotlib figure
(see :mod:`.figures`)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from matplotlib import colormaps

from .figures import Figure, new_figure, swatch

PARTS = (("compute_only_ns", "compute only"),
         ("compute_overlapped_comm_ns", "compute overlapped with comm"),
         ("comm_only_ns", "comm only"), ("mem_only_ns", "memory only"),
         ("other_only_ns", "other only"), ("idle_ns", "idle"))


def _finish(fig, ax, title: str, legend: dict | None = None):
    """Title and optional legend."""
    ax.set_title(title)
    if legend is not None:
        ax.legend(fontsize="small", **legend)
    return fig


def temporal(table: pa.Table):
    """Stacked bars: share of each rank's span per part (whole selection)."""
    rows = [r for r in table.to_pylist() if r["iteration"] is None]  # whole trace
    fig = new_figure((max(4, 0.5 * len(rows) + 2), 4))
    ax = fig.subplots()
    bottom = np.zeros(len(rows))
    x = np.arange(len(rows))
    for col, label in PARTS:
        share = np.array([100 * r[col] / r["kernel_time_ns"] if r["kernel_time_ns"] else 0
                          for r in rows])
        ax.bar(x, share, bottom=bottom, label=label)
        bottom += share
    ax.set_xticks(x, [str(r["rank"]) for r in rows])
    ax.set_xlabel("rank")
    ax.set_ylabel("% of GPU span")
    return _finish(fig, ax, "Temporal breakdown",
                   {"loc": "upper left", "bbox_to_anchor": (1, 1)})


def kernel_types(table: pa.Table):
    """Pie of the COMP / COMM / MEM combinations."""
    rows = table.to_pylist()
    fig = new_figure((6, 4))
    ax = fig.subplots()
    if rows:
        # slices too thin to label are named in the legend (with their share) only
        wedges, _, _ = ax.pie([r["time_ns"] for r in rows],
                              autopct=lambda pct: f"{pct:.1f}%" if pct >= 2 else "",
                              textprops={"fontsize": "small"})
        ax.legend(wedges, [f"{r['kernel_type']} ({r['percentage']:.1f}%)" for r in rows],
                  fontsize="small", loc="upper left", bbox_to_anchor=(1, 1))
    return _finish(fig, ax, "Kernel time by type (all ranks)")


def idle(table: pa.Table):
    """Idle time per (rank, stream), stacked by cause."""
    rows = table.to_pylist()
    keys = sorted({(r["rank"], r["stream"]) for r in rows})
    fig = new_figure((max(4, 0.5 * len(keys) + 2), 4))
    ax = fig.subplots()
    x = np.arange(len(keys))
    bottom = np.zeros(len(keys))
    for cat in ("host_wait", "kernel_wait", "other"):
        v = {(r["rank"], r["stream"]): r["idle_ns"] / 1e6 for r in rows
             if r["idle_category"] == cat}
        h = np.array([v.get(k, 0.0) for k in keys])
        ax.bar(x, h, bottom=bottom, label=cat)
        bottom += h
    ax.set_xticks(x, [f"{r}/{s}" for r, s in keys], rotation=90, fontsize="small")
    ax.set_xlabel("rank / stream")
    ax.set_ylabel("idle ms")
    return _finish(fig, ax, "Idle time by cause", {})


MAX_PIES = 16  # ranks drawn per kernel type in the top-kernel pies


def top_kernel_pies(table: pa.Table, kernel_type: str):
    """Per rank (the first ``MAX_PIES``), a pie of the top kernels of one type; one
    legend, colors fixed per kernel name across the pies."""
    rows = [r for r in table.to_pylist() if r["kernel_type"] == kernel_type]
    ranks = sorted({r["rank"] for r in rows})[:MAX_PIES]
    names = sorted({r["name"] for r in rows if r["rank"] in ranks},
                   key=lambda n: (n == "others", n))
    colors = dict(zip(names, colormaps["tab20"](np.linspace(0, 1, max(len(names), 1)))))
    cols = min(4, len(ranks))
    nrows = -(-len(ranks) // cols)
    fig = new_figure((max(3 * cols, 8), 3 * nrows + 0.18 * len(names) + 0.5),
                     layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, rank in zip(axes.flat, ranks):
        mine = [r for r in rows if r["rank"] == rank]
        ax.pie([r["sum_ns"] for r in mine], colors=[colors[r["name"]] for r in mine])
        ax.set_title(f"rank {rank}", fontsize="small")
    handles = [swatch(colors[n]) for n in names]
    fig.legend(handles, [n if len(n) <= 70 else n[:67] + "..." for n in names],
               fontsize="x-small", loc="outside lower center", ncols=1, frameon=False)
    fig.suptitle(f"Top {kernel_type} kernels per rank"
                 + (f" (first {MAX_PIES} ranks)" if len(ranks) < len({r['rank'] for r in rows})
                    else ""))
    return fig


def kernel_durations(table: pa.Table, kernel_type: str):
    """For each named top kernel of one type (up to 10, by total time over ranks): per
    rank its mean duration, error bars down to the min and up to the max."""
    rows = [r for r in table.to_pylist()
            if r["kernel_type"] == kernel_type and r["name"] != "others"]
    total: dict[str, int] = {}
    for r in rows:
        total[r["name"]] = total.get(r["name"], 0) + r["sum_ns"]
    names = sorted(total, key=lambda n: -total[n])[:10]
    fig = new_figure((8, 1.6 * len(names) + 0.8), layout="constrained")
    axes = fig.subplots(len(names), 1, squeeze=False, sharex=True)
    for ax, name in zip(axes[:, 0], names):
        mine = sorted((r for r in rows if r["name"] == name), key=lambda r: r["rank"])
        x = np.array([r["rank"] for r in mine])
        mean = np.array([r["mean_ns"] for r in mine]) / 1e3
        err = np.array([[m - r["min_ns"] / 1e3 for m, r in zip(mean, mine)],
                        [r["max_ns"] / 1e3 - m for m, r in zip(mean, mine)]])
        ax.bar(x, mean, yerr=err, capsize=2, width=0.8)
        ax.set_ylabel("µs", fontsize="small")
        ax.set_title(name if len(name) <= 90 else name[:87] + "...", fontsize="small",
                     loc="left")
    axes[-1, 0].set_xlabel("rank")
    axes[-1, 0].xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(f"{kernel_type} kernel durations per rank (mean, min-max)")
    return fig


def breakdown_figures(tables: dict[str, pa.Table], notes: list[str]) -> dict[str, Figure]:
    """Every figure of the breakdown by file name (PNG), from its tables; a figure that
    cannot be drawn is left out with a line in ``notes``."""
    top = tables["top_kernels"]
    figures = {"temporal_breakdown.png": Figure(temporal, tables["temporal_breakdown"]),
               "idle_time_breakdown.png": Figure(idle, tables["idle_time_breakdown"])}
    types = tables["kernel_type_breakdown"]
    if any(t < 0 for t in types.column("time_ns").to_pylist()):
        notes.append("note: kernel_type_breakdown.png not drawn: some kernel types have a "
                     "negative time (HTA's µs rounding makes short activities negative; the "
                     "table has them)")
    else:
        figures["kernel_type_breakdown.png"] = Figure(kernel_types, types)
    for t in sorted(set(top.column("kernel_type").to_pylist())):
        if any(r["sum_ns"] < 0 for r in top.to_pylist() if r["kernel_type"] == t):
            notes.append(f"note: top_kernels_{t.lower()}.png not drawn: a kernel's total "
                         "time is negative (HTA's µs rounding); the table has it")
        else:
            figures[f"top_kernels_{t.lower()}.png"] = Figure(top_kernel_pies, top, t)
        figures[f"kernel_durations_{t.lower()}.png"] = Figure(kernel_durations, top, t)
    return figures
