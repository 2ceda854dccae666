"""Temporal breakdown, communication-computation overlap and kernel-type breakdown.

All three come from one k-way sweep per (rank, iteration) over the COMP / COMM / MEM /
OTHER activities (:func:`..intervals.grouped_combination_times`):

* HTA's temporal breakdown: ``kernel_time`` = last end - first start; ``idle`` = time with
  nothing running; ``compute`` = |U(COMP)|; ``non_compute`` = |U(all)| - |U(COMP)|;
* our finer split of the same span: compute-only (COMP, no COMM), compute overlapped
  with communication (COMP and COMM), comm-only, mem-only, other-only, idle; they sum
  to ``kernel_time``;
* overlap % = 100 |U(COMM) ∩ U(COMP)| / |U(COMM)| (:mod:`.overlap`; null without COMM);
* ``comm_transfer`` / ``comm_wait``: the communication time split into moving data and
  waiting for the call's last member (:mod:`.diagnose.waits`; transfer first where they
  overlap): they add up to ``comm``; null for one rank alone or where a kernel's split is
  unknown;
* kernel-type breakdown: time in every combination of COMP / COMM / MEM (OTHER and idle
  left out), labelled as HTA does ("COMPUTATION overlapping COMMUNICATION"), summed over
  ranks.

Times are int64 ns; ``iteration`` null is the whole selection of a rank, -1 its
activities outside every ProfilerStep.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..intervals import grouped_combination_times, grouped_span
from ..table.arrays import declared
from ..table.schema import COMM, COMP, MEM
from .activities import SWEEP_KINDS, RankActivities
from .diagnose.waits import comm_split
from .hta_compat import HTA_OTHER
from .overlap import from_sweep, percent

TEMPORAL_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("iteration", pa.int64()), ("kernel_time_ns", pa.int64()),
    ("idle_ns", pa.int64()), ("compute_ns", pa.int64()), ("non_compute_ns", pa.int64()),
    ("compute_only_ns", pa.int64()), ("compute_overlapped_comm_ns", pa.int64()),
    ("comm_only_ns", pa.int64()), ("mem_only_ns", pa.int64()), ("other_only_ns", pa.int64()),
    ("comm_ns", pa.int64()), ("comm_transfer_ns", pa.int64()), ("comm_wait_ns", pa.int64()),
    ("overlap_pct", pa.float64()), ("idle_pct", pa.float64()), ("compute_pct", pa.float64()),
    ("non_compute_pct", pa.float64())])
KERNEL_TYPE_SCHEMA = pa.schema([
    ("kernel_type", pa.string()), ("time_ns", pa.int64()), ("percentage", pa.float64())])

_LABEL = {COMP: "COMPUTATION", COMM: "COMMUNICATION", MEM: "MEMORY"}
_MASKS = np.arange(1 << len(SWEEP_KINDS))


def _has(bit: int) -> np.ndarray:
    return (_MASKS >> bit) & 1 == 1


@dataclass
class RankSweep:
    """One rank's sweep: per group (the whole selection first, then each iteration: -1
    for the activities outside every ProfilerStep) the kernel_time span (ns) and the
    time per category mask (int64[groups, 16]). ``iterations`` holds the iteration of
    each group but the first. Every table of this module is read from it."""

    rank: int
    activities: int
    iterations: np.ndarray
    spans: np.ndarray
    times: np.ndarray
    # per group: communication time in transfer and in wait (ns; int64[groups, 2], -1
    # where the split is unknown)
    comm_split: np.ndarray | None = None


def sweep(acts: RankActivities) -> RankSweep:
    """Sweep one rank's activities: the whole rank, then each iteration."""
    its = np.unique(acts.iteration)
    # row 0 the whole rank, then one row per iteration: two sweeps, so no array holds
    # every activity twice
    whole_keys = np.zeros(len(acts), np.int64)
    it_keys = np.searchsorted(its, acts.iteration)
    whole = _sweep_groups(acts, whole_keys, 1)
    per_iteration = _sweep_groups(acts, it_keys, its.shape[0])
    times, spans = (np.concatenate(p) for p in zip(whole, per_iteration))
    split = None
    if acts.wait_end is not None:
        split = np.concatenate([comm_split(acts, whole_keys, 1),
                                comm_split(acts, it_keys, its.shape[0])])
    return RankSweep(acts.rank, len(acts), its, spans, times, split)


