"""Re-simulation of one step's graph (:mod:`.graph`) with its durations, transfers and
gaps replaced: each node starts when the node before it on its rank (and the one it
receives from, where the graph has one) has ended, plus its gap; a local node ends its
duration later; a communication node ends when every node of its group has started,
its transfer later. With the measured values it gives back the measured ends (where the
timers are consistent: :attr:`Simulated.fit_ns` says how far they are)."""
from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from ...errors import TraceVizError
from .graph import StepGraph


@dataclass
class Simulated:
    """Per node its re-simulated start and end (ns); ``step_ns``: the step's time (the
    latest end - the step's start)."""

    start: np.ndarray
    end: np.ndarray
    step_ns: int


def simulate(g: StepGraph, dur: np.ndarray | None = None,
             transfer: np.ndarray | None = None, gap: np.ndarray | None = None
             ) -> Simulated:
    """The step re-run with ``dur`` / ``transfer`` / ``gap`` in place of the graph's
    (None: the graph's own)."""
    n = len(g)
    if n == 0:
        return Simulated(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
    nxt, ndep, deps, gptr, members = links(g)
    start, end, done = _run(g.pred, g.dep, g.gap if gap is None else gap,
                            g.dur if dur is None else dur,
                            g.transfer if transfer is None else transfer, g.group,
                            nxt, ndep, deps, gptr, members, g.t0)
    if done < n:
        raise TraceVizError(f"step {g.step}: {n - done:,} ops wait on each other in a "
                            "circle: their peers do not line up")
    return Simulated(start, end, int(end.max() - g.t0))


def links(g: StepGraph) -> tuple:
    """The graph's adjacency, made once for all its re-simulations."""
    if g.links is None:
        ngroups = int(g.group.max()) + 1 if (g.group >= 0).any() else 0
        g.links = _links(g.pred, g.dep, g.group, ngroups)
    return g.links


@nb.njit(cache=True, nogil=True)
def _links(pred, dep, group, ngroups):  # pragma: no cover (compiled)
    """The next node on each rank, each node's dependants (CSR) and each group's
    members (CSR)."""
    n = len(pred)
    nxt = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        if pred[i] >= 0:
            nxt[pred[i]] = i
    ndep, deps = _csr(dep, n)
    gptr, members = _csr(group, ngroups)
    return nxt, ndep, deps, gptr, members


@nb.njit(cache=True, nogil=True)
def _csr(key, nkeys):  # pragma: no cover (compiled)
    """The nodes of each key 0..nkeys-1 (-1: none), in node order: (pointers, nodes)."""
    ptr = np.zeros(nkeys + 1, dtype=np.int64)
    for i in range(len(key)):
        if key[i] >= 0:
            ptr[key[i] + 1] += 1
    for k in range(nkeys):
        ptr[k + 1] += ptr[k]
    nodes = np.empty(ptr[nkeys], dtype=np.int64)
    fill = ptr[:nkeys].copy()
    for i in range(len(key)):
        if key[i] >= 0:
            nodes[fill[key[i]]] = i
            fill[key[i]] += 1
    return ptr, nodes


@nb.njit(cache=True, nogil=True)  # re-simulations of a step run on threads
def _run(pred, dep, gap, dur, transfer, group, nxt, ndep, deps, gptr,
         members, t0):  # pragma: no cover (compiled)
    n = len(pred)
    ngroups = len(gptr) - 1
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    waiting = np.zeros(n, dtype=np.int32)
    for i in range(n):
        if pred[i] >= 0:
            waiting[i] += 1
        if dep[i] >= 0:
            waiting[i] += 1
    arrived = np.zeros(ngroups, dtype=np.int64)
    latest = np.full(ngroups, np.iinfo(np.int64).min, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)   # nodes ready to start
    head = 0
    tail = 0
    for i in range(n):
        if waiting[i] == 0:
            queue[tail] = i
            tail += 1
    finished = np.empty(n, dtype=np.int64)  # nodes ended, their dependants to release
    fh = 0
    ft = 0
    done = 0
    while head < tail or fh < ft:
        if head < tail:
            i = queue[head]
            head += 1
            before = t0
            if pred[i] >= 0:
                before = end[pred[i]]
            if dep[i] >= 0 and end[dep[i]] > before:
                before = end[dep[i]]
            start[i] = before + gap[i]
            g = group[i]
            if g < 0:
                end[i] = start[i] + dur[i]
                finished[ft] = i
                ft += 1
            else:
                arrived[g] += 1
                if start[i] > latest[g]:
                    latest[g] = start[i]
                if arrived[g] == gptr[g + 1] - gptr[g]:
                    for k in range(gptr[g], gptr[g + 1]):
                        m = members[k]
                        end[m] = latest[g] + transfer[m]
                        finished[ft] = m
                        ft += 1
            continue
        i = finished[fh]
        fh += 1
        done += 1
        j = nxt[i]
        if j >= 0:
            waiting[j] -= 1
            if waiting[j] == 0:
                queue[tail] = j
                tail += 1
        for k in range(ndep[i], ndep[i + 1]):
            j = deps[k]
            waiting[j] -= 1
            if waiting[j] == 0:
                queue[tail] = j
                tail += 1
    return start, end, done
