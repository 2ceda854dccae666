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

from ..analysis.critical_path.paths import CriticalPath
from ..job import Job
from ..job.export import write as write_export
from ..render.critical_path_files import TRACE_NAME, path_files
from ..render.perfetto import path_events, write_job
from ..table.result import Result


def run(path: Job | str | os.PathLike, *, iteration: int | None = None,
        annotation: str | None = None, instance: int = 0, rank: int | None = None,
        hta_compat: bool = False, what_if: tuple[str, ...] = (),
        clock_sync: bool = True, jobs: int = 1, scheduler: str | None = None) -> Result:
    """The critical path (:meth:`Job.critical_path`) as files: its
    tables, a figure over the ranks' timelines, the path as Perfetto tracks (on a copy of
    the rank's trace when there is one, else the job's export), and the console summary;
    ``value``: the typed path (:class:`CriticalPath` or :class:`HtaPath`); ``jobs`` /
    ``scheduler``: where the per-rank work runs."""
    job = Job.of(path, jobs=jobs, scheduler=scheduler)
    found, trace, folder = job.critical_path_run(
        iteration=iteration, annotation=annotation, instance=instance, rank=rank,
        hta_compat=hta_compat, what_if=what_if, clock_sync=clock_sync)
    result = path_files(found)
    result.value = found
    if isinstance(found, CriticalPath):
        result.failed += found.failed
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


