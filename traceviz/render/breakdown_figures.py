"""Figures of ``traceviz breakdown``: temporal breakdown per rank, kernel-type shares,
idle time per stream. Each is written atomically as PNG."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..output import atomic_path

PARTS = (("compute_only_ns", "compute only"),
         ("compute_overlapped_comm_ns", "compute overlapped with comm"),
         ("comm_only_ns", "comm only"), ("mem_only_ns", "memory only"),
         ("other_only_ns", "other only"), ("idle_ns", "idle"))


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(plt, fig, ax, title: str, path: Path, legend: dict | None = None) -> Path:
    """Title, optional legend, write the PNG atomically, free the figure."""
    ax.set_title(title)
    if legend is not None:
        ax.legend(fontsize="small", **legend)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def temporal(table: pa.Table, path: Path) -> Path:
    """Stacked bars: share of each rank's span per part (whole selection)."""
    plt = _figure()
    rows = [r for r in table.to_pylist() if r["iteration"] == -1]
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(rows) + 2), 4))
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
    return _finish(plt, fig, ax, "Temporal breakdown", path,
                   {"loc": "upper left", "bbox_to_anchor": (1, 1)})


def kernel_types(table: pa.Table, path: Path) -> Path:
    """Pie of the COMP / COMM / MEM combinations."""
    plt = _figure()
    rows = table.to_pylist()
    fig, ax = plt.subplots(figsize=(6, 4))
    if rows:
        # slices too thin to label are named in the legend (with their share) only
        wedges, _, _ = ax.pie([r["time_ns"] for r in rows],
                              autopct=lambda pct: f"{pct:.1f}%" if pct >= 2 else "",
                              textprops={"fontsize": "small"})
        ax.legend(wedges, [f"{r['kernel_type']} ({r['percentage']:.1f}%)" for r in rows],
                  fontsize="small", loc="upper left", bbox_to_anchor=(1, 1))
    return _finish(plt, fig, ax, "Kernel time by type (all ranks)", path)


def idle(table: pa.Table, path: Path) -> Path:
    """Idle time per (rank, stream), stacked by cause."""
    plt = _figure()
    rows = table.to_pylist()
    keys = sorted({(r["rank"], r["stream"]) for r in rows})
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(keys) + 2), 4))
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
    return _finish(plt, fig, ax, "Idle time by cause", path, {})


def draw_all(tables: dict[str, pa.Table], outdir: Path) -> list[Path]:
    return [temporal(tables["temporal_breakdown"], outdir / "temporal_breakdown.png"),
            kernel_types(tables["kernel_type_breakdown"], outdir / "kernel_type_breakdown.png"),
            idle(tables["idle_time_breakdown"], outdir / "idle_time_breakdown.png")]
