"""Per-rank clock offsets from collective end times.

The members of one NCCL collective call finish together: their kernels end at one true
time (waiting happens inside the kernel). With ``e[r, c]`` the end of call ``c`` on rank
``r``'s clock and ``o[r]`` that clock's offset, ``e[r, c] - o[r] = T[c]`` for every
member. Offsets are the least-squares solution: eliminating each ``T[c]`` leaves a
ranks x ranks Laplacian system, solved per connected set of ranks with the lowest rank
of each set as its reference (offset 0): directly up to :data:`DENSE_MAX` clocks, beyond
by conjugate gradients on the same system, never built as a matrix. Calls are matched across ranks by process
group name and sequence number, else by order within the group. A point-to-point pair
(a kernel's transfers all with one peer, and the peer's kernel's all with it: both end
when their data has moved) counts as a call of its two kernels where the caller matched
it (:mod:`.diagnose.waits`); other sends / receives are left out.

The shift is kept only where it explains the ends: the ranks' own clocks (offsets 0) are
kept when the shifted residuals' mean square is more than :data:`SHIFT_EXPLAINS` of the
own clocks' (a least-squares shift always lowers it a little: on one host, where the
clock is one, the ends of a collective's kernels differ by what the ranks did, not by a
clock, and no shift makes them agree). Ranks that state one host (a ``hostname`` /
``boot_id`` in the trace's header or distributedInfo) share one clock: they are shifted
together, and a job on one host is never shifted. ``ClockSync.method`` / ``why`` say
which was chosen and why.

Offsets and residuals are int64 / float64 ns; a synced time is ``ts - offset``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..table.arrays import row_groups

CALL_CHUNK = 2048  # calls per block of the incidence matrix (block x ranks floats)
DENSE_MAX = 1024  # clocks solved directly up to this many; beyond, iteratively
SYNC_WARN_NS = 50_000  # a residual above this (50 µs) makes the clock sync suspect
# a shift is kept where the shifted residuals' mean square is at most this share of the
# own clocks' (it explains three quarters of their disagreement); genuine offsets leave
# the kernels' own spread (µs) against the offsets (ms): a share near 0
SHIFT_EXPLAINS = 0.25


@dataclass
class ClockSync:
    """Offsets (ns) per rank, and how well the calls agree with them."""

    ranks: np.ndarray       # sorted
    offsets: np.ndarray     # int64 ns: a rank's clock minus its reference's clock
    reference: np.ndarray   # the reference rank of each rank's connected set
    calls: np.ndarray       # collective calls of each rank used
    median_abs_residual: np.ndarray  # ns
    max_abs_residual: np.ndarray     # ns
    method: str = "shifted"  # "shifted", "own clocks" (offsets 0) or "none" (no calls)
    why: str = ""            # what decided it (residuals compared, hosts stated)

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
        offset (ns; null when not synced), reference rank, calls used, residuals, and
        the clocks chosen (``method``: shifted, or the ranks' own)."""
        linked = self.linked()
        return pa.table({"rank": pa.array(self.ranks, pa.int32()),
                         "synced": pa.array(linked, pa.bool_()),
                         "offset_ns": pa.array(self.offsets, pa.int64(), mask=~linked),
                         "reference_rank": pa.array(self.reference, pa.int32()),
                         "calls": pa.array(self.calls, pa.int64()),
                         "median_abs_residual_ns": pa.array(self.median_abs_residual),
                         "max_abs_residual_ns": pa.array(self.max_abs_residual),
                         "method": pa.array([self.method] * self.ranks.size, pa.string())})


@dataclass
class CollectiveEnds:
    """One rank's collective calls: process group (index into ``groups``), call number
    in that group, and end (ns, the last kernel of a coalesced call); one row per call."""

    groups: list[str]
    group: np.ndarray
    number: np.ndarray
    end: np.ndarray


def ends_of(calls) -> CollectiveEnds:
    """The calls (a :class:`~.calls.RankCalls`) that clocks are synced on: those of a
    known process group, send / receive kernels left out (see the module doc)."""
    from ..table.schema import COLLECTIVES

    keep = ((calls.collective != COLLECTIVES.index("SendRecv"))
            & (calls.group != len(calls.groups) - 1))
    return CollectiveEnds(calls.groups, calls.group[keep], calls.number[keep],
                          calls.end[keep])


