"""The critical path of one rank or of a job, as typed results (what ``traceviz
critical-path`` writes and ``Job.critical_path`` returns).

One rank with ``hta_compat``: HTA's graph and longest path over one annotation instance,
summarised by HTA's ``bound_by`` (:class:`HtaPath`). Otherwise (one rank or a job): every
rank's graph joined through the collectives on synced clocks, the path back from the
iteration's last joined point, its time by category, rank and phase (parts add up to the
iteration), and ``what_if`` re-timings (:class:`CriticalPath`).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from ...errors import TraceVizError
from ...table.parked import release_free_memory
from ...table.schema import metadata
from ..clocks import is_clock_note
from ..diagnose.diagnosis import Diagnosis, diagnosis_of
from ..diagnose.waits import JobComm, job_comm_of
from ..activities import RankActivities, activities
from ..host_device import SYNC, rank_events
from ..iterations import windows
from ..microbatches import microbatch_table
from ..pipeline import pipeline_view
from . import job as J
from . import rank_graph as R
from . import what_if as W
from .graph import longest_path, path_edges
from .pieces import (
    PieceOptions,
    RankPiece,
    SharedValues,
    rank_label,
    rank_piece,
    window_of,
)
from .summary import BOUND_BY, bound_by, breakdown
from .tables import by, job_path_table, parts, phases_of, rank_path_table


STEP_NAME = re.compile(r"ProfilerStep#(-?\d+)")  # a window that is one profiled step


@dataclass
class HtaPath:
    """HTA's longest path on one rank: the path's edges (``table``), per ``bound_by``
    label HTA's weighted ns / % and the ns its edges cover on the clock
    (``summary``: they add up to the path's span, ``span_ns``), the path's nodes and
    weighted total; ``segments`` / ``tracks``: what its figure and Perfetto tracks
    draw; ``what``: the window's name; ``what_if``: as :class:`CriticalPath`'s."""

    rank: int
    what: str
    table: pa.Table
    summary: pa.Table
    nodes: int
    total_ns: int
    span_ns: int
    bound_by: dict[str, float | None]
    segments: dict
    tracks: dict
    notes: list[str] = field(default_factory=list)
    what_if: pa.Table | None = None

    def tables(self) -> dict[str, pa.Table]:
        """The tables by file name (the summary is written as CSV only)."""
        out = {"critical_path": self.table}
        if self.what_if is not None:
            out["critical_path_what_if"] = self.what_if
        return out


@dataclass
class CriticalPath:
    """The path back from the iteration's last joined point (``table``: its edges), its
    time by category (``by_category``: adds up to the iteration, ``iteration_ns``), by
    rank and by phase (add up to the path, ``span_ns``), the ranks it runs through in
    order (``hops``), and the what-ifs (``what_if``: per re-timing, the iteration before
    and after; None without). ``where``: what the path is of (window, ranks);
    ``clocks``: how the ranks were put on one clock (:class:`~..clocks.ClockSync`'s
    method, "none"); ``segments`` / ``tracks``: what its figure and Perfetto tracks
    draw; ``failed``: the ranks left out (a table that cannot be read, a worker that
    died), one line each."""

    table: pa.Table
    by_category: pa.Table
    by_rank: pa.Table
    by_phase: pa.Table
    what_if: pa.Table | None
    span_ns: int
    iteration_ns: int
    edges: int
    hops: list[int]
    ranks: int
    where: str
    segments: dict
    tracks: dict
    notes: list[str] = field(default_factory=list)
    clocks: str = "none"
    failed: list[str] = field(default_factory=list)  # the ranks left out, one line each

    def tables(self) -> dict[str, pa.Table]:
        """The tables by file name."""
        out = {"critical_path": self.table, "critical_path_by_category": self.by_category,
               "critical_path_by_rank": self.by_rank, "critical_path_by_phase": self.by_phase}
        if self.what_if is not None:
            out["critical_path_what_if"] = self.what_if
        return out


def _what(w: R.Window) -> str:
    """The window, as the first line names it."""
    return (w.names[0] if len(w.names) == 1 else "the whole trace" if not w.annotation
            else f"{w.annotation} instances {w.instances}")


def rank_path(gpu: pa.Table, cpu: pa.Table, ann: str | None, inst: int, hta_compat: bool,
              what_if: list[str], exact: bool = False, rank: int | None = None
              ) -> HtaPath | CriticalPath:
    """One rank's path: the job's model on the one rank (parts add up to the window's
    joined span), or with ``hta_compat`` HTA's model and numbers; ``rank``: its rank as
    every command names it (default: the table's own)."""
    ev = rank_events(gpu, cpu, hta_compat=hta_compat)
    if rank is not None:
        ev.rank = rank
    notes: list[str] = []
    w = window_of(ev, ann, inst, notes, exact)
    rg = R.build(ev, w, hta_compat)
    notes += rg.notes
    jg = J.join([rg], [J.kernel_info(gpu)], {})
    measured = J.measure(jg, jg.own)
    result: HtaPath | CriticalPath
    window = None  # HTA's window is the annotation's, CPU lead and all
    if hta_compat:
        result = hta_path(rg, gpu, notes)
        if not (ev.cls == SYNC).any():
            result.notes.append("the trace has no cuda_sync events: HTA's model has no "
                                "edge from the GPU work a synchronising call waited for "
                                "(without --hta-compat they are inferred)")
    else:
        notes += [n for n in jg.notes if n not in notes]
        stage = (metadata(gpu).get("classification") or {}).get("stage")
        window = iteration_window([activities(gpu)], w)
        result = path_of(jg, measured, [rg], [phases_of(gpu)], {ev.rank: stage}, {}, notes,
                         inst, window)
    if what_if:
        result.what_if = what_ifs(W.Context(
            jg, measured, adjust_ns=iteration_adjust(jg, measured, window)), what_if)
    return result


def hta_path(rg: R.RankGraph, gpu: pa.Table, notes: list[str]) -> HtaPath:
    """HTA's longest path over the rank graph and its bound_by summary: ``ns`` / ``pct``
    are HTA's (edge weights: dependency and sync edges weigh 0), ``clock_ns`` the time
    the path's edges of each label cover on the clock (they add up to the path's span)."""
    ev, w = rg.events, rg.window
    nodes, _ = longest_path(rg.graph)
    edges = path_edges(rg.graph, nodes)
    labels = bound_by(rg.graph, ev, edges)
    assert rg.graph.weight is not None  # a rank's graph: HTA's weights
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
    legend = {k: (f"{k} ({b.ns[i] / 1e6:.3g} ms" + (
        f"; {clock_ns[i] / 1e6:.3g} ms on the clock)" if clock_ns[i] != b.ns[i] else ")"))
        for i, k in enumerate(BOUND_BY)}
    seg = segments(g, edges, [rg], np.array([0]), [BOUND_BY[k] for k in labels.tolist()],
                   legend)
    return HtaPath(rank=int(ev.rank), what=_what(w), table=table, summary=summary,
                   nodes=int(nodes.size), total_ns=b.total_ns, span_ns=span,
                   bound_by=b.as_dict(), segments=seg,
                   tracks=tracks(table, "bound_by", ("edge", "weight_ns", "bound_by")),
                   notes=notes)


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


Table: TypeAlias = "pa.Table | Callable[[], pa.Table]"  # a table, or what reads it
# the map step: every rank's piece from its (rank, GPU, CPU) sources, in their order
PieceMap: TypeAlias = "Callable[[list, PieceOptions], list[RankPiece]]"


def pieces_here(tables: list[tuple[int, Table, Table]], options: PieceOptions
                ) -> list[RankPiece]:
    """The ranks' pieces made in this process, one rank's tables read and held at a
    time (the list is consumed)."""
    out = []
    shared = SharedValues()
    tables.reverse()  # consumed from the end: each rank's tables let go once cut
    while tables:
        r, gpu, cpu = tables.pop()
        out.append(shared.share(rank_piece(r, gpu() if callable(gpu) else gpu,
                                           cpu() if callable(cpu) else cpu, options)))
    return out


def job_path(tables: list, notes: list[str], ann: str | None = None, inst: int = 0,
             clock_sync: bool = True, exact: bool = False, where: str = "the job",
             diag: Diagnosis | None = None, also: Callable | None = None,
             take_also: Callable[[list], None] | None = None,
             pieces_of: PieceMap = pieces_here) -> JobPath:
    """The joined graph of the ranks ``tables`` ((rank, GPU table, CPU table) each, or
    what reads them; the list is consumed), over the window ``ann`` / ``inst``; what it
    leaves out goes to ``notes``. ``diag``: the job's diagnosis, whose clock offsets are
    taken (not solved again); ``also``: a function of every rank's (GPU, CPU) tables,
    its results (a list, in rank order) passed to ``take_also`` once every rank's piece
    is made, before the graph is joined (what it keeps of them is not held beside the
    graph's arrays while they are built); ``pieces_of``: the map step making each rank's
    piece (:mod:`.pieces`; default: here, one rank at a time; the job layer's runs it
    in worker processes, ``tables`` then naming files)."""
    if also is not None and take_also is None:
        raise ValueError("also's results go to take_also")
    given = diag is not None and {r for r, _, _ in tables} <= set(diag.offsets)
    pieces = pieces_of(tables, PieceOptions(ann, inst, exact, not given, also))
    if also is not None and take_also is not None:
        extra = [p.also for p in pieces]
        for p in pieces:
            p.also = None
        take_also(extra)
        del extra
        release_free_memory()
    # every communication kernel matched into its call (process group + Seq; sends and
    # receives by their peers), and the clocks synced on the collectives' ends (or the
    # diagnosis's)
    comm = [p.comm for p in pieces]
    jc = job_comm_of(comm, diag.offsets, diag.synced) if given and diag is not None \
        else job_comm_of(comm)
    ranks, phases, stages = [], [], {}
    joiner = J.Joiner()
    pieces.reverse()  # consumed from the end: each piece let go once joined
    while pieces:
        p = pieces.pop()
        stages[p.rank] = p.stage
        notes += [n for n in p.notes if n not in notes]
        if p.join is None:
            continue
        call, more = J.call_rows(jc, p.rank, p.n_rows)
        joiner.add_piece(p.join, call, more)
        ranks.append(p.join.rank)
        phases.append(p.phases)
    if not ranks:
        raise TraceVizError(f"{where}: no rank has the window {ann or 'ProfilerStep'!r} "
                            f"instance {inst}: {notes[-1] if notes else ''}")
    offsets: dict[int, int] = {}
    if clock_sync and len(ranks) > 1:
        offsets = jc.offsets
        notes += jc.notes
    elif len(ranks) > 1:
        notes.append("clocks not synced (--no-clock-sync): each rank's own clock")
    jg = joiner.finish(offsets)
    # the pieces' thousands of small arrays are gone: their heap back to the system
    # before the graph is timed and the diagnosis made (at 1,024 ranks 250 MB of it)
    release_free_memory()
    notes += jg.notes
    return JobPath(jc, jg, J.measure(jg, jg.own), ranks, phases, stages, offsets)


def job_critical_path(tables: list, ann: str | None, inst: int, what_if: list[str],
                      clock_sync: bool, exact: bool = False, where: str = "the job",
                      diag: Diagnosis | None = None, pieces_of: PieceMap = pieces_here
                      ) -> CriticalPath:
    """The job's path over the window ``ann`` / ``inst`` (see :func:`job_path`, which
    takes ``tables`` and ``pieces_of``), with the ``what_if`` re-timings; ``diag``: the
    job's diagnosis (its clocks and stragglers; None: computed here where a what-if
    needs it)."""
    notes: list[str] = []
    jp = job_path(tables, notes, ann, inst, clock_sync, exact, where, diag,
                  pieces_of=pieces_of)
    if diag is not None:
        notes += [n for n in diag.notes if is_clock_note(n) and n not in notes]
    # the ledger's window where the graph is on the activities' clocks (not with
    # --no-clock-sync over shifted ones)
    same_clocks = all(jp.offsets.get(a.rank, 0) == a.offset_ns for a in jp.jc.acts)
    window = iteration_window(jp.jc.acts, jp.ranks[0].window) if same_clocks else None
    result = path_of(jp.jg, jp.measured, jp.ranks, jp.phases, jp.stages, jp.offsets,
                     notes, inst, window)
    if jp.offsets:  # the diagnosis's verdict, else the one solved here
        result.clocks = (diag.clocks if diag is not None else
                         jp.jc.sync.method if jp.jc.sync is not None else "given")
    if what_if:
        result.what_if = what_ifs(what_if_context(jp.jc, jp.jg, jp.measured,
                                                  diag or diagnosis_of(jp.jc), window),
                                  what_if)
    return result


def iteration_window(acts: list[RankActivities], w: R.Window) -> tuple[int, int] | None:
    """The iteration the window ``w`` is, as the ledger times it: from the earliest
    rank's start of that ProfilerStep to the latest rank's end, where the GPUs run it
    (:func:`~..iterations.windows`; ns on the activities' clocks, the graph's). None
    where the window is not one ProfilerStep of theirs. Where the CPU runs ahead of the
    GPU the step's first CPU ops come long before it starts: the iteration leaves them
    out."""
    m = STEP_NAME.fullmatch(w.names[0]) if len(w.names) == 1 else None
    if m is None:
        return None
    starts: list[int] = []
    ends: list[int] = []
    for a in acts:
        win = windows(a)
        mine = win.iteration == int(m[1])
        starts += win.start[mine].tolist()
        ends += win.end[mine].tolist()
    return (min(starts), max(ends)) if starts else None


def iteration_adjust(jg: J.JobGraph, measured: J.Timing,
                     window: tuple[int, int] | None) -> int:
    """The ``window``'s span (:func:`iteration_window`) less the graph's joined points'
    span (ns; 0 without a window): what a re-timed graph's span is corrected by to give
    the re-timed iteration (the time before the step starts and after its graph ends is
    not re-timed)."""
    if window is None or not jg.graph.src.size:
        return 0
    first, last = J.iteration_span(jg, measured)
    return (max(window[1], last) - window[0]) - (last - first)


def path_of(jg: J.JobGraph, t: J.Timing, ranks: list, phases: list, stages: dict,
            offsets: dict[int, int], notes: list[str], inst: int,
            window: tuple[int, int] | None = None) -> CriticalPath:
    """The path back from the iteration's last joined point, its time by category,
    rank and phase (parts add up to the iteration: the joined points' span, or the
    ledger's ``window`` of the step, :func:`iteration_window`: the path from the
    window's start on, the time before it starts and after it ends)."""
    first, last = J.iteration_span(jg, t)
    end = last
    if not jg.graph.src.size:  # nothing joined: no path, and no iteration of its own
        window = None
    if window is not None:
        first, end = window[0], max(window[1], last)
    edges = J.path(jg, t)
    own, wait = J.path_times(jg, t, edges, jg.own, first if window is not None else None)
    if window is not None:  # the path's edges from the iteration's start on
        keep = (own + wait > 0) | (t.ts[jg.graph.dst[edges]] > first)
        edges, own, wait = edges[keep], own[keep], wait[keep]
    span = int(own.sum() + wait.sum())
    # the iteration (the what-ifs' baseline too) = the time before the path (it starts
    # after the iteration does), the path, and the time after it (GPU work of the step
    # the graph does not join, ending after it)
    after = end - last
    before = (end - first) - span - after
    cat, ns = parts(jg, edges, own, wait)
    g = jg.graph
    path_ranks = g.node_rank[g.dst[edges]]
    table = job_path_table(jg, edges, own, wait, J.slack(jg, t, jg.own), phases, stages,
                           first if window is not None else None)
    labels = [J.CATEGORIES[c] for c in cat.tolist()] + ["before the path"] + (
        ["after the path"] if after > 0 else [])
    by_cat = by(labels, np.r_[ns, max(before, 0), [after] if after > 0 else []], "category",
                end - first)
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
    where = (f"of {rank_label(ranks[0].events.rank)}, {what}" if len(ranks) == 1 else
             f"of {what} across {len(ranks)} ranks")
    legend = {r["category"]: f"{r['category']} ({r['ns'] / 1e6:.3g} ms)"
              for r in by_cat.to_pylist()}
    # each edge drawn as its wait, then its own time
    n = edges.size
    begin = np.maximum(g.node_ts[g.src[edges]], first)
    split = np.r_[begin, begin + wait]
    seg = segments(g, np.r_[edges, edges], ranks, jg.node_base,
                   [J.CATEGORIES[c] for c in np.r_[cat[n:], cat[:n]].tolist()], legend,
                   start=split, end=np.r_[split[n:], g.node_ts[g.dst[edges]]])
    return CriticalPath(table=table, by_category=by_cat, by_rank=by_rank, by_phase=by_phase,
                        what_if=None, span_ns=span, iteration_ns=end - first,
                        edges=int(edges.size), hops=hops, ranks=len(ranks), where=where,
                        segments=seg,
                        tracks=tracks(table, "category", ("edge", "own_ns", "wait_ns",
                                                          "slack_ns", "category")),
                        notes=notes)


def what_if_context(jc: JobComm, jg: J.JobGraph, measured: J.Timing, diag: Diagnosis,
                    window: tuple[int, int] | None = None) -> W.Context:
    """What a job's what-ifs need besides its graph: the stragglers of its diagnosis and
    the views of its complete pipeline groups (stages ordered), from the matched job
    ``jc`` (its activities on synced clocks); ``window``: the ledger's iteration the
    graph is (:func:`iteration_window`: the what-ifs' baseline)."""
    stragglers = {r["rank"]: r["slowdown"] for r in diag.stragglers.to_pylist()}
    views = []
    if diag.stages_ordered:
        rows = microbatch_table(jc.acts).to_pylist()
        have = {r["rank"] for r in rows}
        vpp = max([int((a.meta.get("classification") or {}).get("vpp") or 1)
                   for a in jc.acts] or [1])
        at: dict[int, list[int]] = {}  # each rank's rows (O(rows), not rows x groups)
        for k, r in enumerate(rows):
            at.setdefault(r["rank"], []).append(k)
        views = [pipeline_view([rows[k] for k in sorted(k for r in set(g) for k in at[r])],
                               g, vpp)
                 for g in diag.pipelines if len(g) > 1 and set(g) <= have]
    stages = {r["rank"]: r["stage"] for r in diag.speed.table.to_pylist()
              if r["stage"] is not None}
    return W.Context(jg, measured, stragglers, views, stages,
                     iteration_adjust(jg, measured, window))


def what_ifs(ctx: W.Context, specs: list[str]) -> pa.Table:
    """Re-time the job with each spec alone and, for the re-timed ones, all together:
    per re-timing the iteration before and after (ns), the change (%), the model used
    (graph re-timing or pipeline re-simulation) and the path's ranks."""
    together = [s for s in specs if not W.is_pipeline(s)]
    rows = []
    for chosen in [[s] for s in specs] + ([together] if len(together) > 1 else []):
        out = W.evaluate(ctx, chosen)
        rows.append({"what_if": out.what_if if len(chosen) == 1 else "all together",
                     "iteration_ns": out.iteration_ns, "baseline_ns": out.baseline_ns,
                     "change_pct": out.change_pct, "model": out.model,
                     "path_ranks": ",".join(map(str, out.path_ranks[:64]))})
    return pa.Table.from_pylist(rows)


def tracks(table: pa.Table, label: str, args: tuple[str, ...]) -> dict:
    """The path table as :func:`~traceviz.render.perfetto.path_events` takes it."""
    cols = table.to_pydict()
    ranks = cols["rank"]
    return {"rank": ranks, "from_rank": cols.get("from_rank", ranks),
            "start": cols["from_ns"], "end": cols["to_ns"],
            "label": [f"{k}: {e}" if e else k for k, e in zip(cols[label], cols["event"])],
            "args": {**{a: cols[a] for a in args}, "event": cols["event"]}}


def segments(graph, edges: np.ndarray, ranks, node_base: np.ndarray, labels: list[str],
             legend: dict[str, str], start: np.ndarray | None = None,
             end: np.ndarray | None = None) -> dict:
    """What the figure draws: per path segment (an edge, or a part of one from ``start``
    to ``end``) its rank, the rank it comes from, whether it ends on the GPU, its times
    and its label; ``legend`` the text of each label (the summary's numbers)."""
    dst = graph.dst[edges]
    k = np.searchsorted(node_base, dst, side="right") - 1
    event = graph.node_event[dst]
    gpu = np.zeros(edges.size, bool)
    order = np.argsort(k, kind="stable")  # each rank's events' classes looked up at once
    cut = np.flatnonzero(np.diff(k[order])) + 1
    for part in np.split(order, cut) if order.size else ():
        gpu[part] = ranks[int(k[part[0]])].events.gpu[event[part]]
    return {"gpu": gpu, "rank": graph.node_rank[dst],
            "from_rank": graph.node_rank[graph.src[edges]],
            "start": graph.node_ts[graph.src[edges]] if start is None else start,
            "end": graph.node_ts[dst] if end is None else end,
            "label": labels, "legend": legend,
            "ends_edge": (np.ones(edges.size, bool) if end is None else
                          np.asarray(end) == graph.node_ts[dst]),
            "ranks": sorted({int(rg.events.rank) for rg in ranks})}
