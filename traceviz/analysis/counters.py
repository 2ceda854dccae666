"""Counter tracks for a trace (HTA's ``generate_trace_with_counters``): the launch-queue
length of every stream and the memcpy / memset bandwidth of every subtype, as Chrome
counter events (``ph: C``) on the GPU's process, in the trace's own time base (µs,
exact); ``ts`` is int ns in the events yielded here.

Queue length: name "Queue Length", ``id`` the stream, args ``{"Queue Length": n}``.
Bandwidth: name the subtype ("Memcpy DtoH", "Memset"), args ``{"Memcpy BW": GB/s}``.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..render.trace_inject import write_with_events
from .queue import bandwidth_series, queue_series
from .select import Activities, select

SERIES = ("queue_length", "memcpy_bandwidth")


def _pid(acts: Activities, rows: np.ndarray) -> int:
    """The GPU's pid: the most common one among ``rows`` (0 when there are none)."""
    if rows.size == 0:
        return 0
    values, counts = np.unique(acts.device[rows], return_counts=True)
    return int(values[np.argmax(counts)])


def counter_events(acts: Activities, series: tuple[str, ...] = SERIES) -> Iterator[dict]:
    """The counter events of one rank's activities (exact ns times, unselected)."""
    if "queue_length" in series:
        stream, t, length = queue_series(acts)
        for s in np.unique(stream).tolist():
            pid = _pid(acts, np.flatnonzero(acts.stream == s))
            on = stream == s
            for ts, n in zip(t[on].tolist(), length[on].tolist()):
                yield {"ph": "C", "name": "Queue Length", "pid": pid, "id": s,
                       "ts": ts, "args": {"Queue Length": n}}
    if "memcpy_bandwidth" in series:
        pid = _pid(acts, np.flatnonzero(np.isfinite(acts.bandwidth)))
        for sub, (t, bw) in sorted(bandwidth_series(acts).items()):
            bw = np.where(np.abs(bw) < 1e-12, 0.0, bw)  # float residue once copies end
            for ts, v in zip(t.tolist(), bw.tolist()):
                yield {"ph": "C", "name": sub, "pid": pid, "ts": ts,
                       "args": {"Memcpy BW": v}}


def default_output(trace: str | os.PathLike, suffix: str = "_with_counters") -> Path:
    """HTA's name: ``x.json[.gz]`` -> ``x_with_counters.json.gz`` (always gzip)."""
    path = Path(trace)
    stem = path.name.split(".json")[0] if ".json" in path.name else path.stem
    return path.with_name(f"{stem}{suffix}.json.gz")


def write_trace_with_counters(trace: str | os.PathLike, output: str | os.PathLike | None = None,
                              series: tuple[str, ...] = SERIES) -> tuple[Path, int]:
    """Parse ``trace``, then copy it with its counter tracks; (output path, events added)."""
    import traceviz

    acts = select(traceviz.parse(trace))
    out = Path(output or default_output(trace))
    return out, write_with_events(trace, out, counter_events(acts, series))