def _sweep_groups(acts: RankActivities, keys: np.ndarray, n_keys: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(time per group and kind combination, span per group; ns) of the groups ``keys``."""
    times = grouped_combination_times(acts.ts, acts.end, acts.kind, keys, n_keys,
                                      len(SWEEP_KINDS))
    lo, hi = grouped_span(acts.ts, acts.end, keys, n_keys)
    return times, np.where(hi >= lo, hi - lo, 0)


def temporal_breakdown(sweeps: list[RankSweep]) -> pa.Table:
    """One row per rank and iteration (see the module doc); percentages of kernel_time."""
    cols: dict[str, list] = {k: [] for k in (
        "rank", "iteration", "kernel_time_ns", "idle_ns", "compute_ns", "non_compute_ns",
        "compute_only_ns", "compute_overlapped_comm_ns", "comm_only_ns", "mem_only_ns",
        "other_only_ns", "comm_ns", "comm_transfer_ns", "comm_wait_ns", "overlap_pct")}
    comp, comm, mem = _has(COMP), _has(COMM), _has(MEM)
    for sw in sweeps:
        its, span, t = sw.iterations, sw.spans, sw.times
        if not sw.activities:
            continue
        busy = t[:, 1:].sum(axis=1)
        cc = from_sweep(t)
        compute, comm_t, both = cc.comp, cc.comm, cc.overlap
        cols["rank"] += [sw.rank] * (its.shape[0] + 1)
        cols["iteration"] += [None] + its.tolist()  # None: the whole trace
        cols["kernel_time_ns"] += span.tolist()
        cols["idle_ns"] += (span - busy).tolist()
        cols["compute_ns"] += compute.tolist()
        cols["non_compute_ns"] += (busy - compute).tolist()
        cols["compute_only_ns"] += (compute - both).tolist()
        cols["compute_overlapped_comm_ns"] += both.tolist()
        cols["comm_only_ns"] += (comm_t - both).tolist()
        cols["mem_only_ns"] += t[:, mem & ~comp & ~comm].sum(axis=1).tolist()
        cols["other_only_ns"] += t[:, 1 << HTA_OTHER].tolist()
        cols["comm_ns"] += comm_t.tolist()
        split = sw.comm_split if sw.comm_split is not None else np.full((span.size, 2), -1)
        cols["comm_transfer_ns"] += [v if v >= 0 else None for v in split[:, 0].tolist()]
        cols["comm_wait_ns"] += [v if v >= 0 else None for v in split[:, 1].tolist()]
        cols["overlap_pct"] += cc.pct().tolist()
    table = {k: pa.array(v, pa.float64() if k == "overlap_pct" else
                         pa.int32() if k in ("rank",) else pa.int64(),
                         from_pandas=True) for k, v in cols.items()}
    span = np.array(cols["kernel_time_ns"], dtype=np.int64)
    for part in ("idle", "compute", "non_compute"):
        table[f"{part}_pct"] = pa.array(percent(np.array(cols[f"{part}_ns"], np.int64), span),
                                        from_pandas=True)
    return declared(pa.table(table), TEMPORAL_SCHEMA)


def kernel_type_label(mask: int) -> str:
    """HTA's label of a COMP/COMM/MEM combination (bit order COMP, COMM, MEM)."""
    return " overlapping ".join(_LABEL[c] for c in (COMP, COMM, MEM) if mask >> c & 1)


def kernel_type_breakdown(sweeps: list[RankSweep]) -> pa.Table:
    """Time (ns, summed over ranks, whole selection) in every COMP / COMM / MEM
    combination, and its share of their sum."""
    total = np.zeros(8, dtype=np.int64)
    for sw in sweeps:
        np.add.at(total, _MASKS & 7, sw.times[0])
    masks = [m for m in range(1, 8) if total[m] > 0]
    times = total[masks]
    return declared(pa.table({
        "kernel_type": [kernel_type_label(m) for m in masks],
        "time_ns": pa.array(times, pa.int64()),
        "percentage": pa.array(percent(times, np.full(len(masks), times.sum())))}),
        KERNEL_TYPE_SCHEMA)
