"""Idle time per stream, split by cause (HTA's idle-time breakdown).

On each stream, activities in start order; the gap before activity i is ``ts_i -
end_{i-1}`` (the first has none). A gap is **host_wait** when activity i was launched
after activity i-1 had ended (the GPU waited for the CPU), else **kernel_wait** when it
is shorter than ``kernel_wait_ns`` (default 30 µs: back-to-back kernels), else
**other** (waiting on another stream, an event, a sync). Times are ns.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .activities import RankActivities
from .stats import STATS, describe

CATEGORIES = ("host_wait", "kernel_wait", "other")


def gaps(acts: RankActivities, kernel_wait_ns: int = 30_000
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stream, gap ns, category index) of every gap between consecutive activities of
    a stream."""
    order = np.lexsort((acts.ts, acts.stream))
    stream, ts, end, launch = (acts.stream[order], acts.ts[order], acts.end[order],
                               acts.launch_ts[order])
    same = stream[1:] == stream[:-1]
    gap = (ts[1:] - end[:-1])[same]
    prev_end = end[:-1][same]
    launched = launch[1:][same]
    cat = np.where((launched >= 0) & (launched > prev_end), 0,
                   np.where(gap < kernel_wait_ns, 1, 2))
    return stream[1:][same], gap, cat


def idle_breakdown(ranks: list[RankActivities], kernel_wait_ns: int = 30_000) -> pa.Table:
    """Per rank, stream and category: idle time (ns), its share of the stream's idle
    time (NaN when the stream has none) and of the rank's span (first kernel start to
    last end: one stream is idle while the others run, so these do not add up over
    streams), and the statistics of its gaps (ns)."""
    cols: dict[str, list] = {k: [] for k in ("rank", "stream", "idle_category", "idle_ns",
                                             "idle_ratio", "idle_pct_of_span",
                                             *(f"gap_{s}" for s in STATS))}
    for acts in ranks:
        stream, gap, cat = gaps(acts, kernel_wait_ns)
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
    return pa.table({k: pa.array(v, pa.int32() if k == "rank" else None)
                     for k, v in cols.items()})
