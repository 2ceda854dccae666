"""Per-rank clock offsets from collective end times.

The members of one NCCL collective call finish together: their kernels end at one true
time (waiting happens inside the kernel). With ``e[r, c]`` the end of call ``c`` on rank
``r``'s clock and ``o[r]`` that clock's offset, ``e[r, c] - o[r] = T[c]`` for every
member. Offsets are the least-squares solution: eliminating each ``T[c]`` leaves a
ranks x ranks Laplacian system, solved per connected set of ranks with the lowest rank
of each set as its reference (offset 0). Calls are matched across ranks by process
group name and sequence number, else by order within the group; point-to-point calls
(send / recv) are left out.

Offsets and residuals are int64 / float64 ns; a synced time is ``ts - offset``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

CALL_CHUNK = 2048  # calls per block of the incidence matrix (block x ranks floats)
SYNC_WARN_NS = 50_000  # a residual above this (50 µs) makes the clock sync suspect


@dataclass
class ClockSync:
    """Offsets (ns) per rank, and how well the calls agree with them."""

    ranks: np.ndarray       # sorted
    offsets: np.ndarray     # int64 ns: a rank's clock minus its reference's clock
    reference: np.ndarray   # the reference rank of each rank's connected set
    calls: np.ndarray       # collective calls of each rank used
    median_abs_residual: np.ndarray  # ns
    max_abs_residual: np.ndarray     # ns

    def linked(self) -> np.ndarray:
        """Per rank: whether a collective links its clock to another rank's."""
        _, inverse, counts = np.unique(self.reference, return_inverse=True,
                                       return_counts=True)
        return counts[inverse.ravel()] > 1

    def offset_of(self, rank: int) -> int:
        i = np.searchsorted(self.ranks, rank)
        return int(self.offsets[i]) if i < self.ranks.size and self.ranks[i] == rank else 0

    def table(self) -> pa.Table:
        """Per rank: whether it is synced (a collective links it to another rank), its
        offset (ns; null when not synced), reference rank, calls used and residuals."""
        linked = self.linked()
        return pa.table({"rank": pa.array(self.ranks, pa.int32()),
                         "synced": pa.array(linked, pa.bool_()),
                         "offset_ns": pa.array(self.offsets, pa.int64(), mask=~linked),
                         "reference_rank": pa.array(self.reference, pa.int32()),
                         "calls": pa.array(self.calls, pa.int64()),
                         "median_abs_residual_ns": pa.array(self.median_abs_residual),
                         "max_abs_residual_ns": pa.array(self.max_abs_residual)})


@dataclass
class CollectiveEnds:
    """One rank's collective calls: process group (index into ``groups``), call number
    in that group, and end (ns, the last kernel of a coalesced call); one row per call."""

    groups: list[str]
    group: np.ndarray
    number: np.ndarray
    end: np.ndarray


def collective_ends(table: pa.Table) -> CollectiveEnds:
    """The collective calls of one rank's table that clocks are synced on."""
    from .calls import rank_calls

    return ends_of(rank_calls(table, -1))


def ends_of(calls) -> CollectiveEnds:
    """The calls (a :class:`~.calls.RankCalls`) that clocks are synced on: those of a
    known process group, send / receive kernels left out (see the module doc)."""
    from ..table.schema import COLLECTIVES

    keep = ((calls.collective != COLLECTIVES.index("SendRecv"))
            & (calls.group != len(calls.groups) - 1))
    return CollectiveEnds(calls.groups, calls.group[keep], calls.number[keep],
                          calls.end[keep])


