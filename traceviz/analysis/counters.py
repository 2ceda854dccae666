"""Counter tracks of one rank (HTA's ``generate_trace_with_counters``): the launch-queue
length of every stream and the memcpy / memset bandwidth of every subtype
(:mod:`.queue`), each with the GPU process it is drawn on. Times are int ns on the
trace's own clock; :mod:`traceviz.render.perfetto` writes them as counter events."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .activities import RankActivities
from .queue import bandwidth_series, queue_series

SERIES = ("queue_length", "memcpy_bandwidth")


@dataclass
class CounterTracks:
    """Change points per track: ``queue[stream] = (pid, ts, length)``,
    ``bandwidth[subtype] = (pid, ts, GB/s)`` (float residue once copies end is 0)."""

    queue: dict[int, tuple[int, np.ndarray, np.ndarray]] = field(default_factory=dict)
    bandwidth: dict[str, tuple[int, np.ndarray, np.ndarray]] = field(default_factory=dict)


def _pid(acts: RankActivities, rows: np.ndarray) -> int:
    """The GPU's pid: the most common one among ``rows`` (0 when there are none)."""
    if rows.size == 0:
        return 0
    values, counts = np.unique(acts.device[rows], return_counts=True)
    return int(values[np.argmax(counts)])


def counter_tracks(acts: RankActivities, series: tuple[str, ...] = SERIES) -> CounterTracks:
    """The counter tracks of one rank's (unselected) activities named by ``series``."""
    out = CounterTracks()
    if "queue_length" in series:
        stream, t, length = queue_series(acts)
        for s in np.unique(stream).tolist():
            on = stream == s
            out.queue[s] = (_pid(acts, np.flatnonzero(acts.stream == s)), t[on], length[on])
    if "memcpy_bandwidth" in series:
        pid = _pid(acts, np.flatnonzero(np.isfinite(acts.bandwidth)))
        for sub, (t, bw) in sorted(bandwidth_series(acts).items()):
            out.bandwidth[sub] = (pid, t, np.where(np.abs(bw) < 1e-12, 0.0, bw))
    return out
