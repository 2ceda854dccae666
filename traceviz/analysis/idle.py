"""Idle time per stream, split by cause (HTA's idle-time breakdown, made right where a
stream's activities overlap).

On each stream, activities in start order, each one's interval merged with those before
it (a DMA or a kernel may start before the previous one on its stream ends): the gap
before activity i is ``ts_i - max(end_0 .. end_{i-1})`` when positive; activities that
start inside earlier ones leave no gap. A stream's idle time is then its span (first
start to last end) minus the union of its activities, never negative. A gap is
**host_wait** when activity i was launched after the merged activities before it had
ended (the GPU waited for the CPU), else **kernel_wait** when it is shorter than
``kernel_wait_ns`` (default 30 µs: back-to-back kernels), else **other** (waiting on
another stream, an event, a sync). Times are ns.

HTA measures ``ts_i - end_{i-1}`` instead, so overlapping activities give it negative
gaps (negative kernel_wait on streams whose DMAs overlap); traceviz does not reproduce
that, with or without ``--hta-compat``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import declared
from .activities import RankActivities
from .stats import STATS, describe

IDLE_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("stream", pa.int64()), ("idle_category", pa.string()),
    ("idle_ns", pa.int64()), ("idle_ratio", pa.float64()), ("idle_pct_of_span", pa.float64()),
    ("gap_count", pa.float64()), ("gap_mean", pa.float64()), ("gap_std", pa.float64()),
    ("gap_min", pa.float64()), ("gap_25%", pa.float64()), ("gap_50%", pa.float64()),
    ("gap_75%", pa.float64()), ("gap_max", pa.float64())])

CATEGORIES = ("host_wait", "kernel_wait", "other")


def _reach(stream: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Running maximum of ``end`` within each run of equal ``stream`` (rows sorted by
    stream): how far the merged activities so far reach."""
    reach = end.copy()
    bounds = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        np.maximum.accumulate(end[a:b], out=reach[a:b])
    return reach


def gaps(acts: RankActivities, kernel_wait_ns: int = 30_000, hta_compat: bool = False
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stream, gap ns > 0, category index) of every gap between a stream's merged
    activities, in the stream's order. ``hta_compat``: an activity with a correlation
    id whose launch is not in the trace counts as launched when the trace's first event
    starts, as HTA's correlation join makes it (its row 0), instead of not launched."""
    # activities starting together: the first launched decides the gap's cause
    order = np.lexsort((acts.launch_ts, acts.ts, acts.stream))
    stream, ts, end, launch = (acts.stream[order], acts.ts[order], acts.end[order],
                               acts.launch_ts[order])
    first = ((acts.meta.get("stats") or {}).get("first_event_ts") if hta_compat else None)
    if first is not None:  # HTA's whole µs (its load-time ceil)
        lost = (launch < 0) & (acts.correlation[order] >= 0)
        launch = np.where(lost, -(-int(first - acts.offset_ns) // 1000) * 1000, launch)
    reach = _reach(stream, end)
    gap = ts[1:] - reach[:-1]
    keep = (stream[1:] == stream[:-1]) & (gap > 0)
    gap, prev_end, launched = gap[keep], reach[:-1][keep], launch[1:][keep]
    cat = np.where((launched >= 0) & (launched > prev_end), 0,
                   np.where(gap < kernel_wait_ns, 1, 2))
    return stream[1:][keep], gap, cat


def idle_breakdown(ranks: list[RankActivities], kernel_wait_ns: int = 30_000,
                   hta_compat: bool = False) -> pa.Table:
    """Per rank, stream and category: idle time (ns), its share of the stream's idle
    time (NaN when the stream has none) and of the rank's span (first kernel start to
    last end: one stream is idle while the others run, so these do not add up over
    streams), and the statistics of its gaps (ns). ``hta_compat``: see :func:`gaps`."""
    cols: dict[str, list] = {k: [] for k in ("rank", "stream", "idle_category", "idle_ns",
                                             "idle_ratio", "idle_pct_of_span",
                                             *(f"gap_{s}" for s in STATS))}
    for acts in ranks:
        stream, gap, cat = gaps(acts, kernel_wait_ns, hta_compat)
        span = int(acts.end.max() - acts.ts.min()) if len(acts) else 0
        for s in np.unique(acts.stream).tolist():
            on = stream == s
            total = gap[on].sum()
            for c, name in enumerate(CATEGORIES):
                g = gap[on & (cat == c)]
                cols["rank"].append(acts.rank)
                cols["stream"].append(s)
                cols["idle_category"].append(name)
                cols["idle_ns"].append(int(g.sum()))
                cols["idle_ratio"].append(float(g.sum() / total) if total else float("nan"))
                cols["idle_pct_of_span"].append(100.0 * g.sum() / span if span
                                                else float("nan"))
                for k, v in describe(g).items():
                    cols[f"gap_{k}"].append(v)
    return declared(pa.table({k: pa.array(v, pa.int32() if k == "rank" else None)
                              for k, v in cols.items()}), IDLE_SCHEMA)
