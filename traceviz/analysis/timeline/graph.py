"""One step's dependencies, as the timers show them, for re-simulation (:mod:`.simulate`).

Nodes are the step's pieces (:mod:`.flatten`: an op cut around the ops inside it).
Each starts after the piece before it on its rank (the first: after the step began, the earliest start of any rank's first op)
and, where the timeline has no pipeline transfers, after the piece it receives from
(:func:`implicit_deps`), plus its **gap** (its measured start - the measured end of the
later of those two; negative where timers overlap). A local piece (compute, data
loading, optimizer, other) then runs its duration. A **communication** op waits for its
peers: it ends at the latest start among them plus its **transfer** (given, else its
measured end - that latest start, within [0, its duration]):

* pipeline transfers pair in order: the k-th op of a rank that talks to the next stage
  (``forward-send``, ``backward-recv``, ``forward-send-backward-recv``) with the k-th
  of the next stage's rank that talks to the previous one (``forward-recv``,
  ``backward-send``, ``backward-send-forward-recv``; the ``*-send-*-recv`` ops of
  interleaving talk both ways and chain their pairs, under interleaving around the
  ring); the next stage's rank is the one with the same DP and TP rank;
* a collective's peers are the ranks of its group with the same op and occurrence in
  the step: data-parallel ops (``grads-reduce-scatter``, ``params-all-gather``,
  ``all-grads-sync``) the ranks of the same stage and TP rank, tensor-parallel ones
  (``non-tensor-parallel-grads-all-reduce``) of the same stage and DP rank,
  ``embedding-grads-all-reduce`` the first and last stage's of one pipeline (a middle
  stage's runs alone), ``conditional-embedder-grads-all-reduce`` every stage's.

Where peers do not line up (a link with different numbers of ops on its two sides, a
group whose ranks ran an op a different number of times) the ops run alone with their
measured duration, and a note says where.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from ...table.arrays import row_groups
from .data import OpTimeline
from .flatten import Flat
from .ops import BOTH, COMMUNICATION, COMPUTE, DP, EMB, NEXT, P2P, PPG, PREV, TP


@dataclass
class StepGraph:
    """One step's nodes (local indices 0..n-1; see the module doc). ``rows``: each
    node's op row in the timeline; ``group``: its communication group (-1: local);
    ``t0``: when the step began (ns)."""

    step: int
    t0: int
    rows: np.ndarray      # int64
    pred: np.ndarray      # int32, -1: the rank's first
    dep: np.ndarray       # int32, -1: none
    gap: np.ndarray       # int64 ns
    dur: np.ndarray       # int64 ns (local nodes)
    group: np.ndarray     # int32, -1: local
    transfer: np.ndarray  # int64 ns (communication nodes)
    end: np.ndarray       # int64 ns, measured
    uncoupled: int        # communication nodes left alone (peers did not line up)
    links: tuple | None = None  # the adjacency :mod:`.simulate` makes once

    def __len__(self) -> int:
        return len(self.rows)


class Layout:
    """Per rank index its stage, DP, TP rank; its pipeline neighbours' rank indexes."""

    def __init__(self, tl: OpTimeline, chunks: int | None = None) -> None:
        """``chunks``: model chunks per stage (default: from the rows of ``tl``)."""
        self.stage, self.dp, self.tp = tl.stage, tl.dp, tl.tp
        self.pp = int(tl.stage.max()) + 1
        self.chunks = tl.chunks if chunks is None else chunks
        ring = self.chunks > 1
        where = {(int(s), int(d), int(t)): i for i, (s, d, t) in
                 enumerate(zip(tl.stage, tl.dp, tl.tp))}
        n = len(tl.ranks)
        self.next = np.full(n, -1, dtype=np.int64)
        self.prev = np.full(n, -1, dtype=np.int64)
        for i in range(n):
            s, d, t = int(tl.stage[i]), int(tl.dp[i]), int(tl.tp[i])
            nxt = s + 1 if s + 1 < self.pp else (0 if ring else -1)
            prv = s - 1 if s > 0 else (self.pp - 1 if ring else -1)
            self.next[i] = where.get((nxt, d, t), -1) if nxt >= 0 and self.pp > 1 else -1
            self.prev[i] = where.get((prv, d, t), -1) if prv >= 0 and self.pp > 1 else -1


