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
import pyarrow.compute as pc

P2P = {"Send", "Recv", "SendRecv", "send", "recv", "_coalescing_send", "_coalescing_recv"}


@dataclass
class ClockSync:
    """Offsets (ns) per rank, and how well the calls agree with them."""

    ranks: np.ndarray       # sorted
    offsets: np.ndarray     # int64 ns: a rank's clock minus its reference's clock
    reference: np.ndarray   # the reference rank of each rank's connected set
    calls: np.ndarray       # collective calls of each rank used
    median_abs_residual: np.ndarray  # ns
    max_abs_residual: np.ndarray     # ns

    def offset_of(self, rank: int) -> int:
        i = np.searchsorted(self.ranks, rank)
        return int(self.offsets[i]) if i < self.ranks.size and self.ranks[i] == rank else 0

    def table(self) -> pa.Table:
        return pa.table({"rank": pa.array(self.ranks, pa.int32()),
                         "offset_ns": pa.array(self.offsets, pa.int64()),
                         "reference_rank": pa.array(self.reference, pa.int32()),
                         "calls": pa.array(self.calls, pa.int64()),
                         "median_abs_residual_ns": pa.array(self.median_abs_residual),
                         "max_abs_residual_ns": pa.array(self.max_abs_residual)})


def collective_ends(rank: int, table: pa.Table) -> dict[tuple[str, int], int]:
    """(process group name, call number) -> end (ns) of each collective call of a rank."""
    comm = table.filter(pc.and_(pc.equal(table["kind"], "COMM"),
                                pc.is_valid(table["pg_name"])))
    if not comm.num_rows:
        return {}
    coll = comm["collective"].cast(pa.string()).fill_null("").to_pylist()
    pg = comm["pg_name"].cast(pa.string()).to_pylist()
    seq = comm["seq"].to_pylist()
    end = (comm["ts"].to_numpy() + comm["dur"].fill_null(0).to_numpy()).tolist()
    ts = comm["ts"].to_numpy().tolist()
    out: dict[tuple[str, int], int] = {}
    order: dict[str, int] = {}
    for i in np.argsort(ts, kind="stable").tolist():
        if coll[i] in P2P:
            continue
        n = seq[i] if seq[i] is not None else order.get(pg[i], 0)
        order[pg[i]] = order.get(pg[i], 0) + 1
        key = (pg[i], int(n))
        out[key] = max(out.get(key, end[i]), end[i])  # a coalesced call: its last kernel
    return out


def synchronize(ends_by_rank: dict[int, dict[tuple[str, int], int]]) -> ClockSync:
    """Least-squares offsets from every rank's collective ends (see the module doc)."""
    ranks = np.array(sorted(ends_by_rank), dtype=np.int64)
    index = {int(r): i for i, r in enumerate(ranks)}
    calls: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r, ends in ends_by_rank.items():
        for key, e in ends.items():
            calls.setdefault(key, []).append((index[r], e))
    n = ranks.size
    lap = np.zeros((n, n))
    rhs = np.zeros(n)
    used = np.zeros(n, dtype=np.int64)
    members = [m for m in calls.values() if len(m) >= 2]
    base = min((e for m in members for _, e in m), default=0)  # keep the floats small
    for m in members:
        idx = np.array([i for i, _ in m])
        e = np.array([v - base for _, v in m], dtype=np.float64)
        k = idx.size
        lap[np.ix_(idx, idx)] -= 1.0 / k
        lap[idx, idx] += 1.0
        rhs[idx] += e - e.mean()
        used[idx] += 1
    reference = _components(lap, ranks)
    offsets = np.zeros(n)
    for ref in np.unique(reference):
        comp = np.flatnonzero(reference == ref)
        sol = np.linalg.lstsq(lap[np.ix_(comp, comp)], rhs[comp], rcond=None)[0]
        offsets[comp] = sol - sol[0]  # comp is sorted: its first rank is the reference
    offsets = np.rint(offsets).astype(np.int64)
    residuals: list[list[float]] = [[] for _ in range(n)]
    for m in members:
        idx = np.array([i for i, _ in m])
        synced = np.array([v for _, v in m], dtype=np.int64) - offsets[idx]
        common = synced.mean()
        for i, s in zip(idx.tolist(), synced.tolist()):
            residuals[i].append(abs(s - common))
    med = np.array([np.median(r) if r else np.nan for r in residuals])
    mx = np.array([max(r) if r else np.nan for r in residuals])
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
