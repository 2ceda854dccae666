"""Frequent CUDA kernel sequences launched by an operator (HTA's
``get_frequent_cuda_kernel_sequences``).

Roots are the CPU ops (any CPU-side complete event but runtime / driver calls) whose
name contains ``operator``, outermost on their thread (a matching op inside another
matching op belongs to it), that launch at least ``min_pattern_len`` GPU activities. A
root's kernels are the activities whose launch call runs on the root's thread inside its
span; its pattern is the root's name followed by its kernels' names in GPU start order.
Identical patterns are counted, with their total GPU time and CPU op time (ns).

HTA keeps the matching ops at the smallest call depth among all matches; keeping the
outermost match of every call stack instead also finds an operator called at different
depths (e.g. from a wrapper in one place and directly in another).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceVizError
from ..table.arrays import codes_of

LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")


@dataclass
class Roots:
    """Outermost matching ops: name, thread, start and end (ns), in (thread, ts) order."""

    name: np.ndarray  # object (str)
    tid: np.ndarray
    ts: np.ndarray
    end: np.ndarray


def outermost(cpu: pa.Table, operator: str) -> Roots:
    """The outermost CPU ops whose name contains ``operator`` (see the module doc)."""
    names = cpu["name"].combine_chunks()
    if pa.types.is_dictionary(names.type):
        names = names.cast(pa.string())
    cats = cpu["cat"].combine_chunks().cast(pa.string())
    match = pc.and_(pc.match_substring(names, operator),
                    pc.invert(pc.is_in(cats, pa.array(LAUNCH_CATS))))
    rows = np.flatnonzero(np.asarray(match.fill_null(False)))
    tid = cpu["tid"].to_numpy()[rows]
    ts = cpu["ts"].to_numpy()[rows]
    end = ts + np.maximum(cpu["dur"].fill_null(0).to_numpy()[rows], 0)
    order = np.lexsort((-end, ts, tid))  # parents before their children
    rows, tid, ts, end = rows[order], tid[order], ts[order], end[order]
    keep = np.ones(rows.shape[0], dtype=bool)
    for t in np.unique(tid).tolist():
        on = np.flatnonzero(tid == t)
        reach = np.maximum.accumulate(end[on])  # latest end of this op and those before
        keep[on[1:]] = ts[on[1:]] >= reach[:-1]
    rows = rows[keep]
    return Roots(np.array(names.take(pa.array(rows)).to_pylist(), dtype=object),
                 tid[keep], ts[keep], end[keep])


def frequent_sequences(gpu: pa.Table, cpu: pa.Table, operator: str,
                       min_pattern_len: int = 3) -> pa.Table:
    """One row per distinct pattern: ``pattern`` (names joined by ``|``), ``operator``,
    ``kernels`` (pattern length without the op), ``count``, ``gpu_time_ns`` (kernel time
    summed over occurrences), ``cpu_time_ns`` (op time summed); sorted by count
    (descending) then pattern."""
    if not operator:
        raise TraceVizError("give a non-empty operator name (a substring of CPU op names)")
    roots = outermost(cpu, operator)
    launch_ts = gpu["launch_ts"].fill_null(-1).to_numpy()
    launch_tid = gpu["launch_tid"].fill_null(-1).to_numpy()
    ts, dur = gpu["ts"].to_numpy(), gpu["dur"].fill_null(0).to_numpy()
    codes, names = codes_of(gpu["name"])
    owner = np.full(ts.shape[0], -1, dtype=np.int64)
    for t in np.unique(roots.tid).tolist():
        on = np.flatnonzero(roots.tid == t)  # disjoint spans, sorted by start
        acts = np.flatnonzero((launch_tid == t) & (launch_ts >= 0))
        k = np.searchsorted(roots.ts[on], launch_ts[acts], side="right") - 1
        inside = (k >= 0) & (launch_ts[acts] <= roots.end[on][np.maximum(k, 0)])
        owner[acts[inside]] = on[k[inside]]
    found = np.flatnonzero(owner >= 0)
    found = found[np.lexsort((ts[found], owner[found]))]
    counts: dict[tuple, list[int]] = {}
    bounds = np.flatnonzero(np.r_[True, owner[found][1:] != owner[found][:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        mine = found[a:b]
        if mine.shape[0] < min_pattern_len:
            continue
        root = int(owner[mine[0]])
        key = (roots.name[root], *codes[mine].tolist())
        acc = counts.setdefault(key, [0, 0, 0])
        acc[0] += 1
        acc[1] += int(dur[mine].sum())
        acc[2] += int(roots.end[root] - roots.ts[root])
    text = {k: "|".join([k[0], *(names[c] for c in k[1:])]) for k in counts}
    patterns = sorted(counts, key=lambda k: (-counts[k][0], text[k]))
    return pa.table({
        "pattern": pa.array([text[k] for k in patterns], pa.string()),
        "operator": pa.array([k[0] for k in patterns], pa.string()),
        "kernels": pa.array([len(k) - 1 for k in patterns], pa.int64()),
        "count": pa.array([counts[k][0] for k in patterns], pa.int64()),
        "gpu_time_ns": pa.array([counts[k][1] for k in patterns], pa.int64()),
        "cpu_time_ns": pa.array([counts[k][2] for k in patterns], pa.int64()),
    })
