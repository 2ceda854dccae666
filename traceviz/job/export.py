"""Writing a Perfetto export as it is computed (``traceviz export``, and the critical
path's tracks): one trace's annotated copy, or a job's tracks on synced clocks, one
rank in memory at a time."""
from __future__ import annotations

import os
from collections.abc import Iterable
from itertools import chain
from pathlib import Path

from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.calls import rank_calls
from ..analysis.clocks import offsets_from_calls
from ..analysis.matching import match
from ..analysis.tracks import COLUMNS, rank_tracks
from ..errors import TraceVizError
from ..ingest.build import parse_table
from ..ingest.tables import input_files, load_table, rank_of, rank_tables
from ..parse.source import ByteSource
from ..render.perfetto import rank_events, write_job
from ..render.trace_copy import write_with_events


def check_output(source: Path, out: Path) -> None:
    """A trace's annotated copy is gzipped: its name must say so."""
    if source.is_file() and source.suffix != ".parquet" and not str(out).endswith(".gz"):
        raise TraceVizError(f"{out}: a trace's annotated copy is written gzipped; "
                            "name it .json.gz")


def write(source: str | os.PathLike, out: Path, kernels: bool | None = None,
          clock_sync: bool = True, extra: Iterable[dict] = ()) -> tuple[int, list[str],
                                                                      list[str]]:
    """Write the export of ``source`` (a trace, a table, or the folder of one profiled
    iteration's tables: :meth:`Job.export` resolves a job to it) to ``out`` as it is
    computed; (events written,
    notes, the ranks left out with why). ``extra``: more events (int ns on the export's
    clock: the trace's own for one trace, the synced clock of a job). ``kernels``
    defaults to False for one trace (its own kernels are there) and True for a job."""
    source = Path(source)
    check_output(source, out)
    notes: list[str] = []
    if source.is_file() and source.suffix != ".parquet":
        table = parse_table(source)
        events = chain(extra, rank_events(rank_tracks(table, rank_of(table, source, 0)),
                                          bool(kernels)))
        src = ByteSource(source)
        try:
            return write_with_events(src, os.fspath(source), out, events), notes, []
        finally:
            src.close()
    files = input_files([source])
    calls: list = []
    paths: dict = {}
    failed: list[str] = []
    for rank, path, table in rank_tables(files, CALL_COLUMNS, failed):
        paths[rank] = path
        calls.append(rank_calls(table, rank))
    offsets = offsets_from_calls(calls, notes)[0] if clock_sync else {}
    matched = match(calls, offsets)
    del calls
    # second pass over the (parquet) tables: only the export's columns, one rank at a time
    tracks = (rank_tracks(load_table(paths[r], COLUMNS), r, offsets.get(r, 0))
              for r in sorted(paths))
    return write_job(tracks, out, kernels is not False, matched, extra), notes, failed
