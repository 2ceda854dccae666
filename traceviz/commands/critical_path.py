"""``traceviz critical-path``: what bounds an iteration (:mod:`traceviz.analysis.critical_path`).

One rank (a trace, a table, or ``--rank`` of a job): HTA's graph and longest path over
one annotation instance, summarised by HTA's ``bound_by``. A job: every rank's graph
joined through the collectives on synced clocks, the path back from the iteration's end,
its time by category, rank and phase, and ``--what-if`` re-timings. Both write the
path's table, the summaries and a figure of the path over the ranks' timelines."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..analysis.critical_path import job as J
from ..analysis.critical_path import rank_graph as R
from ..analysis.critical_path import what_if as W
from ..analysis.critical_path.graph import longest_path, path_edges
from ..analysis.critical_path.summary import BOUND_BY, bound_by, breakdown
from ..analysis.critical_path.tables import (
    by,
    job_path_table,
    parts,
    phases_of,
    rank_path_table,
)
from ..analysis.diagnose.diagnosis import Diagnosis, diagnosis_of
from ..analysis.diagnose.waits import JobComm, job_comm
from ..analysis.host_device import SYNC, rank_events
from ..analysis.microbatches import microbatch_table
from ..analysis.pipeline import pipeline_view
from ..errors import TraceVizError, UsageError
from ..ingest.tables import load_with_cpu, one_rank_with_cpu, tables_folder
from ..render.critical_path_figure import draw
from ..render.figures import Figure
from ..render.perfetto import path_events, write_job
from ..table.schema import metadata
from . import export
from .result import Result

TRACE_NAME = "critical_path_trace.json.gz"  # Perfetto UI / chrome://tracing


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _window_args(iteration: int | None, annotation: str | None, instance: int
                 ) -> tuple[str | None, int]:
    """(annotation, instance); annotation None: ProfilerStep, else the whole trace."""
    if iteration is not None:
        if annotation:
            raise UsageError("give --iteration or --annotation, not both")
        return f"{R.DEFAULT_ANNOTATION}#{iteration}", 0
    return annotation, instance


def _window(ev, ann: str | None, inst: int, notes: list[str], exact: bool = False
            ) -> R.Window:
    """The window of ``ann`` / ``inst``; without an annotation, the ProfilerStep
    instance, or the whole trace when it has no ProfilerStep (said in ``notes``)."""
    if ann is None:
        if any(R.DEFAULT_ANNOTATION in t for t in ev.names):
            ann = R.DEFAULT_ANNOTATION
        else:
            if not any("whole trace" in n for n in notes):
                notes.append("no ProfilerStep in the trace: the whole trace is analysed "
                             "(pick a window with --annotation)")
            ann = ""
    return R.window(ev, ann, inst, exact)


def _rank_label(rank: int) -> str:
    return f"rank {rank}" if rank >= 0 else "rank n/a"


def run(path: str | os.PathLike, *, iteration: int | None = None,
        annotation: str | None = None, instance: int = 0, rank: int | None = None,
        hta_compat: bool = False, what_if: tuple[str, ...] = (),
        clock_sync: bool = True) -> Result:
    """The critical path of one rank or of a job (see the module doc)."""
    path = Path(path)
    ann, inst = _window_args(iteration, annotation, instance)
    exact = iteration is not None  # ProfilerStep#1 is not ProfilerStep#10
    one = one_rank_with_cpu(path, rank)
    if one:
        result = _one_rank(*one, ann, inst, hta_compat, list(what_if), exact)
        trace = path if path.is_file() and path.suffix != ".parquet" else None
        result.exports[TRACE_NAME] = partial(_write_trace, trace, result.data.pop("tracks"))
        return result
    if hta_compat:
        raise UsageError("--hta-compat is for one rank (HTA analyses one rank); add --rank N")
    folder = tables_folder(path, cpu=True)
    result = _job(folder, ann, inst, list(what_if), clock_sync, exact)
    events = result.data.pop("tracks")
    result.exports[TRACE_NAME] = lambda out: export.write(folder, out, clock_sync=clock_sync,
                                                          extra=path_events(events))
    return result


def _write_trace(trace: Path | None, tracks: dict, out: Path) -> None:
    """One rank's path as Perfetto tracks: added to a copy of its trace when there is
    one, else on their own."""
    if trace is not None:
        export.write(trace, out, extra=path_events(tracks))
    else:
        write_job((), out, kernels=False, extra=path_events(tracks))


def _one_rank(gpu: pa.Table, cpu: pa.Table, ann: str | None, inst: int, hta_compat: bool,
              what_if: list[str], exact: bool = False) -> Result:
    """One rank's path: the job's model on the one rank (parts add up to the window's
    joined span), or with ``hta_compat`` HTA's model and numbers."""
    ev = rank_events(gpu, cpu, hta_compat=hta_compat)
    notes: list[str] = []
    w = _window(ev, ann, inst, notes, exact)
    rg = R.build(ev, w, hta_compat)
    notes += rg.notes
    jg = J.join([rg], [J.kernel_info(gpu)], {})
    measured = J.measure(jg, jg.own)
    if hta_compat:
        result = _hta_path(rg, gpu, notes)
        if not (ev.cls == SYNC).any():
            result.notes.append("the trace has no cuda_sync events: HTA's model has no "
                                "edge from the GPU work a synchronising call waited for "
                                "(without --hta-compat they are inferred)")
    else:
        notes += [n for n in jg.notes if n not in notes]
        stage = (metadata(gpu).get("classification") or {}).get("stage")
        result = _path_result(jg, measured, [rg], [phases_of(gpu)], {ev.rank: stage}, {},
                              notes, inst)
    if what_if:
        _what_if(result, W.Context(jg, measured), what_if)
    return result


