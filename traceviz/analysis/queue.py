"""Launch-queue length per stream and memcpy / memset bandwidth over time (HTA's
counters), their summaries, and the time spent blocked on a full queue.

Queue length: every activity launched by a launch call (HTA's list below) adds +1 at
the call's start and -1 at its own start, per stream; the series has one point per
change (launched, not yet started). Summaries are ``describe()`` over the change points
(not time-weighted), as HTA's. Bandwidth: each memcpy / memset adds ``bytes / dur``
(GB/s = bytes per ns; zero durations count as 1 µs, as HTA) from its start to its end,
per subtype (the first 11 characters of the name, "Memcpy DtoH", or "Memset"); the
rate is the copy's own (bytes over its exact duration, Kineto's "memory bandwidth" arg);
the summary is over the points where the total is > 0.
"""
from __future__ import annotations

import re
from typing import Literal

import numpy as np
import pyarrow as pa

from ..table.schema import MEM
from .activities import RankActivities
from .stats import describe

QUEUE_CALLS = re.compile(
    r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|"
    r"cudaMemcpyAsync|cudaMemsetAsync|hipLaunchKernel|hipExtModuleLaunchKernel|"
    r"hipMemcpyAsync|hipMemsetAsync|hipMemcpyWithStream)$|^runFunction")
MAX_QUEUE = 1024  # CUDA's launch queue per stream


def queue_series(acts: RankActivities) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stream, ts, length) change points, sorted by stream then time (launches before
    starts at equal times; HTA's order at a tie is its unstable sort's)."""
    is_call = np.array([bool(QUEUE_CALLS.search(n)) for n in acts.launch_names] + [False])
    rows = np.flatnonzero(is_call[acts.launch_name] & (acts.launch_ts >= 0))
    stream = np.concatenate([acts.stream[rows], acts.stream[rows]])
    t = np.concatenate([acts.launch_ts[rows], acts.ts[rows]])
    step = np.concatenate([np.ones(rows.size, np.int64), -np.ones(rows.size, np.int64)])
    order = np.lexsort((-step, t, stream))
    stream, t, step = stream[order], t[order], step[order]
    # a running sum per stream: the global running sum minus its value before the stream
    length = np.cumsum(step)
    first = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]])
    before = np.r_[0, length][first]
    return stream, t, length - np.repeat(before, np.diff(np.r_[first, stream.size]))


def queue_length_summary(ranks: list[RankActivities]) -> pa.Table:
    """Per rank and stream: describe() of the queue length, and the time (ns) and share
    of the rank's trace span during which the queue was full (>= 1024)."""
    cols: dict[str, list] = {"rank": [], "stream": [], "blocked_ns": [], "blocked_ratio": []}
    stats: dict[str, list] = {}
    for acts in ranks:
        stream, t, length = queue_series(acts)
        span = int(acts.end.max() - acts.ts.min()) if len(acts) else 0
        for s in np.unique(stream).tolist():
            on = stream == s
            ts_s, len_s = t[on], length[on]
            full = len_s[:-1] >= MAX_QUEUE
            blocked = int((np.diff(ts_s)[full]).sum())
            cols["rank"].append(acts.rank)
            cols["stream"].append(s)
            cols["blocked_ns"].append(blocked)
            cols["blocked_ratio"].append(blocked / span if span else float("nan"))
            for k, v in describe(len_s).items():
                stats.setdefault(f"queue_length_{k}", []).append(v)
    return pa.table({**{k: pa.array(v, pa.int32() if k == "rank" else None)
                        for k, v in cols.items()},
                     **{k: pa.array(v, pa.float64()) for k, v in stats.items()}})


def memcpy_subtype(name: str) -> str:
    return "Memset" if name.startswith("Memset") else name[:11]


def bandwidth_series(acts: RankActivities,
                     sort_kind: Literal["stable", "quicksort"] = "stable"
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per memcpy / memset subtype: (ts, total GB/s from ts on) change points: +bw at each
    copy's start, -bw at its end (a zero-length copy lasts 1 µs, as in HTA), summed in
    time order (``sort_kind`` "quicksort" orders ties as HTA's pandas sort does)."""
    mem = np.flatnonzero((acts.kind == MEM) & np.isfinite(acts.bandwidth))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    subtype = np.array([memcpy_subtype(n) for n in acts.names] + [""])[acts.name[mem]]
    for sub in np.unique(subtype).tolist():
        rows = mem[subtype == sub]
        dur = acts.end[rows] - acts.ts[rows]
        dur = np.where(dur <= 0, 1000, dur)
        bw = acts.bandwidth[rows]
        t = np.concatenate([acts.ts[rows], acts.ts[rows] + dur])
        d = np.concatenate([bw, -bw])
        order = np.argsort(t, kind=sort_kind)
        out[sub] = (t[order], np.cumsum(d[order]))
    return out


def memory_bw_summary(ranks: list[RankActivities], hta_compat: bool = False) -> pa.Table:
    """Per rank and subtype: describe() of the concurrent bandwidth (GB/s) where > 0.

    The running sum leaves float residue (~1e-15 GB/s) where every copy has ended; it
    counts as 0 here, but ``hta_compat`` keeps HTA's ``> 0`` test, which counts such
    points as bandwidth."""
    cols: dict[str, list] = {"rank": [], "name": []}
    stats: dict[str, list] = {}
    for acts in ranks:
        series = bandwidth_series(acts, "quicksort" if hta_compat else "stable")
        for sub, (_, bw) in sorted(series.items()):
            cols["rank"].append(acts.rank)
            cols["name"].append(sub)
            for k, v in describe(bw[bw > (0 if hta_compat else 1e-12)]).items():
                stats.setdefault(f"memory_bw_gbps_{k}", []).append(v)
    return pa.table({**{k: pa.array(v, pa.int32() if k == "rank" else pa.string())
                        for k, v in cols.items()},
                     **{k: pa.array(v, pa.float64()) for k, v in stats.items()}})