def step_graph(flat: Flat, layout: Layout, lo: int, hi: int, has_p2p: bool) -> StepGraph:
    """The graph of the step whose rows are ``lo:hi`` (see the module doc)."""
    tl = flat.timeline
    rows, start, dur = flat.pieces(lo, hi)
    end = start + dur
    n = len(rows)
    ri = np.searchsorted(tl.ranks, tl.rank[rows])
    first = np.r_[True, ri[1:] != ri[:-1]]
    pred = np.where(first, -1, np.arange(n) - 1).astype(np.int32)
    ops = tl.op[rows]
    cls = tl.classes[ops]
    single = np.bincount(rows - rows.min(), minlength=1)[rows - rows.min()] == 1 \
        if n else np.zeros(0, bool)
    comm = np.isin(cls, COMMUNICATION) & single
    group = np.full(n, -1, dtype=np.int64)
    uncoupled = 0
    next_id = 0
    if has_p2p:
        g, next_id, bad = _p2p_groups(ri, comm & (cls == P2P), tl.sides[ops], layout)
        group = np.where(g >= 0, g, group)
        uncoupled += bad
    for klass in (DP, TP, EMB, PPG):
        m = comm & (cls == klass)
        if m.any():
            g, used, bad = _collective_groups(ri, ops, m, klass, layout, next_id)
            group = np.where(g >= 0, g, group)
            next_id += used
            uncoupled += bad
    dep = implicit_deps(tl, layout, rows, ri) if not has_p2p and layout.pp > 1 \
        else np.full(n, -1, dtype=np.int32)
    t0 = int(start[first].min()) if n else 0
    before = np.where(pred >= 0, end[np.maximum(pred, 0)], t0)
    before = np.where(dep >= 0, np.maximum(before, end[np.maximum(dep, 0)]), before)
    gap = start - before
    given = tl.transfer[rows] if tl.transfer is not None else np.full(n, -1, np.int64)
    latest = np.zeros(max(next_id, 1), dtype=np.int64)
    coupled = group >= 0
    if coupled.any():
        latest[:] = np.iinfo(np.int64).min
        np.maximum.at(latest, group[coupled], start[coupled])
    inferred = np.clip(end - latest[np.maximum(group, 0)], 0, dur)
    transfer = np.where(coupled, np.where(given >= 0, given, inferred), 0)
    return StepGraph(int(tl.step[rows[0]]) if n else 0, t0, rows, pred, dep, gap,
                     dur.astype(np.int64), group.astype(np.int32), transfer.astype(np.int64),
                     end, uncoupled)


def _cumcount(keys: np.ndarray) -> np.ndarray:
    """Per element its occurrence among the equal ``keys`` before it (keys grouped)."""
    if not len(keys):
        return keys.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, len(sk)]))
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = np.arange(len(keys)) - first
    return out


def _p2p_groups(ri, m, sides, layout: Layout) -> tuple[np.ndarray, int, int]:
    """Pipeline transfers paired in order along each link (a, next(a)), chained pairs
    joined; (group per node or -1, groups, nodes left alone)."""
    n = len(ri)
    out = np.full(n, -1, dtype=np.int64)
    to_next = np.flatnonzero(m & ((sides == NEXT) | (sides == BOTH)))
    to_prev = np.flatnonzero(m & ((sides == PREV) | (sides == BOTH)))
    # a link is named by its sending-side rank (-1: no neighbour on that side)
    link_n = np.where(layout.next[ri[to_next]] >= 0, ri[to_next], -1)
    link_p = layout.prev[ri[to_prev]]
    ok_n, ok_p = link_n >= 0, link_p >= 0
    nr = len(layout.next)
    cn = np.bincount(link_n[ok_n], minlength=nr)
    cp = np.bincount(link_p[ok_p], minlength=nr)
    good = (cn == cp) & (cn > 0)
    sel_n = to_next[ok_n & good[np.maximum(link_n, 0)]]
    sel_p = to_prev[ok_p & good[np.maximum(link_p, 0)]]
    # nodes are sorted by rank then time: within a link both sides are in order
    a = sel_n[np.argsort(ri[sel_n], kind="stable")]
    b = sel_p[np.argsort(layout.prev[ri[sel_p]], kind="stable")]
    label = _union(n, a, b)
    paired = np.zeros(n, dtype=bool)
    paired[a] = True
    paired[b] = True
    ids = np.unique(label[paired], return_inverse=True)[1]
    out[np.flatnonzero(paired)] = ids
    alone = int((m & ~paired).sum())
    return out, int(ids.max()) + 1 if len(ids) else 0, alone