def _hta_path(rg: R.RankGraph, gpu: pa.Table, notes: list[str]) -> Result:
    """HTA's longest path over the rank graph and its bound_by summary: ``ns`` / ``pct``
    are HTA's (edge weights: dependency and sync edges weigh 0), ``clock_ns`` the time
    the path's edges of each label cover on the clock (they add up to the path's span)."""
    ev, w = rg.events, rg.window
    nodes, _ = longest_path(rg.graph)
    edges = path_edges(rg.graph, nodes)
    labels = bound_by(rg.graph, ev, edges)
    b = breakdown(rg.graph.weight[edges], labels)
    g = rg.graph
    clock = g.node_ts[g.dst[edges]] - g.node_ts[g.src[edges]]
    clock_ns = np.bincount(labels, weights=clock, minlength=len(BOUND_BY)).astype(np.int64)
    span = int(clock.sum())
    table = rank_path_table(rg, edges, labels, phases_of(gpu))
    summary = pa.table({"bound_by": list(BOUND_BY), "ns": b.ns,
                        "pct": pa.array(b.pct if b.pct is not None else [None] * len(b.ns),
                                        pa.float64()),
                        "clock_ns": clock_ns,
                        "clock_pct": pa.array(100.0 * clock_ns / span if span else
                                              [None] * len(BOUND_BY), pa.float64())})
    lines = [f"critical path of {_rank_label(ev.rank)}, {_what(w)} (HTA's model, µs): "
             f"{nodes.size} nodes, {_ms(b.total_ns)} weighted; its edges span "
             f"{_ms(span)} on the clock (HTA weighs dependency and sync edges 0)"]
    lines += [f"  {k:28s} {b.pct[i]:7.3f} %  {_ms(b.ns[i])}"
              + (f"  ({_ms(clock_ns[i])} on the clock)" if clock_ns[i] != b.ns[i] else "")
              for i, k in enumerate(BOUND_BY)
              if b.pct is not None and (b.ns[i] > 0 or clock_ns[i] > 0)]
    result = Result(tables={"critical_path": table}, csv={"critical_path_summary.csv": summary},
                    lines=lines, notes=notes,
                    data={"nodes": int(nodes.size), "total_ns": b.total_ns,
                          "span_ns": span, "bound_by": b.as_dict()})
    result.data["tracks"] = _tracks(table, "bound_by", ("edge", "weight_ns", "bound_by"))
    legend = {k: (f"{k} ({b.ns[i] / 1e6:.3g} ms" + (
        f"; {clock_ns[i] / 1e6:.3g} ms on the clock)" if clock_ns[i] != b.ns[i] else ")"))
        for i, k in enumerate(BOUND_BY)}
    seg = _segments(g, edges, [rg], np.array([0]), [BOUND_BY[k] for k in labels.tolist()],
                    legend)
    result.figures["critical_path.png"] = Figure(draw, seg, lines[0])
    return result


def _what(w: R.Window) -> str:
    """The window, as the first line names it."""
    return (w.names[0] if len(w.names) == 1 else "the whole trace" if not w.annotation
            else f"{w.annotation} instances {w.instances}")


@dataclass
class JobPath:
    """A job's joined graph, what it was built from, and its measured timing."""

    jc: JobComm
    jg: J.JobGraph
    measured: J.Timing
    ranks: list
    phases: list
    stages: dict
    offsets: dict[int, int]


