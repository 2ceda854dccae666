"""``traceviz html``: one self-contained HTML page (inline CSS, figures as data: URIs,
no script, no network) with the job summary, per-rank overlap, the pipeline view, top
kernels, collectives and stragglers. Ranks, groups and stages link to each other by
anchors (``#rank-R``, ``#group-G``)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{position:sticky;top:0;background:#1f3b57;padding:8px 24px;z-index:1}
nav a{color:#fff;margin-right:18px;text-decoration:none;font-weight:600}
main{padding:8px 24px 40px}
h1{margin:16px 0 4px}h2{border-bottom:2px solid #1f3b57;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#eef2f6}td.l,th.l{text-align:left}
tr:target{background:#fff3b0}
img{max-width:100%;border:1px solid #ddd;margin:6px 0}
.kpi{display:inline-block;margin:6px 18px 6px 0;padding:8px 14px;background:#eef2f6;
     border-radius:6px}.kpi b{display:block;font-size:20px}
.note{color:#555;font-size:13px}
"""
SECTIONS = (("summary", "Summary"), ("overlap", "Overlap per rank"),
            ("pipeline", "Pipeline"), ("kernels", "Top kernels"),
            ("collectives", "Collectives"), ("stragglers", "Stragglers"))


def esc(value) -> str:
    return html.escape(str(value))


def fmt(value, digits: int = 2, unit: str = "") -> str:
    """A number for a cell (``unit`` after it), "n/a" for None."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return esc(value) + unit


def rank_link(rank) -> str:
    return f"<a href='#rank-{int(rank)}'>rank {int(rank)}</a>"


def group_link(group) -> str:
    return f"<a href='#group-{esc(group)}'>{esc(group)}</a>"


def table(head: list[str] | None, rows: list[list[str]],
          row_ids: list[str] | None = None) -> str:
    """An HTML table (no header row when ``head`` is None); cells are HTML already
    (escape text with :func:`esc`); the first column is left-aligned."""
    th = "".join(f"<th class='{'l' if i == 0 else ''}'>{h}</th>" for i, h in
                 enumerate(head or []))
    body = []
    for k, row in enumerate(rows):
        rid = f" id='{row_ids[k]}'" if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td class='{'l' if i == 0 else ''}'>{c}</td>"
                                           for i, c in enumerate(row)) + "</tr>")
    return f"<table>{f'<tr>{th}</tr>' if head else ''}{''.join(body)}</table>"


def image(path: Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<img alt='{esc(alt)}' src='data:image/png;base64,{data}'>"


def page(title: str, sections: dict[str, str]) -> str:
    """The whole document: a navigation bar and one ``<section>`` per entry of
    :data:`SECTIONS` (its HTML from ``sections``)."""
    nav = "".join(f"<a href='#{key}'>{name}</a>" for key, name in SECTIONS)
    body = "".join(f"<section id='{key}'><h2>{name}</h2>{sections.get(key, '')}</section>"
                   for key, name in SECTIONS)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<link rel='icon' href='data:,'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<nav>{nav}</nav><main><h1>{esc(title)}</h1>{body}</main></body></html>")
