"""``traceviz critical-path``: what bounds an iteration (:mod:`traceviz.analysis.critical_path`).

One rank (a trace, a table, or ``--rank`` of a job): HTA's graph and longest path over
one annotation instance, summarised by HTA's ``bound_by``. A job: every rank's graph
joined through the collectives on synced clocks, the path back from the iteration's end,
its time by category, rank and phase, and ``--what-if`` re-timings. Both write the
path's table, the summaries and a figure of the path over the ranks' timelines."""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pyarrow as pa

from ..analysis.critical_path.paths import (
    CriticalPath,
    HtaPath,
    rank_label,
)
from ..analysis.critical_path.summary import BOUND_BY
from ..job import Job
from ..job.export import write as write_export
from ..render.critical_path_figure import draw
from ..render.figures import Figure
from ..render.perfetto import path_events, write_job
from ..render.words import clock_words
from ..table.result import Result

TRACE_NAME = "critical_path_trace.json.gz"  # Perfetto UI / chrome://tracing


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def run(path: Job | str | os.PathLike, *, iteration: int | None = None,
        annotation: str | None = None, instance: int = 0, rank: int | None = None,
        hta_compat: bool = False, what_if: tuple[str, ...] = (),
        clock_sync: bool = True) -> Result:
    """The critical path (:meth:`Job.critical_path`) as files: its
    tables, a figure over the ranks' timelines, the path as Perfetto tracks (on a copy of
    the rank's trace when there is one, else the job's export), and the console summary;
    ``value``: the typed path (:class:`CriticalPath` or :class:`HtaPath`)."""
    job = Job.of(path)
    found, trace, folder = job.critical_path_run(
        iteration=iteration, annotation=annotation, instance=instance, rank=rank,
        hta_compat=hta_compat, what_if=what_if, clock_sync=clock_sync)
    result = _hta_result(found) if isinstance(found, HtaPath) else _path_result(found)
    if found.what_if is not None:
        result.lines += _what_if_lines(found.what_if)
    result.value = found
    if folder is None:
        result.exports[TRACE_NAME] = partial(_write_trace, trace, found.tracks)
    else:
        result.exports[TRACE_NAME] = lambda out: job.export(
            out, clock_sync=clock_sync, extra=path_events(found.tracks))
    return result


def _write_trace(trace: Path | None, tracks: dict, out: Path) -> None:
    """One rank's path as Perfetto tracks: added to a copy of its trace when there is
    one, else on their own."""
    if trace is not None:
        write_export(trace, out, extra=path_events(tracks))
    else:
        write_job((), out, kernels=False, extra=path_events(tracks))


def _hta_result(p: HtaPath) -> Result:
    """HTA's path as files and lines: ``ns`` / ``pct`` HTA's weights, ``clock_ns`` the
    clock."""
    s = p.summary.to_pydict()
    ns, pct, clock_ns = s["ns"], s["pct"], s["clock_ns"]
    lines = [f"critical path of {rank_label(p.rank)}, {p.what} (HTA's model, µs): "
             f"{p.nodes} nodes, {_ms(p.total_ns)} weighted; its edges span "
             f"{_ms(p.span_ns)} on the clock (HTA weighs dependency and sync edges 0)"]
    lines += [f"  {k:28s} {pct[i]:7.3f} %  {_ms(ns[i])}"
              + (f"  ({_ms(clock_ns[i])} on the clock)" if clock_ns[i] != ns[i] else "")
              for i, k in enumerate(BOUND_BY)
              if pct[i] is not None and (ns[i] > 0 or clock_ns[i] > 0)]
    return Result(tables=p.tables(), csv={"critical_path_summary.csv": p.summary},
                  lines=lines, notes=list(p.notes),
                  figures={"critical_path.png": Figure(draw, p.segments, lines[0])})


def _path_result(p: CriticalPath) -> Result:
    """The job model's path as files and lines."""
    hops = p.hops
    clocks = f" ({clock_words(p.ranks, p.clocks)})" if p.ranks > 1 else ""
    lines = [f"critical path {p.where}{clocks}: {_ms(p.iteration_ns)}, {p.edges} edges"
             + (f", through rank(s) {' -> '.join(map(str, hops[:12]))}"
                f"{' ...' if len(hops) > 12 else ''}" if p.ranks > 1 else "")]
    lines += [f"  {r['category']:24s} {r['pct']:7.3f} %  {_ms(r['ns'])}"
              for r in p.by_category.to_pylist()]
    return Result(tables=p.tables(), lines=lines, notes=list(p.notes),
                  figures={"critical_path.png": Figure(draw, p.segments, lines[0])})


def _what_if_lines(table: pa.Table) -> list[str]:
    return [f"what-if {r['what_if']}: {_ms(r['baseline_ns'])} -> {_ms(r['iteration_ns'])} "
            f"({r['change_pct']:+.2f} %)"
            + (" [pipeline re-simulation]" if r["model"].startswith("pipe") else "")
            for r in table.to_pylist()]