def job_path(folder: Path, notes: list[str], ann: str | None = None, inst: int = 0,
             clock_sync: bool = True, exact: bool = False) -> JobPath:
    """The joined graph of the ranks in ``folder`` (their CPU tables parsed), over the
    window ``ann`` / ``inst``; what it leaves out goes to ``notes``."""
    tables = load_with_cpu(folder)
    # every communication kernel matched into its call (process group + Seq; sends and
    # receives by their peers), and the clocks synced on the collectives' ends
    jc = job_comm({r: gpu for r, gpu, _ in tables})
    ranks, infos, phases, stages = [], [], [], {}
    for r, gpu, cpu in tables:
        stages[r] = (metadata(gpu).get("classification") or {}).get("stage")
        ev = rank_events(gpu, cpu)
        ev.rank = r  # numbered as every command numbers a table that states no rank
        try:
            w = _window(ev, ann, inst, notes, exact)
        except TraceVizError as e:
            notes.append(f"{_rank_label(r)} left out: {e}")
            continue
        ranks.append(R.build(ev, w))
        infos.append(J.kernel_info(gpu, J.call_rows(jc, r, gpu.num_rows)))
        phases.append(phases_of(gpu))
    if not ranks:
        raise TraceVizError(f"{folder}: no rank has the window {ann or 'ProfilerStep'!r} "
                            f"instance {inst}: {notes[-1] if notes else ''}")
    offsets: dict[int, int] = {}
    if clock_sync and len(ranks) > 1:
        offsets = jc.offsets
        notes += jc.notes
    elif len(ranks) > 1:
        notes.append("clocks not synced (--no-clock-sync): each rank's own clock")
    jg = J.join(ranks, infos, offsets)
    notes += jg.notes
    return JobPath(jc, jg, J.measure(jg, jg.own), ranks, phases, stages, offsets)


def _job(folder: Path, ann: str | None, inst: int, what_if: list[str], clock_sync: bool,
         exact: bool = False) -> Result:
    notes: list[str] = []
    jp = job_path(folder, notes, ann, inst, clock_sync, exact)
    result = _path_result(jp.jg, jp.measured, jp.ranks, jp.phases, jp.stages, jp.offsets,
                          notes, inst)
    if what_if:
        _what_if(result, what_if_context(jp.jc, jp.jg, jp.measured, diagnosis_of(jp.jc)),
                 what_if)
    return result


def _path_result(jg: J.JobGraph, t: J.Timing, ranks: list, phases: list, stages: dict,
                 offsets: dict[int, int], notes: list[str], inst: int) -> Result:
    """The path back from the iteration's last joined point, its time by category,
    rank and phase (parts add up to the iteration: the joined points' span), as tables,
    lines and a figure."""
    edges = J.path(jg, t)
    own, wait = J.path_times(jg, t, edges, jg.own)
    span = int(own.sum() + wait.sum())
    first, last = J.iteration_span(jg, t)
    # the iteration (the joined points' span: the what-ifs' baseline too) = the path
    # and, when the path starts after the iteration's first point, the time before it
    before = (last - first) - span
    cat, ns = parts(jg, edges, own, wait)
    g = jg.graph
    path_ranks = g.node_rank[g.dst[edges]]
    table = job_path_table(jg, edges, own, wait, J.slack(jg, t, jg.own), phases, stages)
    labels = [J.CATEGORIES[c] for c in cat.tolist()] + ["before the path"]
    by_cat = by(labels, np.r_[ns, max(before, 0)], "category", last - first)
    by_rank = by(np.concatenate([path_ranks, path_ranks]).tolist(), ns, "rank", span)
    ph = table["phase"].to_pylist()
    by_phase = by([p or "none" for p in ph + ph], ns, "phase", span)
    hops = [int(path_ranks[0])] if edges.size else []
    for r in path_ranks.tolist():
        if r != hops[-1]:
            hops.append(r)
    w = ranks[0].window
    what = (w.names[0] if len(w.names) == 1 else "the whole trace" if not w.annotation
            else f"{w.annotation} instance {inst}")
    where = (f"of {_rank_label(ranks[0].events.rank)}, {what}" if len(ranks) == 1 else
             f"of {what} across {len(ranks)} ranks "
             f"({'clocks synced' if offsets else 'own clocks'})")
    lines = [f"critical path {where}: {_ms(last - first)}, {edges.size} edges"
             + (f", through rank(s) {' -> '.join(map(str, hops[:12]))}"
                f"{' ...' if len(hops) > 12 else ''}" if len(ranks) > 1 else "")]
    lines += [f"  {r['category']:24s} {r['pct']:7.3f} %  {_ms(r['ns'])}"
              for r in by_cat.to_pylist()]
    result = Result(tables={"critical_path": table, "critical_path_by_category": by_cat,
                            "critical_path_by_rank": by_rank,
                            "critical_path_by_phase": by_phase},
                    lines=lines, notes=notes,
                    data={"span_ns": span, "iteration_ns": last - first, "hops": hops,
                          "edges": int(edges.size),
                          "by_category": dict(zip(by_cat["category"].to_pylist(),
                                                  by_cat["ns"].to_pylist())),
                          "by_rank": dict(zip(by_rank["rank"].to_pylist(),
                                              by_rank["ns"].to_pylist())),
                          "tracks": _tracks(table, "category", ("edge", "own_ns", "wait_ns",
                                                                "slack_ns", "category"))})
    legend = {r["category"]: f"{r['category']} ({r['ns'] / 1e6:.3g} ms)"
              for r in by_cat.to_pylist()}
    # each edge drawn as its wait, then its own time
    n = edges.size
    split = np.r_[g.node_ts[g.src[edges]], g.node_ts[g.src[edges]] + wait]
    seg = _segments(g, np.r_[edges, edges], ranks, jg.node_base,
                    [J.CATEGORIES[c] for c in np.r_[cat[n:], cat[:n]].tolist()], legend,
                    start=split, end=np.r_[split[n:], g.node_ts[g.dst[edges]]])
    result.figures["critical_path.png"] = Figure(draw, seg, lines[0])
    return result