def host_of(meta: dict) -> str | None:
    """The host (and boot) a rank's trace states it ran on: its ``hostname`` and
    ``boot_id`` at the top level of the trace or in its distributedInfo (PyTorch's
    profiler writes neither itself; a launcher may add them), else None. One host
    booted once is one clock."""
    said = []
    for key in ("hostname", "boot_id"):
        for where in (meta.get("header") or {}, meta.get("distributed") or {}):
            value = where.get(key) if isinstance(where, dict) else None
            if isinstance(value, str) and value:
                said.append(f"{key}={value}")
                break
    return " ".join(said) or None


def hosts_of(tables: dict) -> dict[int, str | None]:
    """The host each rank's table states (:func:`host_of` of its metadata)."""
    from ..table.schema import metadata

    return {r: host_of(metadata(t)) for r, t in tables.items()}


def synchronize(ends_by_rank: dict[int, CollectiveEnds],
                hosts: dict[int, str | None] | None = None) -> ClockSync:
    """Least-squares offsets from every rank's collective ends, or the ranks' own clocks
    where a shift does not explain the ends (see the module doc); ``hosts``: the host
    each rank states (None: unknown)."""
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
    _, call = row_groups(group, number)
    size = np.bincount(call)
    keep = size[call] >= 2  # a call seen on one rank says nothing about clocks
    rank_i, call, end = rank_i[keep], call[keep], end[keep]
    _, call = np.unique(call, return_inverse=True)
    m = np.bincount(call).astype(np.float64)
    n = ranks.size
    rel = (end - (end.min() if end.size else 0)).astype(np.float64)  # small floats
    # the clocks to solve for: one per host where every rank states its host, else per rank
    stated = [(hosts or {}).get(r) for r in ranks.tolist()]
    domain = np.arange(n)
    if n and all(h is not None for h in stated):
        _, domain = np.unique(np.array(stated, dtype=object).astype(str), return_inverse=True)
        domain = domain.ravel()
    d = int(domain.max()) + 1 if n else 0
    reference = _components(rank_i, call, n, m.size)
    d_ref = reference if d == n else _components(domain[rank_i], call, d, m.size)
    solved = (_dense_solve(domain[rank_i], call, m, rel, d, d_ref) if d <= DENSE_MAX
              else _iterative_solve(domain[rank_i], call, m, rel, d, d_ref))
    offsets = np.rint(solved[domain]).astype(np.int64)
    own = _residuals(rel, call, m, rank_i, np.zeros(n, np.int64))
    shifted = _residuals(rel, call, m, rank_i, offsets)
    method, why = _choice(own, shifted, rank_i, reference, ranks, stated, d)
    if method != "shifted":
        offsets[:] = 0
    residual = shifted if method == "shifted" else own
    used = np.bincount(rank_i, minlength=n)
    by_rank = np.split(residual[np.argsort(rank_i, kind="stable")], np.cumsum(used)[:-1])
    med = np.array([np.median(r) if r.size else np.nan for r in by_rank])
    mx = np.full(n, -np.inf)
    np.maximum.at(mx, rank_i, residual)
    mx[used == 0] = np.nan
    return ClockSync(ranks, offsets, ranks[reference], used, med, mx, method, why)


