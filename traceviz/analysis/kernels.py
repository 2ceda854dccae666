"""Top kernels per rank and kernel type (HTA's ``get_gpu_kernel_breakdown`` per-kernel table).

For each rank and type (COMP, COMM, MEM) the kernels are grouped by exact name and
sorted by total time. When a type has more than ``num_kernels`` names, the tail is
folded into one ``others`` row:

* traceviz (default): a name is kept while it is among the first ``num_kernels`` and the
  kernels before it make up less than ``duration_ratio`` of the type's time; every
  statistic (count, sum, max, min, mean, std) is over real kernel durations, ``others``
  included.
* ``hta_compat``: HTA 0.6's rule, quirks included: a name is folded when its cumulative
  sum exceeds the ``duration_ratio`` quantile (linear interpolation) *of the cumulative
  sums*, or when it sits at position ``num_kernels`` or later; the table is then
  re-aggregated over the per-name sums, so a named kernel's max / min / mean become its
  total (std 0) and the ``others`` row describes per-name totals.

Times are int64 ns (mean and std float64 ns); std is the sample std (ddof 1), 0 for one
value, as HTA fills it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import declared
from ..table.schema import COMM, COMP, MEM
from .activities import RankActivities

TOP_KERNELS_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("kernel_type", pa.string()), ("name", pa.string()),
    ("count", pa.int64()), ("sum_ns", pa.int64()), ("max_ns", pa.int64()),
    ("min_ns", pa.int64()), ("mean_ns", pa.float64()), ("std_ns", pa.float64())])

KERNEL_TYPES = {COMP: "COMPUTATION", COMM: "COMMUNICATION", MEM: "MEMORY"}
OTHERS = "others"


def _stats(groups: np.ndarray, values: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """count, sum, max, min, mean, std (ddof 1, 0 when undefined) of ``values`` per group
    (``groups`` in [0, n))."""
    v = values.astype(np.float64)
    count = np.bincount(groups, minlength=n)
    total = np.bincount(groups, weights=v, minlength=n)
    hi = np.full(n, -np.inf)
    lo = np.full(n, np.inf)
    np.maximum.at(hi, groups, v)
    np.minimum.at(lo, groups, v)
    mean = total / np.maximum(count, 1)
    sq = np.bincount(groups, weights=(v - mean[groups]) ** 2, minlength=n)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), 0.0)
    return {"count": count, "sum": total, "max": hi, "min": lo, "mean": mean, "std": std}


def _folded(sums: np.ndarray, num_kernels: int, duration_ratio: float,
            hta_compat: bool) -> np.ndarray:
    """Which names (sorted by sum, descending) go into ``others``."""
    pos = np.arange(sums.shape[0])
    if sums.shape[0] <= num_kernels:
        return np.zeros(sums.shape[0], dtype=bool)
    cum = np.cumsum(sums)
    if hta_compat:
        return (cum > np.quantile(cum, duration_ratio)) | (pos >= num_kernels)
    before = cum - sums
    return (before >= duration_ratio * cum[-1]) | (pos >= num_kernels)


def _rank_rows(acts: RankActivities, kind: int, num_kernels: int, duration_ratio: float,
               hta_compat: bool) -> list[dict]:
    sel = acts.kind == kind
    if not sel.any():
        return []
    codes, group = np.unique(acts.name[sel], return_inverse=True)
    dur = (acts.end - acts.ts)[sel]
    per_name = _stats(group, dur, codes.shape[0])
    order = np.argsort(-per_name["sum"], kind="stable")
    folded = _folded(per_name["sum"][order], num_kernels, duration_ratio, hta_compat)
    names = [acts.names[c] for c in codes[order]]
    if not folded.any():
        stats = {k: v[order] for k, v in per_name.items()}
    elif hta_compat:  # re-aggregated over the per-name sums
        labels = [OTHERS if f else n for n, f in zip(names, folded)]
        uniq, inverse = np.unique(np.array(labels, dtype=object), return_inverse=True)
        names = list(uniq)
        stats = _stats(inverse, per_name["sum"][order], len(names))
        stats["count"] = np.bincount(inverse, weights=per_name["count"][order],
                                     minlength=len(names)).astype(np.int64)
    else:  # real durations; ``others`` pools every folded kernel
        slot = np.empty(codes.shape[0], dtype=np.int64)
        kept = np.flatnonzero(~folded)
        slot[order[kept]] = np.arange(kept.shape[0])
        slot[order[folded]] = kept.shape[0]
        names = [names[i] for i in kept] + [OTHERS]
        stats = _stats(slot[group], dur, len(names))
    label = KERNEL_TYPES[kind]
    return [{"rank": acts.rank, "kernel_type": label, "name": n,
             **{k: stats[k][i] for k in stats}} for i, n in enumerate(names)]


def top_kernels(ranks: list[RankActivities], num_kernels: int = 10,
                duration_ratio: float = 0.8, hta_compat: bool = False) -> pa.Table:
    """One row per (rank, kernel type, kernel name or ``others``); see the module doc.
    Rows sorted by rank, type and descending sum."""
    rows: list[dict] = []
    for acts in ranks:
        for kind in KERNEL_TYPES:
            part = _rank_rows(acts, kind, num_kernels, duration_ratio, hta_compat)
            rows += sorted(part, key=lambda r: -r["sum"])
    ints = ("count", "sum", "max", "min")
    return declared(pa.table({
        "rank": pa.array([r["rank"] for r in rows], pa.int32()),
        "kernel_type": pa.array([r["kernel_type"] for r in rows], pa.string()),
        "name": pa.array([r["name"] for r in rows], pa.string()),
        **{("count" if k == "count" else f"{k}_ns"):
           pa.array([round(r[k]) for r in rows] if k in ints else [r[k] for r in rows],
                    pa.int64() if k in ints else pa.float64())
           for k in ("count", "sum", "max", "min", "mean", "std")},
    }), TOP_KERNELS_SCHEMA)