def what_if_context(jc: JobComm, jg: J.JobGraph, measured: J.Timing, diag: Diagnosis
                    ) -> W.Context:
    """What a job's what-ifs need besides its graph: the stragglers of its diagnosis and
    the views of its complete pipeline groups (stages ordered), from the matched job
    ``jc`` (its activities on synced clocks)."""
    stragglers = {r["rank"]: r["slowdown"] for r in diag.stragglers.to_pylist()}
    views = []
    if diag.stages_ordered:
        rows = microbatch_table(jc.acts).to_pylist()
        have = {r["rank"] for r in rows}
        vpp = max([int((a.meta.get("classification") or {}).get("vpp") or 1)
                   for a in jc.acts] or [1])
        views = [pipeline_view([r for r in rows if r["rank"] in set(g)], g, vpp)
                 for g in diag.pipelines if len(g) > 1 and set(g) <= have]
    return W.Context(jg, measured, stragglers, views)


def _what_if(result: Result, ctx: W.Context, specs: list[str]) -> None:
    """Re-time the job with each spec alone and, for the re-timed ones, all together; a
    table and lines."""
    together = [s for s in specs if not W.is_pipeline(s)]
    rows = []
    for chosen in [[s] for s in specs] + ([together] if len(together) > 1 else []):
        out = W.evaluate(ctx, chosen)
        label = out.what_if if len(chosen) == 1 else "all together"
        rows.append({"what_if": label, "iteration_ns": out.iteration_ns,
                     "baseline_ns": out.baseline_ns, "change_pct": out.change_pct,
                     "model": out.model,
                     "path_ranks": ",".join(map(str, out.path_ranks[:64]))})
        result.lines.append(f"what-if {label}: {_ms(out.baseline_ns)} -> "
                            f"{_ms(out.iteration_ns)} ({out.change_pct:+.2f} %)"
                            + (" [pipeline re-simulation]" if out.model.startswith("pipe")
                               else ""))
    result.tables["critical_path_what_if"] = pa.Table.from_pylist(rows)


def _tracks(table: pa.Table, label: str, args: tuple[str, ...]) -> dict:
    """The path table as :func:`~traceviz.render.perfetto.path_events` takes it."""
    cols = table.to_pydict()
    ranks = cols["rank"]
    return {"rank": ranks, "from_rank": cols.get("from_rank", ranks),
            "start": cols["from_ns"], "end": cols["to_ns"],
            "label": [f"{k}: {e}" if e else k for k, e in zip(cols[label], cols["event"])],
            "args": {**{a: cols[a] for a in args}, "event": cols["event"]}}


def _segments(graph, edges: np.ndarray, ranks, node_base: np.ndarray, labels: list[str],
              legend: dict[str, str], start: np.ndarray | None = None,
              end: np.ndarray | None = None) -> dict:
    """What the figure draws: per path segment (an edge, or a part of one from ``start``
    to ``end``) its rank, the rank it comes from, whether it ends on the GPU, its times
    and its label; ``legend`` the text of each label (the summary's numbers)."""
    dst = graph.dst[edges]
    k = np.searchsorted(node_base, dst, side="right") - 1
    gpu = np.array([bool(ranks[i].events.gpu[graph.node_event[v]])
                    for i, v in zip(k.tolist(), dst.tolist())], bool)
    return {"gpu": gpu, "rank": graph.node_rank[dst],
            "from_rank": graph.node_rank[graph.src[edges]],
            "start": graph.node_ts[graph.src[edges]] if start is None else start,
            "end": graph.node_ts[dst] if end is None else end,
            "label": labels, "legend": legend,
            "ends_edge": (np.ones(edges.size, bool) if end is None else
                          np.asarray(end) == graph.node_ts[dst]),
            "ranks": sorted({int(rg.events.rank) for rg in ranks})}
