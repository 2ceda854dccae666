"""``traceviz counters``: copies of traces with counter tracks added (HTA's
``generate_trace_with_counters``): launch-queue length per stream and memcpy / memset
bandwidth (:mod:`traceviz.analysis.counters`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..analysis.activities import activities
from ..analysis.counters import SERIES, counter_tracks
from ..ingest.build import parse
from ..parsing.source import ByteSource
from ..render.perfetto import counter_events
from ..render.trace_copy import write_with_events


def default_output(trace: str | os.PathLike, suffix: str = "_with_counters") -> Path:
    """HTA's name: ``x.json[.gz]`` -> ``x_with_counters.json.gz`` (always gzip)."""
    path = Path(trace)
    stem = path.name.split(".json")[0] if ".json" in path.name else path.stem
    return path.with_name(f"{stem}{suffix}.json.gz")


def run(trace: str | os.PathLike, output: str | os.PathLike | None = None,
        series: tuple[str, ...] = SERIES) -> tuple[Path, int]:
    """Parse ``trace``, then copy it with its counter tracks; (output path, events added)."""
    tracks = counter_tracks(activities(parse(trace)), series)
    out = Path(output or default_output(trace))
    src = ByteSource(trace)
    try:
        return out, write_with_events(src, os.fspath(trace), out, counter_events(tracks))
    finally:
        src.close()
