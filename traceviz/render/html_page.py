"""The HTML report: one self-contained page (inline CSS and script, plotly's JavaScript
embedded once, figures as data: URIs, no network, no server) with the job summary, a
zoomable job timeline, per-rank overlap, the pipeline view with hover, top kernels,
collectives and stragglers. Tables sort by a click on a column and long ones filter by
text; ranks, groups and stages link to each other by anchors (``#rank-R``,
``#group-G``); figures one would rather not scroll past are folded. It draws what the
report, the breakdown, the micro-batch windows and the pipeline view computed; it
computes nothing."""
from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..analysis.advice import Advice, JobDiagnosis
from ..analysis.diff import short_name
from ..analysis.hang import ranges
from ..analysis.diagnose.stragglers import NO_PEERS, NONE_FOUND
from ..analysis.diagnose.summary import Summary
from ..analysis.report_types import Report
from ..table.text import middle_cut
from .diagnosis_text import ADVICE_HEAD, STANDING_TAG
from .pipeline_figure import gap_text
from .rank_spread import LISTED
from .report_text import OVERLAP_METRICS, iterations_text, rank_summary
from .words import clock_words, saving_words

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
th{cursor:pointer;user-select:none}th[data-sort=asc]:after{content:" ▲"}
th[data-sort=desc]:after{content:" ▼"}
.scroll{max-height:430px;overflow:auto;display:inline-block;max-width:100%}
.scroll th{position:sticky;top:0}
input.filter{margin:6px 0;padding:3px 6px;width:260px}
details{margin:8px 0}summary{cursor:pointer;color:#1f3b57;font-weight:600}
.kpi{display:inline-block;margin:6px 18px 6px 0;padding:8px 14px;background:#eef2f6;
     border-radius:6px}.kpi b{display:block;font-size:20px}
.note{color:#555;font-size:13px}
.ledger{display:flex;height:30px;max-width:1100px;border:1px solid #999;margin:8px 0}
.ledger span{display:block;height:100%;overflow:hidden;font-size:11px;color:#111;
             text-align:center;line-height:30px;white-space:nowrap}
.swatch{display:inline-block;width:11px;height:11px;margin:0 4px 0 12px;
        border:1px solid #999;vertical-align:middle}
ol.causes li{margin:3px 0}
"""
# the ledger's parts on the page: label and colour (the timelines' colours where they
# draw the same thing)
LEDGER_PARTS = (("compute", "compute", "#82AAE7"), ("memory", "memory", "#C9B458"),
                ("transfer", "exposed transfer", "#2E5AAC"),
                ("grad_sync", "gradient sync", "#76E5DF"),
                ("comm_unsplit", "communication (split n/a)", "#B28FCE"),
                ("bubble", "pipeline bubble", "#E6DAF2"),
                ("wait_rank", "waiting for other ranks", "#D4D4D4"),
                ("cpu_bound", "CPU / launch bound", "#dd8452"), ("idle", "idle", "#ffffff"))
SECTIONS = (("diagnosis", "Diagnosis"), ("summary", "Summary"), ("timeline", "Timeline"),
            ("overlap", "Overlap per rank"),
            ("pipeline", "Pipeline"), ("kernels", "Top kernels"), ("model", "Op model"),
            ("memory", "Memory"), ("hang", "Hang"),
            ("collectives", "Collectives"), ("stragglers", "Stragglers"))
OPTIONAL = ("memory", "hang")  # shown where the job has them


def esc(value) -> str:
    return html.escape(str(value))


SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (t) {
  var body = t.tBodies[0];
  t.querySelectorAll('thead th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var asc = th.dataset.sort !== 'asc';
      t.querySelectorAll('thead th').forEach(function (h) { delete h.dataset.sort; });
      th.dataset.sort = asc ? 'asc' : 'desc';
      var key = function (r) {
        var text = r.children[i].textContent.trim();
        var n = parseFloat(text.replace(/,/g, ''));
        return text === 'n/a' ? null : (/^-?[0-9.,]+/.test(text) && !isNaN(n) ? n : text);
      };
      var rows = Array.from(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return (x === null) - (y === null); }
        var c = (typeof x === 'number' && typeof y === 'number') ? x - y
          : String(x).localeCompare(String(y), undefined, {numeric: true});
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
document.querySelectorAll('input.filter').forEach(function (input) {
  var body = document.getElementById(input.dataset.table).tBodies[0];
  input.addEventListener('input', function () {
    var q = input.value.toLowerCase();
    Array.from(body.rows).forEach(function (r) {
      r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
    });
  });
});
"""
FILTER_ROWS = 10   # tables longer than this get a filter box
SCROLL_ROWS = 20   # and longer than this scroll inside a box


def fmt(value, digits: int = 2, unit: str = "") -> str:
    """A number for a cell (``unit`` after it), "n/a" for None; values below 1 keep
    three significant digits (never a misleading 0.00)."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if value != 0 and abs(value) < 1:
            return f"{value:.3g}{unit}"
        return f"{value:,.{digits}f}{unit}"
    return esc(value) + unit


def duration(ms: float | None) -> str:
    """A duration in ms as text in a fitting unit (ms, µs, ns)."""
    if ms is None:
        return "n/a"
    if ms == 0 or abs(ms) >= 1:
        return f"{ms:,.2f} ms"
    return f"{ms * 1e3:,.1f} µs" if abs(ms) >= 1e-3 else f"{ms * 1e6:,.0f} ns"


def rank_link(rank) -> str:
    return f"<a href='#rank-{int(rank)}'>rank {int(rank)}</a>"


def group_link(group) -> str:
    return f"<a href='#group-{esc(group)}'>{esc(group)}</a>"


def table(head: list[str] | None, rows: list[list[str]],
          row_ids: list[str] | None = None, name: str | None = None,
          empty: str = "none") -> str:
    """An HTML table (no header row when ``head`` is None); cells are HTML already
    (escape text with :func:`esc`); the first column is left-aligned. With a header it
    sorts by a click on a column; a ``name``d table longer than :data:`FILTER_ROWS` gets
    a filter box and one longer than :data:`SCROLL_ROWS` scrolls in its box. No rows:
    the note ``empty`` instead of a header alone."""
    if not rows:
        return f"<p class='note'>{esc(empty)}</p>"
    th = "".join(f"<th class='{'l' if i == 0 else ''}'>{h}</th>" for i, h in
                 enumerate(head or []))
    body = []
    for k, row in enumerate(rows):
        rid = f" id='{row_ids[k]}'" if row_ids else ""
        body.append(f"<tr{rid}>" + "".join(f"<td class='{'l' if i == 0 else ''}'>{c}</td>"
                                           for i, c in enumerate(row)) + "</tr>")
    tid = f" id='table-{name}'" if name else ""
    html_table = (f"<table{tid} class='{'sortable' if head else ''}'>"
                  f"{f'<thead><tr>{th}</tr></thead>' if head else ''}"
                  f"<tbody>{''.join(body)}</tbody></table>")
    if name and len(rows) > FILTER_ROWS:
        html_table = (f"<div><input class='filter' data-table='table-{name}' "
                      f"placeholder='filter {len(rows)} rows…'></div>"
                      + (f"<div class='scroll'>{html_table}</div>"
                         if len(rows) > SCROLL_ROWS else html_table))
    return html_table


def folded(summary: str, content: str) -> str:
    """``content`` folded under a ``summary`` line the reader opens."""
    return f"<details><summary>{esc(summary)}</summary>{content}</details>" if content else ""


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


def _summary(rep: Report) -> str:
    c, t, mfu = rep["configuration"], rep["throughput"]["mean"], rep["throughput"]["mfu"]
    # the KPI names its source (its definition is the tooltip), or why it is n/a
    source = {"config": "config FLOPs", "trace": "traced ops' FLOPs"}.get(mfu["source"] or "",
                                                                        "n/a: hover")
    kpis = [("iteration time", fmt(t["time_ms"], unit=" ms")),
            ("tokens/s", fmt(t["tokens_per_s"], 0)),
            ("TFLOP/s per GPU", fmt(mfu["tflops_per_gpu"])),
            (f"MFU <small title='{esc(mfu['source_text'] or mfu['why'] or '')}'>"
             f"{esc(source)}</small>", fmt(mfu["mfu_pct"], unit=" %")),
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


def _timeline(plot: str | None, why: str) -> str:
    if plot is None:
        return f"<p class='note'>{esc(why)}</p>"
    return (f"{plot}<p class='note'>Each bar is one forward / backward "
            "micro-batch step window (every kernel the step launched, its P2P hand-offs "
            "excluded), on the clocks the axis names; drag to zoom, double-click to reset, "
            "hover for the step's numbers.</p>")


def _overlap(rep: Report, temporal, figure: bytes | None) -> str:
    shares = {r["rank"]: r for r in temporal if r["iteration"] is None}  # whole trace
    rows, ids = [], []
    for r in rep["overlap"]["per_rank"]:
        s = shares.get(r["rank"], {})
        rows.append([f"rank {r['rank']}", fmt(r["comp_ms"]), fmt(r["comm_ms"]),
                     fmt(r["overlap_pct"]), fmt(s.get("idle_pct"))])
        ids.append(f"rank-{r['rank']}")
    per_rank = rep["overlap"]["per_rank"]
    summary = ("" if len(per_rank) <= LISTED else
               f"<p class='note'>{len(per_rank)} ranks; outliers are compared with their "
               "pipeline stage:</p>" + _nested(rank_summary(per_rank, OVERLAP_METRICS)))
    return (summary
            + table(["rank", "compute ms", "comm ms", "comm hidden behind compute %",
                     "no kernel running, % of the GPU span (HTA's idle)"], rows, ids,
                     name="overlap", empty="no rank has kernels")
            + folded("Where each rank's GPU time goes (figure)",
                     image(figure, "temporal breakdown per rank") if figure else ""))


def _nested(lines: list[str]) -> str:
    """Summary lines as a list, the indented ones nested under the line before them."""
    out, open_sub = ["<ul>"], False
    for line in lines:
        sub = line.startswith("  ")
        if sub and not open_sub:
            out[-1] = out[-1].removesuffix("</li>") + "<ul>"
            open_sub = True
        elif not sub and open_sub:
            out.append("</ul></li>")
            open_sub = False
        out.append(f"<li>{esc(line.strip())}</li>")
    out.append("</ul></li></ul>" if open_sub else "</ul>")
    return "".join(out)


def _pipeline(pipeline: PipelineSection | None, plot: str | None, why: str) -> str:
    if pipeline is None:
        return f"<p class='note'>{esc(why)}</p>"
    stages = pipeline.stages.to_pylist()
    rows = [[f"stage {s['stage']}", rank_link(s["rank"]), fmt(s["busy_ns"] / MB),
             fmt(s["iteration_bubble_pct"]), fmt(s["schedule_idle_pct"]),
             fmt(s["ideal_schedule_idle_pct"]),
             f"{s['warmup_steps']} / {s['steady_pairs']} / {s['cooldown_steps']}",
             "critical" if s["critical"] else ""] for s in stages if s["pp_group"] ==
            stages[0]["pp_group"]]
    gaps = "".join(f"<li>{esc(gap_text(g))}</li>" for g in pipeline.gaps.to_pylist()
                   if g["pp_group"] == stages[0]["pp_group"])
    return ((plot or "")
            + table(["stage", "rank", "busy ms", "bubble % of iteration",
                     "idle % of the F/B schedule", "ideal idle %",
                     "warm-up / steady / cool-down", ""], rows,
                    name="stages")
            + (f"<h3>Largest gaps against the ideal schedule</h3><ul>{gaps}</ul>"
               if gaps else "")
            + folded("Measured against the ideal schedule (figure)",
                     image(pipeline.figure, "pipeline schedule, measured and ideal")
                     if pipeline.figure else ""))


def _kernels(top, figures: list[tuple[str, bytes]]) -> str:
    per: dict[tuple[str, str], list[int]] = {}
    for r in top:
        if r["name"] == "others":
            continue
        acc = per.setdefault((r["kernel_type"], r["name"]), [0, 0, 0])
        acc[0] += r["sum_ns"]
        acc[1] += r["count"]
        acc[2] += 1
    ranks = len({r["rank"] for r in top}) or 1
    rows = [[f"<span title='{esc(name)}'>{esc(middle_cut(short_name(name), 80))}</span>",
             esc(kind.lower()), fmt(total / MB), fmt(total / ranks / MB), str(count),
             fmt(total / count / 1e3 if count else None), str(seen)]
            for (kind, name), (total, count, seen) in sorted(per.items(),
                                                             key=lambda kv: -kv[1][0])]
    figs = "".join(image(png, name) for name, png in figures)
    return (f"<p class='note'>Each rank's heaviest kernels by type, summed over {ranks} "
            "rank(s) (hover a name for the whole of it).</p>"
            + table(["kernel", "type", "total ms", "ms per rank", "calls", "mean µs",
                     "ranks"], rows, name="kernels", empty="no kernels")
            + folded("Top kernels and call durations per type (figures)", figs))


@dataclass
class OpsSection:
    """What the op model section shows (``traceviz ops``): its header lines (not its
    MFU: the page shows one, in the summary), the op shapes and modules tables, the
    roofline and module figures (PNG)."""

    lines: list[str]
    shapes: pa.Table
    modules: pa.Table
    figures: list[tuple[str, bytes]]


@dataclass
class MemorySection:
    """What the page shows of ``traceviz memory``: its lines, its ranks' table and its
    figure (PNG)."""

    lines: list[str]
    ranks: pa.Table
    figure: bytes


def _memory(sec: MemorySection) -> str:
    gib = float(1 << 30)
    rows = [[str(r["rank"]), esc(r["stage"] if r["stage"] is not None else "n/a"),
             fmt(r["peak_bytes"] / gib if r["peak_bytes"] is not None else None, 3),
             esc(" ".join(str(v) for v in (r["peak_iteration"], r["peak_phase"],
                                           r["peak_microbatch"]) if v is not None) or "n/a"),
             fmt(r["activations_bytes"] / gib if r["activations_bytes"] is not None
                 else None, 3),
             fmt(r["before_trace_bytes"] / gib if r["before_trace_bytes"] is not None
                 else None, 3),
             fmt(r["max_reserved_bytes"] / gib if r["max_reserved_bytes"] is not None
                 else None, 3)]
            for r in sec.ranks.to_pylist()]
    return ("".join(f"<p class='note'>{esc(line.strip())}</p>" for line in sec.lines[:12])
            + table(["rank", "stage", "peak GiB", "at (iteration phase micro-batch)",
                     "activations GiB", "before the trace GiB", "max reserved GiB"], rows,
                    name="memory_ranks", empty="no rank")
            + image(sec.figure, "allocated GPU memory over time"))


@dataclass
class HangSection:
    """What the page shows of ``traceviz hang``: the verdict and every rank's wait."""

    verdict: list[str]
    ranks: pa.Table


def _listed(ranks: str | None) -> str:
    """A table's comma-separated ranks as ranges (``0-3, 8``: hundreds stay short)."""
    return ranges(int(r) for r in ranks.split(",")) if ranks else ""


def _hang(sec: HangSection) -> str:
    rows = [[str(r["rank"]), esc(r["state"]), esc(r["group_desc"] or ""),
             esc(r["seq"] if r["seq"] is not None else ""), esc(r["op"] or ""),
             esc(_listed(r["waits_for"])), esc("yes" if r["cause"] else
                                            "possibly" if r["suspect"] else "")]
            for r in sec.ranks.to_pylist()]
    return ("<ol class='causes'>" + "".join(f"<li>{esc(v)}</li>" for v in sec.verdict[:20])
            + "</ol>" + table(["rank", "state", "waits in", "seq", "op", "for", "cause"],
                              rows, name="hang", empty="no rank"))


def _model(ops: OpsSection | None, why: str) -> str:
    if ops is None:
        return f"<p class='note'>{esc(why)}</p>"
    shape_rows = [[esc(r["op"]), esc(middle_cut(r["input_dims"] or "", 60)),
                   esc(r["dtype"] or ""), esc(r["phase"] or ""), str(r["calls"]),
                   fmt(r["gpu_ns"] / MB), fmt(r["tflops"], 3), fmt(r["pct_peak_flops"], 3),
                   fmt(r["pct_peak_p10"], 3), fmt(r["pct_peak_p50"], 3)]
                  for r in ops.shapes.slice(0, 50).to_pylist()] if ops.shapes.num_rows else []
    module_rows = [[esc(middle_cut(r["module"], 80)), esc(r["phase"] or ""), esc(r["kind"]),
                    fmt(r["gpu_ns"] / MB), fmt(r["pct_of_gpu_time"], 3)]
                   for r in ops.modules.slice(0, 50).to_pylist()] if ops.modules.num_rows else []
    return ("".join(f"<p class='note'>{esc(line.strip())}</p>" for line in ops.lines)
            + "<p class='note'>MFU: the summary's (one, with its source).</p>"
            + folded("Op shapes by GPU time (table)", table(
                ["op", "input dims", "dtype", "phase", "calls", "ms", "TFLOP/s",
                 "% of peak", "p10 %", "p50 %"], shape_rows, name="op_shapes",
                empty="no modelled op"))
            + folded("GPU time per module (table)", table(
                ["module", "phase", "kind", "ms", "% of GPU time"], module_rows,
                name="modules", empty="no kernels"))
            + folded("Roofline and modules (figures)",
                     "".join(image(png, name) for name, png in ops.figures)))


def _gb(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 1e9


def _collectives(rep: Report) -> str:
    def rows_of(items, link):
        return [[link(r["name"]), str(r["count"]), fmt(_gb(r["bytes"])), fmt(r["time_ms"]),
                 fmt(r["busbw_gbps"]["median"]), fmt(r["busbw_gbps"]["p95"]),
                 fmt(r.get("share_of_iteration_pct")), fmt(r.get("hidden_pct"))]
                for r in items]
    head = ["", "kernels", "GB", "kernel ms", "median busbw GB/s", "p95 busbw GB/s",
            "share of iteration %", "hidden behind compute %"]
    return ("<h3>By parallel group</h3>" + table(head, rows_of(rep["network"]["by_group"],
                                                              group_link),
                                                 empty="no communication kernels")
            + folded("By collective (table)", table(
                head, rows_of(rep["network"]["by_collective"], esc),
                empty="no communication kernels"))
            + "<p class='note'>busbw: nccl-tests' bus bandwidth with each call's own group "
              "size, from kernel time; n/a where the trace has no message sizes.</p>")


def _place(diag: Summary | None, rank: int) -> str:
    """``node N, GPU G`` of a rank the diagnosis names (what is known)."""
    place = diag.places.get(rank) if diag is not None else None
    return esc(place.text() if place is not None else "")


def _advice(advice: Sequence[Advice], per: str = "per iteration") -> str:
    """The advice as an ordered list: finding, action, predicted saving (``per`` what),
    evidence."""
    if not advice:
        return ("<p>Advice: nothing stands out (no straggler, bubble, exposed "
                "communication or host overhead above the thresholds).</p>")
    items = []
    for a in advice[:5]:
        saving = saving_words(a, lambda ns: f"{duration(ns / MB)} {per}")
        items.append(f"<li title='{esc(a.evidence)}'>{esc(STANDING_TAG[a.standing])}"
                     f"<b>{esc(a.finding)}</b>: "
                     f"{esc(a.action)}. <i>{esc(saving)}</i> <span class='note'>"
                     f"(what-if {esc(a.what_if)}; hover for the evidence)</span></li>")
    return (f"<h3 title='{esc(ADVICE_HEAD)}'>Advice, the largest saving first</h3>"
            f"<ol class='causes'>{''.join(items)}</ol>")


def _diagnosis(diag: Summary | None, why: str | None, advice: Sequence[Advice] = ()
               ) -> str:
    """The first screen: the advice, per iteration where the time goes (the ledger's
    parts, mean over ranks), the largest losses, the stragglers."""
    if diag is None:
        return f"<p class='note'>n/a: {esc(why or 'no diagnosis')}</p>"
    out = [_advice(advice)]
    for t in diag.totals.to_pylist():
        pct = {key: sum(t[f"{p}_pct"] or 0 for p in _parts_of(key, t)) for key, _, _ in
               LEDGER_PARTS}
        bar = "".join(
            f"<span style='width:{v:.3f}%;background:{color}' title='{esc(label)} "
            f"{v:.1f} %'>{esc(label) if v >= 9 else ''}</span>"
            for (key, label, color) in LEDGER_PARTS if (v := pct[key]) > 0)
        legend = "".join(f"<span class='swatch' style='background:{color}'></span>"
                         f"{esc(label)} {pct[key]:.1f} %"
                         for key, label, color in LEDGER_PARTS if pct[key] >= 0.05)
        head = (f"ProfilerStep#{t['iteration']}" if t["iteration"] >= 0 else "whole trace")
        where = ("" if t["ranks"] == 1 else
                 f"; per rank {duration(t['span_ns'] / MB)} on average ({t['ranks']} ranks, "
                 + esc(clock_words(diag.ranks, diag.clocks if diag.synced else "none"))
                 + ("" if diag.synced else "; waits n/a") + ")")
        out.append(f"<h3>{esc(head)}: {duration(t['job_span_ns'] / MB)} from the first "
                   f"rank's start to the last one's end{where}"
                   + (" (one rank: its own clock)" if t["ranks"] == 1 else "")
                   + f", of which</h3><div class='ledger'>{bar}</div>"
                   f"<p class='note'>{legend}</p>")
    items = []
    for c in diag.causes[:6]:
        who = "; ".join(f"{rank_link(w.rank)} ({_place(diag, w.rank)}) "
                        f"{duration(w.ns / MB)} by {w.ranks_waiting} rank(s): "
                        f"{esc(w.why)}" for w in c.waited_for[:3])
        rest = (f"{duration((c.spread_ns or 0) / MB)} ranks doing the same work arriving "
                "a little apart (the ordinary spread, or a delay handed on: no rank late "
                "by a margin of its own)" if (c.spread_ns or 0) > 0 else "")
        items.append(f"<li><b>{esc(c.cause)}</b>: {duration(c.ns / MB)} per rank and "
                     f"iteration ({c.pct:.1f} %)"
                     + "".join(f"; {x}" for x in (who, rest) if x) + "</li>")
    if items:
        out.append(folded("Largest losses, and who waits for whom",
                          f"<ol class='causes'>{''.join(items)}</ol>"))
    strag = diag.stragglers
    if strag:
        out.append("<h3>Stragglers (same kernels, slower GPU)</h3><ul>" + "".join(
            f"<li>{rank_link(s.rank)} ({_place(diag, s.rank)}): "
            f"{s.slowdown:.2f}x its {s.peers} peers' compute; the job waits about "
            f"{duration((s.cost_ns or 0) / MB)} per iteration for it</li>"
            for s in strag[:5]) + "</ul>")
    elif diag.peers_compared:
        out.append(f"<p>No straggler: {esc(NONE_FOUND)}.</p>")
    elif diag.ranks > 1:
        out.append(f"<p>Stragglers not assessed: {esc(NO_PEERS)}.</p>")
    out.append("<p class='note'>Every rank's iteration is split into parts that add up to "
               "it: compute, memory, exposed transfer (communication moving data with no "
               "compute under it), gradient sync, pipeline bubble (waiting on a pipeline "
               "peer), waiting for other ranks (a collective's last member), CPU bound, "
               "idle. Per rank in ledger.csv of 'traceviz diagnose'.</p>")
    return "".join(out)


def _parts_of(key: str, t: dict) -> list[str]:
    """The ledger's parts a page part stands for (every exposed transfer is one)."""
    if key == "transfer":
        return [k[:-4] for k in t if k.startswith("transfer_") and k.endswith("_pct")]
    return [key]


def _stragglers(rep: Report, diag: Summary | None) -> str:
    x = rep["cross_rank"]
    if x is None:
        return "<p class='note'>n/a: one rank traced.</p>"
    rows = [[rank_link(s.rank), _place(diag, s.rank),
             str(s.stage) if s.stage is not None else "n/a", str(s.peers),
             fmt(s.slowdown, 3), f"{s.units_slower} / {s.units}",
             f"{s.p_value:.1e}", duration(s.excess_ns / MB),
             duration((s.cost_ns or 0) / MB), duration(s.waited_on_ns / MB)]
            for s in (diag.stragglers if diag is not None else ())]
    out = ("<p class='note'>Ranks whose GPU runs the same kernels slower than their peers "
           "(the other ranks of their pipeline stage), by the time the job waits for "
           "them.</p>"
           + table(["rank", "where", "stage", "peers", "slowdown", "kernels slower",
                    "p", "extra compute / iteration", "job waits / iteration",
                    "others wait for it / iteration"], rows, name="stragglers",
                   empty="no straggler" if diag else "n/a: no diagnosis"))
    parts = []
    for g in x["by_group"]:
        s = g["last_to_arrive"]
        rows = [[rank_link(r["rank"]), str(r["times_last"]), str(r["calls"]),
                 duration(r["delay_ms"]), duration(r["mean_delay_ms"])] for r in s]
        parts.append(
            f"<h3 id='group-{esc(g['group'])}'>{esc(g['group'])}: {g['calls']} calls</h3>"
            f"<p>arrival skew (first to last member) median {duration(g['skew_ms']['median'])},"
            f" p95 {duration(g['skew_ms']['p95'])}; busbw from transfer time "
            f"{fmt(g['busbw_transfer_gbps']['median'])} GB/s vs from kernel time "
            f"{fmt(g['busbw_kernel_gbps']['median'])} GB/s (medians)</p>"
            + table(["rank", "arrived last", "of calls",
                     "after the next-to-last, total", "per call"], rows,
                    empty="no rank arrived last by a measurable time"))
    slow = [[group_link(s["group"]), esc(s["collective"] or "?"), str(s["number"]),
             esc(s["process_group"] or "?"), fmt(s["span_ms"], 3), fmt(s["skew_ms"], 3),
             fmt(s["transfer_ms"], 3), rank_link(s["last_rank"])] for s in x["slowest_calls"]]
    return (out + folded("Who arrived last in each group's collectives (the schedule's "
                         "order as much as a slow rank)", "".join(parts))
            + "<h3>Slowest calls (by transfer time)</h3>"
            + table(["group", "collective", "call", "process group", "ms", "skew ms",
                     "transfer ms", "last to arrive"], slow, name="slowest",
                    empty="no call matched across ranks"))


def report_page(title: str, rep: Report, tables: dict[str, pa.Table],
                kernel_figures: list[tuple[str, bytes]], overlap_figure: bytes | None,
                pipeline: PipelineSection | None, why: str,
                plots: dict[str, str] | None = None, no_timeline: str = "",
                ops: OpsSection | None = None, no_ops: str = "",
                memory: MemorySection | None = None, hang: HangSection | None = None,
                diagnosed: JobDiagnosis | None = None) -> str:
    """The whole page from the report dict, the job's typed diagnosis (None: the
    report's ``diagnosis_why`` says why there is none), the breakdown's tables and
    figures (PNG), the
    pipeline view (None: ``why`` there is none) and the interactive plots' HTML
    (``plots``: ``timeline`` for the job, ``pipeline`` for the first PP group; a missing
    timeline says ``no_timeline``), the op model (None: ``no_ops`` says why), and the
    memory and hang sections where the job has them (None: left out)."""
    plots = plots or {}
    diag = diagnosed.diagnosis.summary() if diagnosed is not None else None
    return page(title, {
        "diagnosis": _diagnosis(diag, rep.get("diagnosis_why"),
                                diagnosed.advice if diagnosed is not None else ()),
        "summary": _summary(rep),
        "timeline": _timeline(plots.get("timeline"), no_timeline),
        "overlap": _overlap(rep, tables["temporal_breakdown"].to_pylist(), overlap_figure),
        "pipeline": _pipeline(pipeline, plots.get("pipeline"), why),
        "kernels": _kernels(tables["top_kernels"].to_pylist(), kernel_figures),
        "model": _model(ops, no_ops),
        "memory": _memory(memory) if memory is not None else None,
        "hang": _hang(hang) if hang is not None else None,
        "collectives": _collectives(rep),
        "stragglers": _stragglers(rep, diag)})


TIMELINE_SECTIONS = (("diagnosis", "Diagnosis"), ("steps", "Steps"),
                     ("workers", "Workers"), ("ledger", "Ledger"), ("notes", "Notes"))


def timeline_page(title: str, diag, slowdown_png: bytes, heatmap_png: bytes) -> str:
    """The page of an op timeline's diagnosis (:mod:`traceviz.analysis.timeline.
    diagnosis`): the advice and summary, each step's time against its ideal, every
    worker's slowdown per step with the slow ones, the ledger's shares, the notes."""
    from .timeline_text import ledger_share_line

    summary = "".join(f"<li>{esc(line)}</li>" for line in diag.summary)
    steps = table(["step", "time", "ideal", "slowdown", "costs it most", "saving"], [
        [esc(s["step"]), duration(s["time_ns"] / MB), duration(s["ideal_ns"] / MB),
         fmt(s["slowdown"], 3), esc(s["worst"] or ""),
         duration(s["worst_saving_ns"] / MB) if s["worst_saving_ns"] else ""]
        for s in diag.steps.to_pylist()], name="op-steps")
    slow = table(["ranks", "stage", "DP rank", "slowdown", "z", "since step", "steps",
                  "kind", "fixing it saves"], [
        [esc(s["ranks"]), esc(s["stage"]), esc(s["dp_rank"]), fmt(s["slowdown"], 2),
         fmt(s["z_score"], 1), esc(s["since_step"]), esc(s["slow_steps"]),
         "persistent" if s["persistent"] else "transient",
         duration(s["saving_ns"] / MB) if s["saving_ns"] is not None else "n/a"]
        for s in diag.stragglers_table.to_pylist()], name="op-stragglers",
        empty="no worker slower than the ordinary spread between GPUs")
    notes = "".join(f"<li>{esc(n)}</li>" for n in diag.notes)
    return page(title, {
        "diagnosis": _advice(diag.advice, "per step") + f"<ul>{summary}</ul>",
        "steps": image(slowdown_png, "step time and its ideal") + folded(
            "every step", steps),
        "workers": image(heatmap_png, "worker slowdown per step") + slow,
        "ledger": f"<p>{esc(ledger_share_line(diag))}</p><p class='note'>Each rank's "
                  "step in parts that add up to it: op_ledger.csv (traceviz diagnose)."
                  "</p>",
        "notes": f"<ul>{notes}</ul>" if notes else "<p class='note'>none</p>"},
        TIMELINE_SECTIONS)


def page(title: str, sections: dict[str, str | None],
         order: tuple[tuple[str, str], ...] = SECTIONS) -> str:
    """The whole document: a navigation bar and one ``<section>`` per entry of
    ``order`` (its HTML from ``sections``; an :data:`OPTIONAL` one that is None or
    absent is left out), the tables' script at the end."""
    shown = [(key, name) for key, name in order
             if key not in OPTIONAL or sections.get(key) is not None]
    nav = "".join(f"<a href='#{key}'>{name}</a>" for key, name in shown)
    body = "".join(f"<section id='{key}'><h2>{name}</h2>{sections.get(key) or ''}</section>"
                   for key, name in shown)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<link rel='icon' href='data:,'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<nav>{nav}</nav><main><h1>{esc(title)}</h1>{body}</main>"
            f"<script>{SCRIPT}</script></body></html>")
