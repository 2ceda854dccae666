"""Figures of ``traceviz pipeline``: measured and ideal schedules, one row per stage, a
bar per forward / backward step with its micro-batch printed on it (PNG), and the same
as a self-contained HTML page (inline SVG; hovering a bar shows its details)."""
from __future__ import annotations

import html
from pathlib import Path

from ..output import atomic_path
from ..schedule import Step
from .breakdown_figures import _figure, _save

COLOR = {"F": ("#82AAE7", "#496CCE"), "B": ("#F7A6BF", "#C03F67")}  # chunk 0, chunk 1+


def _color(s: Step) -> str:
    return COLOR[s.phase][min(s.chunk, 1)]


def _label(s: Step) -> str:
    return f"{s.microbatch}" + (f".{s.chunk}" if s.chunk else "")


def draw(panels: list[tuple[str, list[Step]]], ranks: list[int], path: Path,
         title: str) -> Path:
    """Stacked panels (e.g. measured, ideal) on one time axis (ms)."""
    plt = _figure()
    pp = len(ranks)
    span = max((s.end for _, steps in panels for s in steps), default=1)
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 1.0 + 0.55 * pp * len(panels)),
                             squeeze=False, sharex=True, layout="constrained")
    for ax, (name, steps) in zip(axes[:, 0], panels):
        for s in steps:
            y = pp - 1 - s.stage
            ax.barh(y, (s.end - s.start) / 1e6, left=s.start / 1e6, height=0.8,
                    color=_color(s), edgecolor="white", linewidth=0.3)
            if (s.end - s.start) / span > 0.012:
                ax.text((s.start + s.end) / 2e6, y, _label(s), ha="center", va="center",
                        fontsize="x-small")
        ax.set_yticks(range(pp), [f"stage {p} (rank {r})" for p, r in
                                  reversed(list(enumerate(ranks)))], fontsize="small")
        ax.set_title(name, fontsize="small", loc="left")
        ax.grid(axis="x", linestyle="--", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the group's first step")
    axes[-1, 0].set_xlim(0, span / 1e6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in
               (COLOR["F"][0], COLOR["F"][1], COLOR["B"][0], COLOR["B"][1])]
    fig.legend(handles, ["forward", "forward (chunk > 0)", "backward",
                         "backward (chunk > 0)"], loc="outside lower center", ncols=4,
               fontsize="small", frameon=False)
    fig.suptitle(title, fontweight="bold")
    return _save(plt, fig, path)


def write_html(panels: list[tuple[str, list[Step]]], ranks: list[int], path: Path,
               title: str, table_html: str = "") -> Path:
    """One HTML file, no script and no network: SVG bars with hover titles."""
    pp = len(ranks)
    span = max((s.end for _, steps in panels for s in steps), default=1)
    width, row, left = 1200, 26, 150
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             "</title><style>body{font-family:sans-serif;margin:20px}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    for name, steps in panels:
        h = row * pp + 30
        parts.append(f"<h2>{html.escape(name)}</h2><svg width='{width + left + 10}' "
                     f"height='{h}' xmlns='http://www.w3.org/2000/svg'>")
        for p, r in enumerate(ranks):
            parts.append(f"<text x='0' y='{p * row + 17}' font-size='12'>stage {p} "
                         f"(rank {r})</text>")
        for s in steps:
            x = left + width * s.start / span
            w = max(width * (s.end - s.start) / span, 1.0)
            y = s.stage * row + 3
            what = "forward" if s.phase == "F" else "backward"
            tip = (f"stage {s.stage}, micro-batch {s.microbatch}, chunk {s.chunk}, {what}: "
                   f"{(s.end - s.start) / 1e6:.3f} ms at {s.start / 1e6:.3f} ms")
            parts.append(f"<g><title>{html.escape(tip)}</title><rect x='{x:.1f}' y='{y}' "
                         f"width='{w:.1f}' height='{row - 6}' fill='{_color(s)}'/>"
                         + (f"<text x='{x + w / 2:.1f}' y='{y + 14}' font-size='10' "
                            f"text-anchor='middle'>{_label(s)}</text>" if w > 14 else "")
                         + "</g>")
        parts.append(f"<text x='{left}' y='{h - 5}' font-size='11'>0 ms</text>"
                     f"<text x='{left + width}' y='{h - 5}' font-size='11' "
                     f"text-anchor='end'>{span / 1e6:.2f} ms</text></svg>")
    parts.append(table_html + "</body></html>")
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write("\n".join(parts))
    return path
