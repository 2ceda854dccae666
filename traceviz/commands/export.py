"""``traceviz export``: one trace gets traceviz's tracks added to a copy of itself; a
folder of one profiled iteration's ranks becomes one clock-synced Chrome trace (its
traces are parsed once, by ``traceviz batch``, when it has no tables yet)."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..ingest.outputs import default_path, trace_stem
from ..table.result import Result, Written
from ..job import Job
from ..job.export import check_output


def default_output(source: Path) -> Path:
    """``traceviz-out/<job>/<name>_traceviz.json.gz``."""
    stem = trace_stem(source.name) if source.is_file() else source.name
    return default_path(source, f"{stem}_traceviz.json.gz")


def run(source: str | os.PathLike, output: str | os.PathLike | None = None,
        kernels: bool | None = None, clock_sync: bool = True,
        extra: Iterable[dict] = ()) -> Result:
    """The export as a :class:`Result` whose one export is the file (computed as it is
    written: it streams, one rank in memory at a time); once written, ``value``
    (:class:`Written`) holds the file and its events, the result's ``notes`` what a reader must know
    and its ``failed`` the ranks left out with why. ``extra`` and ``kernels``: see
    :meth:`Job.export`."""
    job = Job.of(source)
    out = Path(output) if output else default_output(job.path)
    check_output(job.path, out)
    if job.path.is_dir():
        job.inputs()  # its traces parsed now, not while the export is written (all or nothing)
    result = Result(value=Written(out))

    def export(path: Path) -> None:
        events, notes, failed = job.export(path, kernels, clock_sync, extra)
        result.value.events = events
        result.notes += notes
        result.failed += failed

    result.exports[str(out)] = export
    return result