def synchronize(ends_by_rank: dict[int, CollectiveEnds]) -> ClockSync:
    """Least-squares offsets from every rank's collective ends (see the module doc)."""
    ranks = np.array(sorted(ends_by_rank), dtype=np.int64)
    names: dict[str, int] = {}
    parts: tuple[list[np.ndarray], ...] = ([], [], [], [])  # rank index, group, number, end
    for i, r in enumerate(ranks.tolist()):
        ce = ends_by_rank[r]
        glob = np.array([names.setdefault(g, len(names)) for g in ce.groups] + [-1])
        for part, values in zip(parts, (np.full(ce.end.size, i), glob[ce.group], ce.number,
                                        ce.end)):
            part.append(values)
    rank_i, group, number, end = (np.concatenate(a) if a else np.zeros(0, np.int64)
                                  for a in parts)
    _, call = np.unique(np.stack([group, number], axis=1), axis=0, return_inverse=True)
    call = call.ravel()
    size = np.bincount(call)
    keep = size[call] >= 2  # a call seen on one rank says nothing about clocks
    rank_i, call, end = rank_i[keep], call[keep], end[keep]
    _, call = np.unique(call, return_inverse=True)
    m = np.bincount(call).astype(np.float64)
    n = ranks.size
    rel = (end - (end.min() if end.size else 0)).astype(np.float64)  # small floats
    mean = np.bincount(call, weights=rel) / np.maximum(m, 1)
    rhs = np.bincount(rank_i, weights=rel - mean[call], minlength=n)
    # Laplacian: sum over calls of (I - 11'/m) on the call's members
    lap = np.diag(np.bincount(rank_i, weights=1.0 - 1.0 / m[call], minlength=n))
    for lo in range(0, m.size, CALL_CHUNK):
        on = (call >= lo) & (call < lo + CALL_CHUNK)
        inc = np.zeros((min(CALL_CHUNK, m.size - lo), n))
        inc[call[on] - lo, rank_i[on]] = 1.0
        off = inc.T @ (inc / m[lo:lo + inc.shape[0], None])
        np.fill_diagonal(off, 0.0)
        lap -= off
    reference = _components(lap, ranks)
    offsets = np.zeros(n)
    for ref in np.unique(reference):
        # comp is sorted: its first rank is the reference, offset 0; without it the
        # component's Laplacian is positive definite (a direct solve, ~10x lstsq's speed)
        rest = np.flatnonzero(reference == ref)[1:]
        if rest.size:
            offsets[rest] = np.linalg.solve(lap[np.ix_(rest, rest)], rhs[rest])
    offsets = np.rint(offsets).astype(np.int64)
    synced = rel - offsets[rank_i]
    residual = np.abs(synced - (np.bincount(call, weights=synced) / np.maximum(m, 1))[call])
    used = np.bincount(rank_i, minlength=n)
    by_rank = np.split(residual[np.argsort(rank_i, kind="stable")], np.cumsum(used)[:-1])
    med = np.array([np.median(r) if r.size else np.nan for r in by_rank])
    mx = np.full(n, -np.inf)
    np.maximum.at(mx, rank_i, residual)
    mx[used == 0] = np.nan
    return ClockSync(ranks, offsets, ranks[reference], used, med, mx)


def _components(lap: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Per rank, the index of the lowest rank connected to it through shared calls."""
    n = ranks.size
    label = np.arange(n)
    linked = (lap != 0) & ~np.eye(n, dtype=bool)
    changed = True
    while changed:  # label propagation: each rank takes its neighbours' lowest label
        low = np.where(linked, label[None, :], n).min(axis=1, initial=n)
        new = np.minimum(label, low)
        changed = bool((new != label).any())
        label = new
    return label


def offsets_from_calls(calls: list, notes: list[str]) -> tuple[dict[int, int], bool]:
    """Clock offsets (ns) per rank from every rank's :class:`~.calls.RankCalls`, and
    whether any rank was synced (False: nothing links the ranks, offsets empty); a note
    on how well they fit goes to ``notes``."""
    sync = synchronize({c.rank: ends_of(c) for c in calls})
    if len(calls) < 2 or not (sync.reference != sync.ranks).any():
        notes.append("clocks not synced: no collective of a known process group links the "
                     "ranks; cross-rank times use each rank's own clock")
        return {}, False
    offsets = dict(zip(sync.ranks.tolist(), sync.offsets.tolist()))
    worst = float(max((x for x in sync.max_abs_residual if x == x), default=0.0))
    notes.append(f"clocks synced on collective ends: offsets up to "
                 f"{max(map(abs, offsets.values())) / 1e3:.1f} µs, worst residual "
                 f"{worst / 1e3:.1f} µs")
    if worst > SYNC_WARN_NS:
        notes.append("the clock sync residual is large: cross-rank times are uncertain "
                     "(compare with --no-clock-sync)")
    return offsets, True
