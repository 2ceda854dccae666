"""Run ``traceviz html``: parse the job when needed, run the report, the breakdown and
the pipeline view on it, and write one self-contained page (see
:mod:`traceviz.render.html_report`)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import TraceVizError
from ..output import atomic_path
from ..render.html_report import (esc, fmt, group_link, image, page, rank_link, table)

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
            ["iterations", esc(", ".join(map(str, c["iterations"])))]]
    notes = "".join(f"<li>{esc(n)}</li>" for n in rep["notes"])
    return ("".join(f"<div class='kpi'>{k}<b>{v}</b></div>" for k, v in kpis)
            + table(None, rows) + (f"<ul class='note'>{notes}</ul>" if notes else ""))


def _overlap(rep: dict, temporal, figures: Path) -> str:
    shares = {r["rank"]: r for r in temporal if r["iteration"] == -1}
    rows, ids = [], []
    for r in rep["overlap"]["per_rank"]:
        s = shares.get(r["rank"], {})
        rows.append([f"rank {r['rank']}", fmt(r["comp_ms"]), fmt(r["comm_ms"]),
                     fmt(r["overlap_pct"]), fmt(s.get("idle_pct"))])
        ids.append(f"rank-{r['rank']}")
    fig = figures / "temporal_breakdown.png"
    return (table(["rank", "compute ms", "comm ms", "comm hidden behind compute %",
                   "idle % of span"], rows, ids)
            + (image(fig, "temporal breakdown per rank") if fig.exists() else ""))


def _pipeline(folder: Path | None, why: str) -> str:
    if folder is None:
        return f"<p class='note'>{esc(why)}</p>"
    stages = pq.read_table(folder / "pipeline_stages.parquet").to_pylist()
    rows = [[f"stage {s['stage']}", rank_link(s["rank"]), fmt(s["busy_ns"] / MB),
             fmt(s["bubble_pct"]), fmt(s["iteration_bubble_pct"]), fmt(s["ideal_bubble_pct"]),
             f"{s['warmup_steps']} / {s['steady_pairs']} / {s['cooldown_steps']}",
             "critical" if s["critical"] else ""] for s in stages if s["pp_group"] ==
            stages[0]["pp_group"]]
    pngs = sorted(folder.glob("pipeline_*.png"))
    from .pipeline_run import gap_text

    gaps = "".join(f"<li>{esc(gap_text(g))}</li>"
                   for g in pq.read_table(folder / "pipeline_gaps.parquet").to_pylist()
                   if g["pp_group"] == stages[0]["pp_group"])
    return ((image(pngs[0], "pipeline schedule, measured and ideal") if pngs else "")
            + table(["stage", "rank", "busy ms", "bubble %", "bubble % of iteration",
                     "ideal bubble %", "warm-up / steady / cool-down", ""], rows)
            + (f"<h3>Largest gaps against the ideal schedule</h3><ul>{gaps}</ul>"
               if gaps else ""))


def _kernels(top, figures: Path) -> str:
    first = min((r["rank"] for r in top), default=None)
    rows = [[esc(r["name"][:90]), esc(r["kernel_type"]), fmt(r["sum_ns"] / 1e3),
             str(r["count"]), fmt(r["mean_ns"] / 1e3)]
            for r in sorted((r for r in top if r["rank"] == first),
                            key=lambda r: -r["sum_ns"])]
    figs = "".join(image(p, p.stem.replace("_", " ")) for p in sorted(
        figures.glob("top_kernels_*.png")))
    return (f"<p class='note'>Heaviest kernels of rank {first}, per kernel type.</p>"
            + table(["kernel", "type", "total µs", "count", "mean µs"], rows) + figs)


def _collectives(rep: dict) -> str:
    def rows_of(items, link):
        return [[link(r["name"]), str(r["count"]), fmt(r["bytes"] / 1e9), fmt(r["time_ms"]),
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


def write_page(output: str | os.PathLike, title: str, rep: dict, tables: dict,
               figures: Path, pipeline: Path | None, why: str) -> Path:
    """Write the page from what the analyses produced: the report dict, the breakdown's
    tables and figure folder, and the pipeline folder (None: ``why`` there is none)."""
    sections = {
        "summary": _summary(rep),
        "overlap": _overlap(rep, tables["temporal_breakdown"].to_pylist(), figures),
        "pipeline": _pipeline(pipeline, why),
        "kernels": _kernels(tables["top_kernels"].to_pylist(), figures),
        "collectives": _collectives(rep),
        "stragglers": _stragglers(rep)}
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp_path:
        Path(tmp_path).write_text(page(title, sections))
    return out


def run(root: str | os.PathLike, output: str | os.PathLike, overrides: dict | None = None,
        topology: str | None = None) -> Path:
    """Run the analyses on the job under ``root`` and write the page."""
    from . import breakdown, pipeline_run
    from .inputs import tables_folder
    from .report_run import make_report

    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    folder = tables_folder(root)
    rep = make_report(folder, overrides=overrides, topology=topology)
    with tempfile.TemporaryDirectory() as tmp:
        figures = Path(tmp) / "breakdown"
        result = breakdown.run([folder])
        breakdown.write(result, figures)
        pipe, why = Path(tmp) / "pipeline", ""
        try:
            pipeline_run.run(root, pipe, topology=topology)
        except TraceVizError as exc:
            pipe, why = None, f"no pipeline view: {exc}"
        return write_page(output, f"traceviz: {root.resolve().name}", rep, result.tables,
                          figures, pipe, why)
