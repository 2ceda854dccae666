"""Figures of ``traceviz pipeline``: measured and ideal schedules, one row per stage, a
bar per forward / backward step with its micro-batch printed on it (PNG), and the same
as a self-contained HTML page (inline SVG; hovering a bar shows its details)."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.schedule import Step
from .figures import new_figure, swatch

COLOR = {"F": ("#82AAE7", "#496CCE"), "B": ("#F7A6BF", "#C03F67")}  # chunk 0, chunk 1+
MARK_COLOR = {"P2P": "#2E8B57", "optimizer": "#8C8C8C"}


@dataclass
class Mark:
    """Something drawn over a stage's row of the measured panel: a pipeline P2P kernel
    (a thin bar along the row's foot) or the optimizer step (a grey bar). ns from the
    view's origin."""

    stage: int
    kind: str
    start: int
    end: int


def _color(s: Step) -> str:
    return COLOR[s.phase][min(s.chunk, 1)]


def _label(s: Step) -> str:
    return f"{s.microbatch}" + (f".{s.chunk}" if s.chunk else "") + ("r" if s.recompute else "")


def draw(panels: list[tuple[str, list[Step]]], ranks: list[int], title: str,
         marks: Sequence[Mark] = ()):
    """Stacked panels (e.g. measured, ideal) on one time axis (ms); ``marks`` go on the
    first. A backward that re-ran its forward (recompute) is hatched, labelled ``r``."""
    pp = len(ranks)
    span = max([s.end for _, steps in panels for s in steps] + [m.end for m in marks]
               + [1])
    fig = new_figure((14, 1.0 + 0.55 * pp * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)
    for ax, (name, steps) in zip(axes[:, 0], panels):
        for s in steps:
            y = pp - 1 - s.stage
            ax.barh(y, (s.end - s.start) / 1e6, left=s.start / 1e6, height=0.8,
                    color=_color(s), edgecolor="white", linewidth=0.3,
                    hatch="///" if s.recompute else None)
            if (s.end - s.start) / span > 0.012:
                ax.text((s.start + s.end) / 2e6, y, _label(s), ha="center", va="center",
                        fontsize="x-small")
        for m in (marks if ax is axes[0, 0] else ()):
            y = pp - 1 - m.stage
            p2p = m.kind == "P2P"
            ax.barh(y - 0.4 + (0.06 if p2p else 0.4), max(m.end - m.start, 1) / 1e6,
                    left=m.start / 1e6, height=0.12 if p2p else 0.8,
                    color=MARK_COLOR[m.kind], alpha=1.0 if p2p else 0.6, linewidth=0)
        ax.set_yticks(range(pp), [f"stage {p} (rank {r})" for p, r in
                                  reversed(list(enumerate(ranks)))], fontsize="small")
        ax.set_title(name, fontsize="small", loc="left")
        ax.grid(axis="x", linestyle="--", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the group's first step")
    axes[-1, 0].set_xlim(0, span / 1e6)
    steps = [s for _, st in panels for s in st]
    kinds = {m.kind for m in marks}
    entries = [  # only what the figure shows
        (swatch(COLOR["F"][0]), "forward", any(s.phase == "F" and not s.chunk for s in steps)),
        (swatch(COLOR["F"][1]), "forward (chunk > 0)",
         any(s.phase == "F" and s.chunk for s in steps)),
        (swatch(COLOR["B"][0]), "backward", any(s.phase == "B" and not s.chunk for s in steps)),
        (swatch(COLOR["B"][1]), "backward (chunk > 0)",
         any(s.phase == "B" and s.chunk for s in steps)),
        (swatch(MARK_COLOR["P2P"]), "pipeline P2P", "P2P" in kinds),
        (swatch(MARK_COLOR["optimizer"]), "optimizer", "optimizer" in kinds),
        (swatch(COLOR["B"][0], hatch="///"), "backward with recompute (r)",
         any(s.recompute for s in steps))]
    shown = [(h, label) for h, label, present in entries if present]
    fig.legend([h for h, _ in shown], [label for _, label in shown],
               loc="outside lower center", ncols=len(shown) or 1, fontsize="small",
               frameon=False)
    fig.suptitle(title, fontweight="bold")
    return fig


def page(panels: list[tuple[str, list[Step]]], ranks: list[int], title: str,
         table_html: str = "", marks: Sequence[Mark] = ()) -> str:
    """One HTML document, no script and no network: SVG bars with hover titles."""
    pp = len(ranks)
    span = max([s.end for _, steps in panels for s in steps] + [m.end for m in marks]
               + [1])
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
            what = ("forward" if s.phase == "F" else "backward"
                    + (" with recompute" if s.recompute else ""))
            tip = (f"stage {s.stage}, micro-batch {s.microbatch}, chunk {s.chunk}, {what}: "
                   f"{(s.end - s.start) / 1e6:.3f} ms at {s.start / 1e6:.3f} ms")
            parts.append(f"<g><title>{html.escape(tip)}</title><rect x='{x:.1f}' y='{y}' "
                         f"width='{w:.1f}' height='{row - 6}' fill='{_color(s)}'/>"
                         + (f"<text x='{x + w / 2:.1f}' y='{y + 14}' font-size='10' "
                            f"text-anchor='middle'>{_label(s)}</text>" if w > 14 else "")
                         + "</g>")
        for m in (marks if name == panels[0][0] else ()):
            x = left + width * m.start / span
            w = max(width * (m.end - m.start) / span, 1.0)
            p2p = m.kind == "P2P"
            y = m.stage * row + (row - 8 if p2p else 3)
            tip = f"stage {m.stage}, {m.kind}: {(m.end - m.start) / 1e6:.3f} ms"
            parts.append(f"<g><title>{html.escape(tip)}</title><rect x='{x:.1f}' y='{y}' "
                         f"width='{w:.1f}' height='{4 if p2p else row - 6}' "
                         f"fill='{MARK_COLOR[m.kind]}' fill-opacity='{1 if p2p else 0.6}'/>"
                         "</g>")
        step = nice_step(span / 1e6, 10)
        for k in range(int(span / 1e6 / step) + 1):
            x = left + width * k * step * 1e6 / span
            parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='0' y2='{h - 18}' "
                         "stroke='#ddd' stroke-width='1'/>"
                         f"<text x='{x:.1f}' y='{h - 5}' font-size='11' text-anchor='middle'>"
                         f"{k * step:g} ms</text>")
        parts.append("</svg>")
    parts.append(table_html + "</body></html>")
    return "\n".join(parts)


def gap_text(gap: dict) -> str:
    """One largest gap as a line: its size and what caused it."""
    return f"{gap['ns'] / 1e6:.3f} ms: {gap['what']}"


def nice_step(span: float, ticks: int) -> float:
    """A round tick step (1, 2 or 5 x 10^k) giving at most about ``ticks`` ticks over
    ``span`` (> 0)."""
    raw = max(span, 1e-9) / ticks
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw)


def _cell(name: str, v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "<td>n/a</td>"
    if name.endswith("_ns"):
        return f"<td>{v / 1e6:,.3f}</td>"
    if isinstance(v, float):
        return f"<td>{v:,.2f}</td>"
    return f"<td>{html.escape(str(v))}</td>"


def _header(name: str) -> str:
    text = name[:-3] + " (ms)" if name.endswith("_ns") else name.replace("_pct", " (%)")
    return f"<th>{html.escape(text.replace('_', ' '))}</th>"


def stages_html(table) -> str:
    """The per-stage table (a ``pyarrow.Table``) as HTML: ns columns in ms, unknown n/a,
    scrolling sideways inside the page when wider than it."""
    head = "".join(_header(k) for k in table.column_names)
    body = "".join("<tr>" + "".join(_cell(k, v) for k, v in r.items()) + "</tr>"
                   for r in table.to_pylist())
    return ("<h2>Per stage</h2><div style='overflow-x:auto;max-width:100%'>"
            f"<table style='font-size:12px'><tr>{head}</tr>{body}</table></div>")


def gaps_html(gaps: list[dict]) -> str:
    """The largest gaps as an HTML list (empty without gaps)."""
    items = "".join(f"<li>{html.escape(gap_text(g))}</li>" for g in gaps)
    return f"<h2>Largest gaps against the ideal schedule</h2><ul>{items}</ul>" if gaps else ""
