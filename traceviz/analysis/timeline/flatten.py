"""Timers inside timers made a sequence: on each rank and step the ops follow each other
as pieces. A wrapper (a timer around others only: ``forward-backward``) is left out; an
op that holds others (``forward-compute`` around ``batch-generator``) is cut into its
pieces before, between and after them, each keeping its op (its row). Ops that overlap
without one holding the other (asynchronous timers) stay as they are: the later one
starts before the earlier ends (:mod:`.graph` keeps that overlap)."""
from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from .data import OpTimeline
from .ops import WRAPPER


@dataclass
class Pieces:
    """Per piece (sorted by step, rank and start) its op's ``row`` in the timeline
    (after wrappers were left out: see :attr:`timeline`), ``start`` and ``dur`` (ns)."""

    timeline: OpTimeline
    row: np.ndarray    # int64
    start: np.ndarray  # int64
    dur: np.ndarray    # int64
    nested: int        # ops held by another op
    overlapping: int   # ops overlapping another without being held


def flatten(tl: OpTimeline) -> Pieces:
    """The timeline's ops as pieces (see the module doc); a note names what was left
    out or cut."""
    wrapped = tl.classes[tl.op] == WRAPPER
    if wrapped.any():
        names = sorted({tl.names[i] for i in np.unique(tl.op[wrapped])})
        tl = tl.take(~wrapped)
        tl.notes.append(f"{int(wrapped.sum()):,} wrapper timers ({', '.join(names)}) left "
                        "out: the ops inside them are timed")
    seg = np.flatnonzero(np.r_[True, (tl.step[1:] != tl.step[:-1])
                               | (tl.rank[1:] != tl.rank[:-1])]).astype(np.int64)
    seg = np.r_[seg, len(tl)].astype(np.int64)
    empty = np.empty(0, dtype=np.int64)
    n_out, nested, overlap = _walk(tl.start, tl.dur, seg, empty, empty, empty, False)
    if not nested and not overlap:  # every op one piece: the rows themselves
        row, start, dur = np.arange(len(tl), dtype=np.int64), tl.start, tl.dur
    else:
        row, start, dur = (np.empty(n_out, dtype=np.int64) for _ in range(3))
        _walk(tl.start, tl.dur, seg, row, start, dur, True)
    if nested:
        tl.notes.append(f"{nested:,} ops run inside another op on their rank (e.g. "
                        "batch-generator inside forward-compute): the outer op is cut "
                        "around them")
    if overlap:
        tl.notes.append(f"{overlap:,} ops overlap the op before them on their rank "
                        "without being inside it: kept overlapping")
    return Pieces(tl, row, start, dur, nested, overlap)


DEPTH = 64  # ops open inside each other at most (deeper ones are kept whole)


@nb.njit(cache=True)
def _walk(start, dur, seg, row, pst, pdur, emit):  # pragma: no cover (compiled)
    """Counts the pieces (``emit`` False) or writes them, in time order: an open op's
    piece up to each op inside it starts, its last piece when it ends. Returns (pieces,
    nested ops, overlapping ops)."""
    k = 0
    nested = 0
    overlap = 0
    stack = np.empty(DEPTH, dtype=np.int64)
    cursor = np.empty(DEPTH, dtype=np.int64)  # where each open op's next piece starts
    pieces = np.zeros(DEPTH, dtype=np.int64)  # pieces each open op has
    for s in range(len(seg) - 1):
        depth = 0
        for i in range(seg[s], seg[s + 1]):
            st = start[i]
            en = st + dur[i]
            while depth > 0:
                top = stack[depth - 1]
                tend = start[top] + dur[top]
                if tend <= st:
                    pass  # closed below
                elif en <= tend:
                    if st > cursor[depth - 1]:  # the open op up to the one inside it
                        if emit:
                            row[k] = top
                            pst[k] = cursor[depth - 1]
                            pdur[k] = st - cursor[depth - 1]
                        k += 1
                        pieces[depth - 1] += 1
                    nested += 1
                    break
                else:
                    overlap += 1
                # the open op ends: its last piece
                if tend > cursor[depth - 1] or pieces[depth - 1] == 0:
                    if emit:
                        row[k] = top
                        pst[k] = cursor[depth - 1]
                        pdur[k] = max(tend - cursor[depth - 1], 0)
                    k += 1
                depth -= 1
                if depth > 0:
                    cursor[depth - 1] = max(cursor[depth - 1], tend)
            if depth < DEPTH:
                stack[depth] = i
                cursor[depth] = st
                pieces[depth] = 0
                depth += 1
            else:
                overlap += 1
                if emit:
                    row[k] = i
                    pst[k] = st
                    pdur[k] = dur[i]
                k += 1
        while depth > 0:
            top = stack[depth - 1]
            tend = start[top] + dur[top]
            if tend > cursor[depth - 1] or pieces[depth - 1] == 0:
                if emit:
                    row[k] = top
                    pst[k] = cursor[depth - 1]
                    pdur[k] = max(tend - cursor[depth - 1], 0)
                k += 1
            depth -= 1
            if depth > 0:
                cursor[depth - 1] = max(cursor[depth - 1], tend)
    return k, nested, overlap
