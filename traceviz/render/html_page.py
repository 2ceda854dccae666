"""The HTML report: one self-contained page (inline CSS, figures as data: URIs, no
script, no network) with the job summary, per-rank overlap, the pipeline view, top
kernels, collectives and stragglers. Ranks, groups and stages link to each other by
anchors (``#rank-R``, ``#group-G``). It draws what the report, the breakdown and the
pipeline view computed; it computes nothing."""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass

import pyarrow as pa

from .pipeline_figure import gap_text
from .report_text import iterations_text

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


def image(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return f"<img alt='{esc(alt)}' src='data:image/png;base64,{data}'>"


@dataclass
class PipelineSection:
    """What the page shows of the pipeline view: its stage and gap tables (every PP group;
    the page shows the first) and the first group's figure (PNG bytes, None: none)."""

    stages: pa.Table
    gaps: pa.Table
    figure: bytes | None


MB = 1e6


def _summary(rep: dict) -> str:
    c, t = rep["configuration"], rep["throughput"]["mean"]
    kpis = [("iteration time", fmt(t["time_ms"], unit=" ms")),
            ("tokens/s", fmt(t["tokens_per_s"], 0)),
            ("TFLOP/s per GPU", fmt(t["tflops_per_gpu"])), ("MFU", fmt(t["mfu_pct"], unit=" %")),
            ("comm-compute overlap", fmt(rep["overlap"]["average_pct"], unit=" %"))]
    par = c["parallelism"] or c["config_parallelism"] or {}
    rows = [["GPUs traced / world", f"{c['gpus']} / {c['world_size']}"],
            ["parallelism", esc(", ".join(f"{k} {v}" for k, v in par.items()) or "unknown")],
            ["device", esc(c["device"] or "n/a")], ["model", esc(c["model"] or "n/a")],
            ["global batch, sequence", f"{fmt(c['global_batch_size'])}, {fmt(c['seq_len'])}"],
            ["iterations", esc(iterations_text(c["iterations"]))]]
    notes = "".join(f"<li>left out: {esc(n)}</li>" for n in rep.get("failed") or [])
    notes += "".join(f"<li>{esc(n)}</li>" for n in rep["notes"])
    return ("".join(f"<div class='kpi'>{k}<b>{v}</b></div>" for k, v in kpis)
            + table(None, rows) + (f"<ul class='note'>{notes}</ul>" if notes else ""))


def _overlap(rep: dict, temporal, figure: bytes | None) -> str:
    shares = {r["rank"]: r for r in temporal if r["iteration"] is None}  # whole trace
    rows, ids = [], []
    for r in rep["overlap"]["per_rank"]:
        s = shares.get(r["rank"], {})
        rows.append([f"rank {r['rank']}", fmt(r["comp_ms"]), fmt(r["comm_ms"]),
                     fmt(r["overlap_pct"]), fmt(s.get("idle_pct"))])
        ids.append(f"rank-{r['rank']}")
    return (table(["rank", "compute ms", "comm ms", "comm hidden behind compute %",
                   "idle % of span"], rows, ids)
            + (image(figure, "temporal breakdown per rank") if figure else ""))


def _pipeline(pipeline: PipelineSection | None, why: str) -> str:
    if pipeline is None:
        return f"<p class='note'>{esc(why)}</p>"
    stages = pipeline.stages.to_pylist()
    rows = [[f"stage {s['stage']}", rank_link(s["rank"]), fmt(s["busy_ns"] / MB),
             fmt(s["bubble_pct"]), fmt(s["iteration_bubble_pct"]), fmt(s["ideal_bubble_pct"]),
             f"{s['warmup_steps']} / {s['steady_pairs']} / {s['cooldown_steps']}",
             "critical" if s["critical"] else ""] for s in stages if s["pp_group"] ==
            stages[0]["pp_group"]]
    gaps = "".join(f"<li>{esc(gap_text(g))}</li>" for g in pipeline.gaps.to_pylist()
                   if g["pp_group"] == stages[0]["pp_group"])
    return ((image(pipeline.figure, "pipeline schedule, measured and ideal")
             if pipeline.figure else "")
            + table(["stage", "rank", "busy ms", "bubble %", "bubble % of iteration",
                     "ideal bubble %", "warm-up / steady / cool-down", ""], rows)
            + (f"<h3>Largest gaps against the ideal schedule</h3><ul>{gaps}</ul>"
               if gaps else ""))


def _kernels(top, figures: list[tuple[str, bytes]]) -> str:
    first = min((r["rank"] for r in top), default=None)
    rows = [[esc(r["name"][:90]), esc(r["kernel_type"]), fmt(r["sum_ns"] / 1e3),
             str(r["count"]), fmt(r["mean_ns"] / 1e3)]
            for r in sorted((r for r in top if r["rank"] == first),
                            key=lambda r: -r["sum_ns"])]
    figs = "".join(image(png, name) for name, png in figures)
    return (f"<p class='note'>Heaviest kernels of rank {first}, per kernel type.</p>"
            + table(["kernel", "type", "total µs", "count", "mean µs"], rows) + figs)


def _gb(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 1e9


def _collectives(rep: dict) -> str:
    def rows_of(items, link):
        return [[link(r["name"]), str(r["count"]), fmt(_gb(r["bytes"])), fmt(r["time_ms"]),
                 fmt(r["busbw_gbps"]["median"]), fmt(r["busbw_gbps"]["p95"]),
                 fmt(r.get("share_of_iteration_pct")), fmt(r.get("hidden_pct"))]
                for r in items]
    head = ["", "kernels", "GB", "kernel ms", "median busbw GB/s", "p95 busbw GB/s",
            "share of iteration %", "hidden behind compute %"]
    return ("<h3>By parallel group</h3>" + table(head, rows_of(rep["network"]["by_group"],
                                                              group_link))
            + "<h3>By collective</h3>" + table(head, rows_of(rep["network"]["by_collective"],
                                                            esc))
            + "<p class='note'>busbw: nccl-tests' bus bandwidth with each call's own group "
              "size, from kernel time.</p>")


def _stragglers(rep: dict) -> str:
    x = rep["cross_rank"]
    if x is None:
        return "<p class='note'>n/a: one rank traced.</p>"
    parts = []
    for g in x["by_group"]:
        s = g["stragglers"]
        rows = [[rank_link(r["rank"]), str(r["times_last"]), str(r["calls"]),
                 fmt(r["delay_ms"]), fmt(r["mean_delay_ms"], 3)] for r in s]
        parts.append(
            f"<h3 id='group-{esc(g['group'])}'>{esc(g['group'])}: {g['calls']} calls</h3>"
            f"<p>arrival skew median {fmt(g['skew_ms']['median'], 3)} ms, p95 "
            f"{fmt(g['skew_ms']['p95'], 3)} ms; busbw from transfer time "
            f"{fmt(g['busbw_transfer_gbps']['median'])} GB/s vs from kernel time "
            f"{fmt(g['busbw_kernel_gbps']['median'])} GB/s (medians)</p>"
            + (table(["rank", "arrived last", "of calls", "held others up ms",
                      "per call ms"], rows) if rows else ""))
    slow = [[group_link(s["group"]), esc(s["collective"] or "?"), str(s["number"]),
             esc(s["process_group"] or "?"), fmt(s["span_ms"], 3), fmt(s["skew_ms"], 3),
             fmt(s["transfer_ms"], 3), rank_link(s["last_rank"])] for s in x["slowest_calls"]]
    return ("".join(parts) + "<h3>Slowest calls</h3>"
            + table(["group", "collective", "call", "process group", "ms", "skew ms",
                     "transfer ms", "last to arrive"], slow))


def report_page(title: str, rep: dict, tables: dict[str, pa.Table],
                kernel_figures: list[tuple[str, bytes]], overlap_figure: bytes | None,
                pipeline: PipelineSection | None, why: str) -> str:
    """The whole page from the report dict, the breakdown's tables and figures (PNG), and
    the pipeline view (None: ``why`` there is none)."""
    return page(title, {
        "summary": _summary(rep),
        "overlap": _overlap(rep, tables["temporal_breakdown"].to_pylist(), overlap_figure),
        "pipeline": _pipeline(pipeline, why),
        "kernels": _kernels(tables["top_kernels"].to_pylist(), kernel_figures),
        "collectives": _collectives(rep),
        "stragglers": _stragglers(rep)})


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
