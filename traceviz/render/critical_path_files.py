"""The critical path's files (``traceviz critical-path``): its tables, the summary, the
figure of the path over the ranks' timelines and the console lines (file names decided
here); the Perfetto track file's name, :data:`TRACE_NAME`."""
from __future__ import annotations

import pyarrow as pa

from ..analysis.critical_path.paths import CriticalPath, HtaPath, rank_label
from ..analysis.critical_path.summary import BOUND_BY
from ..table.result import Result
from .critical_path_figure import draw
from .figures import Figure
from .words import clock_words

TRACE_NAME = "critical_path_trace.json.gz"  # Perfetto UI / chrome://tracing


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def path_files(p: CriticalPath | HtaPath) -> Result:
    """The path's tables, figure and lines, with its what-ifs' lines."""
    result = _hta_result(p) if isinstance(p, HtaPath) else _path_result(p)
    if p.what_if is not None:
        result.lines += _what_if_lines(p.what_if)
    return result


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
