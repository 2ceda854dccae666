"""``traceviz counters``: copies of traces with counter tracks added (HTA's
``generate_trace_with_counters``): launch-queue length per stream and memcpy / memset
bandwidth (:mod:`traceviz.analysis.counters`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..analysis.activities import activities
from ..analysis.counters import SERIES, counter_tracks
from ..errors import UsageError
from ..ingest.build import parse_table
from ..ingest.outputs import default_path, trace_stem
from ..parse.source import ByteSource
from ..render.perfetto import counter_events
from ..render.trace_copy import write_with_events
from ..table.result import Result, Written


def default_output(trace: str | os.PathLike, suffix: str = "_with_counters") -> Path:
    """HTA's name, ``x.json[.gz]`` -> ``x_with_counters.json.gz`` (always gzip), in
    ``traceviz-out/<x>/``."""
    path = Path(trace)
    stem = trace_stem(path.name)
    return default_path(trace, f"{stem}{suffix}.json.gz")


def series_of(text: str) -> tuple[str, ...]:
    """The counter tracks named in a comma-separated list (a usage error for others)."""
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(set(chosen) - set(SERIES))
    if unknown or not chosen:
        raise UsageError(f"--series: unknown {unknown or text!r}; choose from "
                         f"{', '.join(SERIES)}")
    return chosen


def output_for(trace: str | os.PathLike, output: str | os.PathLike | None,
               traces: int) -> Path | None:
    """Where ``trace``'s copy goes: ``output`` itself for one trace and a file name,
    else its default name in the folder ``output`` (None: :func:`default_output`)."""
    if not output:
        return None
    out = Path(output)
    return out / default_output(trace).name if traces > 1 or out.is_dir() else out


def run(trace: str | os.PathLike, output: str | os.PathLike | None = None,
        series: tuple[str, ...] = SERIES) -> Result:
    """Parse ``trace``; the :class:`Result`'s one export is its copy with the counter
    tracks; once written, ``value`` (:class:`Written`) holds the copy and the events
    added."""
    tracks = counter_tracks(activities(parse_table(trace)), series)
    out = Path(output or default_output(trace))
    result = Result(value=Written(out))

    def copy(path: Path) -> None:
        src = ByteSource(trace)
        try:
            result.value.events = write_with_events(src, os.fspath(trace), path,
                                                    counter_events(tracks))
        finally:
            src.close()

    result.exports[str(out)] = copy
    return result