@nb.njit(cache=True)
def _union(n, a, b):  # pragma: no cover (compiled)
    parent = np.arange(n)
    for i in range(len(a)):
        x, y = a[i], b[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x != y:
            parent[max(x, y)] = min(x, y)
    for i in range(n):
        x = i
        while parent[x] != x:
            x = parent[x]
        parent[i] = x
    return parent


def _collective_groups(ri, ops, m, klass: int, layout: Layout, base: int
                       ) -> tuple[np.ndarray, int, int]:
    """Collective calls grouped by op, group and occurrence (see the module doc); a group
    whose ranks ran the op different numbers of times in the step is left alone."""
    n = len(ri)
    out = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(m)
    r = ri[idx]
    stage, dp, tp = layout.stage[r], layout.dp[r], layout.tp[r]
    if klass == DP:
        a, b = stage, tp
    elif klass == TP:
        a, b = stage, dp
    else:
        a, b = dp, tp
    if klass == EMB:  # the first and last stage's only
        end_stage = (stage == 0) | (stage == layout.pp - 1)
        if layout.pp < 2:
            end_stage[:] = False
        idx, r, a, b = idx[end_stage], r[end_stage], a[end_stage], b[end_stage]
    if not len(idx):
        return out, 0, 0
    op = ops[idx].astype(np.int64)
    k = _cumcount(r.astype(np.int64) * 40000 + op)
    firsts, gid = row_groups(op, a.astype(np.int64), b.astype(np.int64))
    # every rank of a group must run the op equally often
    first, pair = row_groups(gid, r)
    of_group, times = gid[first], np.bincount(pair)  # per (group, rank)
    lo = np.full(len(firsts), np.iinfo(np.int64).max)
    hi = np.zeros(len(firsts), dtype=np.int64)
    np.minimum.at(lo, of_group, times)
    np.maximum.at(hi, of_group, times)
    members = np.bincount(of_group, minlength=len(firsts))  # ranks per group
    ok = (lo == hi)[gid]
    alone = ~ok
    ok &= (members > 1)[gid]  # a group of one rank: no peer to wait for, run alone
    call = row_groups(gid[ok], k[ok])[1]
    out[idx[ok]] = base + call
    return out, int(call.max()) + 1 if len(call) else 0, int(alone.sum())


def implicit_deps(tl: OpTimeline, layout: Layout, rows: np.ndarray, ri: np.ndarray
                  ) -> np.ndarray:
    """Without pipeline transfers in the timeline: each micro-batch's forward (backward)
    compute after the same micro-batch's on the stage before (after), across the model
    chunks under interleaving; the first piece of the receiving op after the last piece
    of the sending one (-1: none)."""
    n = len(rows)
    dep = np.full(n, -1, dtype=np.int32)
    mb = tl.microbatch[rows]
    is_comp = (tl.classes[tl.op[rows]] == COMPUTE) & (mb >= 0)
    if not is_comp.any():
        return dep
    fwd = np.array([nm == "forward-compute" for nm in tl.names])[tl.op[rows]]
    st = layout.stage[ri]
    ch = tl.chunk[rows].astype(np.int64)
    pp, chunks, nr = layout.pp, layout.chunks, len(layout.stage)
    phase = fwd.astype(np.int64)

    def key(chunk, rank):
        return ((phase * chunks + chunk) * nr + rank) * (1 << 20) + mb

    first_piece = np.r_[True, rows[1:] != rows[:-1]]
    last_piece = np.r_[rows[1:] != rows[:-1], True]
    own = key(ch, ri.astype(np.int64))
    # the sender: forward from the stage before (the last stage's previous chunk for
    # the first stage), backward from the stage after
    src = np.where(fwd, layout.prev[ri], layout.next[ri])
    src_chunk = np.where(fwd, np.where(st > 0, ch, ch - 1),
                         np.where(st < pp - 1, ch, ch + 1))
    valid = is_comp & first_piece & (src >= 0) & (src_chunk >= 0) & (src_chunk < chunks) \
        & (mb < (1 << 20))
    want = key(src_chunk, np.maximum(src, 0))
    ends = np.flatnonzero(is_comp & last_piece)
    order = np.argsort(own[ends], kind="stable")
    keys = own[ends][order]
    pos = np.searchsorted(keys, want)
    hit = valid & (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == want)
    dep[hit] = ends[order][pos[hit]]
    return dep