def _laplacian(unknown: np.ndarray, call: np.ndarray, m: np.ndarray, rel: np.ndarray,
               n: int) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares system of the offsets of ``n`` clocks (``unknown``: the clock of
    each end): sum over calls of (I - 11'/m) on the call's members, and its right side."""
    rhs = _rhs(unknown, call, m, rel, n)
    # per call: diag(k) - k k' / m, k the call's ends per clock
    lap = np.diag(np.bincount(unknown, minlength=n).astype(np.float64))
    for lo in range(0, m.size, CALL_CHUNK):
        on = (call >= lo) & (call < lo + CALL_CHUNK)
        inc = np.zeros((min(CALL_CHUNK, m.size - lo), n))
        np.add.at(inc, (call[on] - lo, unknown[on]), 1.0)
        lap -= inc.T @ (inc / m[lo:lo + inc.shape[0], None])
    return lap, rhs


def _rhs(unknown: np.ndarray, call: np.ndarray, m: np.ndarray, rel: np.ndarray,
         n: int) -> np.ndarray:
    """The right side of the system: per clock, its ends less their calls' means."""
    mean = np.bincount(call, weights=rel) / np.maximum(m, 1)
    return np.bincount(unknown, weights=rel - mean[call], minlength=n)


def _dense_solve(unknown: np.ndarray, call: np.ndarray, m: np.ndarray, rel: np.ndarray,
                 n: int, ref: np.ndarray) -> np.ndarray:
    """The offsets (float ns) of ``n`` clocks, each connected set's first clock (``ref``
    per clock: its set's) at 0: the Laplacian solved directly."""
    lap, rhs = _laplacian(unknown, call, m, rel, n)
    solved = np.zeros(n)
    for r in np.unique(ref):
        # the set's first clock is its reference, offset 0; without it the set's
        # Laplacian is positive definite (a direct solve, ~10x lstsq's speed)
        rest = np.flatnonzero(ref == r)[1:]
        if rest.size:
            solved[rest] = np.linalg.solve(lap[np.ix_(rest, rest)], rhs[rest])
    return solved


def _iterative_solve(unknown: np.ndarray, call: np.ndarray, m: np.ndarray, rel: np.ndarray,
                     n: int, ref: np.ndarray) -> np.ndarray:
    """:func:`_dense_solve` without the n x n matrix (16,384 clocks would need 2 GB and
    hours of a dense solve): conjugate gradients on the same positive definite system
    (each set's reference clock held at 0), the Laplacian applied from the ends in
    O(ends), preconditioned by its diagonal; to a residual of 1e-12 of the right side
    (the offsets within far less than a ns of the direct solve's)."""
    free = np.ones(n, bool)
    free[np.unique(ref)] = False
    b = np.where(free, _rhs(unknown, call, m, rel, n), 0.0)
    # the diagonal: per clock its ends, less per call (its ends in the call)^2 / m
    pair, k = np.unique(call * n + unknown, return_counts=True)
    diag = np.bincount(unknown, minlength=n) - np.bincount(
        pair % n, weights=k.astype(np.float64) ** 2 / m[pair // n], minlength=n)
    inv = np.where(free & (diag > 0), 1.0 / np.where(diag > 0, diag, 1.0), 0.0)

    def apply(x: np.ndarray) -> np.ndarray:
        xe = x[unknown]
        mean = np.bincount(call, weights=xe, minlength=m.size) / np.maximum(m, 1)
        return np.where(free, np.bincount(unknown, weights=xe - mean[call], minlength=n),
                        0.0)

    x = np.zeros(n)
    r = b.copy()
    z = inv * r
    d = z.copy()
    rz = float(r @ z)
    goal = 1e-24 * float(b @ b)
    for _ in range(max(10 * n, 1000)):
        if float(r @ r) <= goal:
            break
        q = apply(d)
        step = rz / float(d @ q)
        x += step * d
        r -= step * q
        z = inv * r
        rz, before = float(r @ z), rz
        d = z + (rz / before) * d
    return x


def _residuals(rel: np.ndarray, call: np.ndarray, m: np.ndarray, rank_i: np.ndarray,
               offsets: np.ndarray) -> np.ndarray:
    """|end - offset - the call's mean of that| per end (ns)."""
    synced = rel - offsets[rank_i]
    return np.abs(synced - (np.bincount(call, weights=synced) / np.maximum(m, 1))[call])


def _choice(own: np.ndarray, shifted: np.ndarray, rank_i: np.ndarray, reference: np.ndarray,
            ranks: np.ndarray, stated: list, clocks: int) -> tuple[str, str]:
    """("shifted" or "own clocks" or "none", why): see the module doc."""
    if not own.size:
        return "none", "no collective links the ranks"
    hosts = sorted({h for h in stated if h is not None})
    if clocks == 1 and len(ranks) > 1:
        return "own clocks", f"every rank states one host ({hosts[0]}): one clock, not shifted"
    ms_own, ms_shift = float(np.mean(own ** 2)), float(np.mean(shifted ** 2))
    said = (f"collective ends disagree by {np.sqrt(ms_own) / 1e3:.1f} µs (rms) on the "
            f"ranks' own clocks, {np.sqrt(ms_shift) / 1e3:.1f} µs shifted")
    where = f" ({len(hosts)} hosts stated, ranks of one host shifted together)" \
        if len(hosts) > 1 and clocks < len(ranks) else ""
    if ms_own < 1.0:  # below a nanosecond (rms): they agree as they are
        return "own clocks", "collective ends agree on the ranks' own clocks: not shifted"
    if ms_shift > SHIFT_EXPLAINS * ms_own:
        return "own clocks", (said + ": no shift explains them (one clock, as on one host), "
                              "offsets 0")
    return "shifted", said + where


def _components(unknown: np.ndarray, call: np.ndarray, n: int, calls: int) -> np.ndarray:
    """Per clock (of ``n``; ``unknown``: the clock of each end of ``call``), the index of
    the lowest clock connected to it through shared calls (O(ends) per round, rounds
    as many as the longest chain of calls between two clocks)."""
    label = np.arange(n)
    while True:  # label propagation: each clock takes its calls' lowest label
        low = np.full(calls, n)
        np.minimum.at(low, call, label[unknown])
        new = label.copy()
        np.minimum.at(new, unknown, low[call])
        if np.array_equal(new, label):
            return label
        label = new


def joined_ends(a: CollectiveEnds, b: CollectiveEnds | None) -> CollectiveEnds:
    """The calls of ``a`` and ``b`` (None: none) of one rank, in one set."""
    if b is None:
        return a
    groups = a.groups + b.groups
    return CollectiveEnds(groups, np.concatenate([a.group, b.group + len(a.groups)]),
                          np.concatenate([a.number, b.number]),
                          np.concatenate([a.end, b.end]))


def offsets_from_calls(calls: list, notes: list[str],
                       hosts: dict[int, str | None] | None = None,
                       pairs: dict[int, CollectiveEnds] | None = None
                       ) -> tuple[dict[int, int], str]:
    """Clock offsets (ns) per rank from every rank's :class:`~.calls.RankCalls` (and its
    matched point-to-point ``pairs``), and how they were put on one clock ("shifted",
    "own clocks", or "none": nothing links the ranks, offsets empty); a note on how well they fit and why they were
    chosen goes to ``notes``; ``hosts``: the host each rank states (:func:`host_of`)."""
    sync = synchronize({c.rank: joined_ends(ends_of(c), (pairs or {}).get(c.rank))
                        for c in calls}, hosts)
    return offsets_of(sync, notes)


def offsets_of(sync: ClockSync, notes: list[str]) -> tuple[dict[int, int], str]:
    """The offsets of ``sync`` per rank and the method that put them on one clock (see
    :func:`offsets_from_calls`); the notes on them go to ``notes``."""
    if sync.ranks.size < 2 or not (sync.reference != sync.ranks).any():
        notes.append("clocks not synced: no collective of a known process group links the "
                     "ranks; cross-rank times use each rank's own clock")
        return {}, "none"
    offsets = dict(zip(sync.ranks.tolist(), sync.offsets.tolist()))
    worst = float(max((x for x in sync.max_abs_residual if x == x), default=0.0))
    notes.append(sync_note(sync))
    if worst > SYNC_WARN_NS and sync.method == "shifted":
        notes.append("the clock sync residual is large: cross-rank times are uncertain "
                     "(compare with --no-clock-sync)")
    elif worst > SYNC_WARN_NS:
        notes.append(f"a collective's kernels end up to {worst / 1e3:.1f} µs apart on one "
                     "clock (they should end together: ranks taking turns on a GPU, or "
                     "clocks no shift fits): cross-rank waits are uncertain")
    return offsets, sync.method


# how every note :func:`offsets_of` writes begins (:func:`is_clock_note`)
_CLOCK_NOTES = ("clocks synced on collective ends", "clocks: the ranks' own",
                "clocks not synced", "the clock sync residual is large",
                "a collective's kernels end up to")


def is_clock_note(note: str) -> bool:
    """Whether ``note`` is one :func:`offsets_of` wrote (how the clocks were synced)."""
    return note.startswith(_CLOCK_NOTES)


def sync_note(sync: ClockSync) -> str:
    """One line: the clocks chosen, their offsets and residual, and why."""
    worst = float(max((x for x in sync.max_abs_residual if x == x), default=0.0))
    if sync.method == "shifted":
        return (f"clocks synced on collective ends: offsets up to "
                f"{np.abs(sync.offsets).max(initial=0) / 1e3:.1f} µs, worst residual "
                f"{worst / 1e3:.1f} µs ({sync.why})")
    return (f"clocks: the ranks' own, not shifted, worst residual {worst / 1e3:.1f} µs "
            f"({sync.why})")
