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
from .diagnose.waits import comm_split, split_times
from .hta_compat import HTA_OTHER
from .iterations import windows
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


def sweep(acts: RankActivities, by_window: bool = False) -> RankSweep:
    """Sweep one rank's activities: the whole rank, then each iteration. HTA's
    iterations: the activities each ProfilerStep launched (or, unlaunched, ran inside),
    over their first start to last end (-1: the others); ``by_window``: the iteration
    windows the ledger uses (:mod:`.iterations`), each over the window, with every
    activity's time inside it (an activity is cut at the windows' edges; -1: the time
    outside every window); the whole row's span then reaches to the windows where they
    reach beyond the activities (a step's CPU time before its first kernel), so that
    the groups partition it: their times add up to it."""
    # row 0 the whole rank, then one row per iteration: two sweeps, so no array holds
    # every activity twice
    whole_keys = np.zeros(len(acts), np.int64)
    times, spans = _sweep_groups(acts.ts, acts.end, acts.kind, whole_keys, 1)
    split = (comm_split(acts, whole_keys, 1) if acts.wait_end is not None else None)
    pieces = _window_pieces(acts) if by_window and len(acts) else None
    if pieces is not None:
        its, ts, end, kind, wait_end, keys, it_spans = pieces
        it_times, _ = _sweep_groups(ts, end, kind, keys, its.shape[0])
        spans = np.array([it_spans.sum()])  # the activities' span and the windows
    else:
        its = np.unique(acts.iteration)
        ts, end, kind, wait_end = acts.ts, acts.end, acts.kind, acts.wait_end
        keys = np.searchsorted(its, acts.iteration)
        it_times, it_spans = _sweep_groups(ts, end, kind, keys, its.shape[0])
    if split is not None:
        split = np.concatenate([split, split_times(kind, ts, end, wait_end, keys,
                                                   its.shape[0])])
    return RankSweep(acts.rank, len(acts), its, np.concatenate([spans, it_spans]),
                     np.concatenate([times, it_times]), split)


def _window_pieces(acts: RankActivities):
    """The rank's activities cut at its iteration windows' edges (those of the
    iterations it has activities of): (the groups' iterations: -1 first where the rank
    has time outside every window, then each window's; each piece's start, end, kind,
    wait end (clipped into it; None without a split); its group; each group's span:
    the window, or the time outside the windows from the first activity start or window
    start to the last end). None where the rank has no ProfilerStep."""
    win = windows(acts)
    keep = np.isin(win.iteration, acts.iteration) & (win.iteration >= 0)
    if not keep.any():
        return None
    starts, ends = win.start[keep], win.end[keep]
    edges = np.column_stack([starts, ends]).ravel()  # sorted: windows never overlap
    s, e = acts.ts, acts.end
    lo = np.searchsorted(edges, s, "right")
    n = np.maximum(np.searchsorted(edges, e, "left") - lo, 0) + 1  # pieces per activity
    row = np.repeat(np.arange(len(acts)), n)
    k = np.arange(row.size) - np.repeat(np.cumsum(n) - n, n)  # piece index within it
    inner = np.minimum(lo[row] + k, edges.size)  # the edge a piece ends at (if inner)
    p_start = np.where(k == 0, s[row], edges[np.maximum(inner - 1, 0)])
    p_end = np.where(k == n[row] - 1, e[row], edges[np.minimum(inner, edges.size - 1)])
    seg = np.searchsorted(edges, p_start, "right")  # odd: inside window (seg - 1) // 2
    window = np.where(seg % 2 == 1, (seg - 1) // 2, -1)
    whole = int(max(e.max(), ends.max()) - min(s.min(), starts.min()))
    rest = whole - int((ends - starts).sum())  # the time outside every window
    outside = bool((window < 0).any()) or rest > 0
    its = np.r_[[-1] if outside else [], win.iteration[keep]].astype(np.int64)
    keys = window + (1 if outside else 0)
    spans = np.r_[[rest] if outside else [], ends - starts]
    wait_end = None
    if acts.wait_end is not None:
        we = acts.wait_end[row]
        wait_end = np.where(we >= 0, np.clip(we, p_start, p_end), -1)
    return (its, p_start, p_end, acts.kind[row], wait_end, keys.astype(np.int64),
            spans.astype(np.int64))


def _sweep_groups(ts: np.ndarray, end: np.ndarray, kind: np.ndarray, keys: np.ndarray,
                  n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """(time per group and kind combination, span per group; ns) of the activities
    (start, end, kind) in the groups ``keys``."""
    times = grouped_combination_times(ts, end, kind, keys, n_keys, len(SWEEP_KINDS))
    lo, hi = grouped_span(ts, end, keys, n_keys)
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
