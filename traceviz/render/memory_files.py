"""The files of the memory analysis (``traceviz memory``, and the HTML page's memory
section): its tables, a figure and the summary lines."""
from __future__ import annotations

from ..analysis.memory import GiB, JobMemory
from .figures import Figure
from .memory_figure import memory_figure
from ..table.result import Result


def memory_result(job: JobMemory, missing: list[str]) -> Result:
    """``job`` as files: its tables, a figure, summary lines; ``missing`` (the ranks
    without allocator events, a line each) as notes; ``value``: the job."""
    return Result(tables=job.tables(), figures={"memory.png": Figure(memory_figure, job)},
                  lines=summary_lines(job), notes=missing, value=job)


def summary_lines(job: JobMemory, top: int = 4) -> list[str]:
    """Per rank (up to eight) its peak and what is live at it; per stage beyond that."""
    lines = []
    shown = job.ranks if len(job.ranks) <= 8 else [
        next(r for r in job.ranks if r.rank == s["rank"]) for s in job.stage_peaks()]
    if len(job.ranks) > 8:
        lines.append(f"{len(job.ranks)} ranks: per pipeline stage, its rank with the highest "
                     "peak (every rank in memory_ranks.csv)")
    for r in shown:
        s = r.summary
        if s["peak_bytes"] is None:
            lines.append(f"rank {r.rank}: no allocator event on a GPU")
            continue
        at = " ".join(str(v) for v in ("iteration", s["peak_iteration"], s["peak_phase"],
                                       "micro-batch", s["peak_microbatch"]) if v is not None)
        stage = f" (stage {r.stage})" if r.stage is not None else ""
        lines.append(f"rank {r.rank}{stage}: peak {s['peak_bytes'] / GiB:.2f} GiB allocated "
                     f"({at}), reserved {_gib(s['reserved_at_peak_bytes'])}; live at the "
                     "peak:")
        for p in r.peak.slice(0, top + 1).to_pylist():
            where = " ".join(str(v) for v in (p["phase"], "micro-batch" if
                                              p["microbatch"] is not None else None,
                                              p["microbatch"]) if v is not None)
            lines.append(f"  {p['bytes'] / GiB:8.2f} GiB {p['pct_of_peak']:5.1f} %  "
                         f"{p['origin']}{' ' + where if where else ''}")
        for o in r.ops.slice(0, top).to_pylist():
            lines.append(f"  {o['bytes'] / GiB:8.2f} GiB in {o['blocks']} block(s) of "
                         f"{o['op'] or '(no op)'}" + (f" in {o['module']}" if o["module"]
                                                      else "") + f" ({o['phase'] or 'n/a'})")
    return lines


def _gib(v: int | None) -> str:
    return f"{v / GiB:.2f} GiB" if v is not None else "n/a"
