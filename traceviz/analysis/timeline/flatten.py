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
class Flat:
    """The timeline with its wrappers left out (:attr:`timeline`), the ops that hold
    others (``outer``, sorted rows) with the time of what runs inside them (``inner``,
    ns), how many ops are held by another and overlap one, and each step's rows (step,
    first row, end)."""

    timeline: OpTimeline
    outer: np.ndarray
    inner: np.ndarray
    nested: int
    overlapping: int
    steps: list[tuple[int, int, int]]
    wrapped: int = 0                      # wrapper timers left out
    wrappers: tuple[str, ...] = ()        # their names, sorted

    @property
    def step_numbers(self) -> np.ndarray:
        """Its steps' numbers (int64, ascending)."""
        return np.array([s for s, _, _ in self.steps], dtype=np.int64)

    def exclusive(self, rows: np.ndarray) -> np.ndarray:
        """The exclusive time of ``rows`` (ns, int64): their duration less what runs
        inside them."""
        out = self.timeline.dur[rows].astype(np.int64)
        if len(self.outer):
            pos = np.minimum(np.searchsorted(self.outer, rows), len(self.outer) - 1)
            hit = self.outer[pos] == rows
            out[hit] -= self.inner[pos[hit]]
        return out

    def pieces(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, start, dur) of every piece of rows ``lo:hi`` (whole steps), in order."""
        tl = self.timeline
        start, dur = tl.start[lo:hi], tl.dur[lo:hi]
        if not self.nested and not self.overlapping:  # every op one piece
            return np.arange(lo, hi, dtype=np.int64), start, dur
        seg = _segments(tl.step[lo:hi], tl.rank[lo:hi])
        empty = np.empty(0, dtype=np.int64)
        n, _, _ = _walk(start, dur, seg, empty, empty, empty, 0)
        row, pst, pdur = (np.empty(n, dtype=np.int64) for _ in range(3))
        _walk(start, dur, seg, row, pst, pdur, 1)
        return row + lo, pst, pdur


def _segments(step: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Where each (step, rank)'s rows begin, and the end."""
    seg = np.flatnonzero(np.r_[True, (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])])
    return np.r_[seg, len(step)].astype(np.int64)


def flatten(tl: OpTimeline) -> Flat:
    """The timeline's ops as a sequence on each rank (see the module doc), wrappers left
    out in place; a note names what was left out or cut."""
    wrapped = tl.classes[tl.op] == WRAPPER
    n_wrapped, names = int(wrapped.sum()), []
    if n_wrapped:
        names = sorted({tl.names[i] for i in np.unique(tl.op[wrapped])})
        keep = ~wrapped
        for name in ("rank", "step", "op", "start", "dur", "microbatch", "chunk"):
            setattr(tl, name, getattr(tl, name)[keep])  # one column at a time
        if tl.transfer is not None:
            tl.transfer = tl.transfer[keep]
    del wrapped
    cut = np.flatnonzero(np.r_[True, tl.step[1:] != tl.step[:-1], True]) if len(tl) \
        else np.zeros(1, np.int64)  # (wrappers alone: no step)
    steps = [(int(tl.step[a]), int(a), int(b)) for a, b in zip(cut[:-1], cut[1:])]
    empty = np.empty(0, dtype=np.int64)
    nested = overlap = 0
    outer, inner = [], []
    for _, lo, hi in steps:  # a step at a time: its exclusive times, the outer ops kept
        seg = _segments(tl.step[lo:hi], tl.rank[lo:hi])
        start, dur = tl.start[lo:hi], tl.dur[lo:hi]
        _, n_in, n_over = _walk(start, dur, seg, empty, empty, empty, 0)
        nested, overlap = nested + n_in, overlap + n_over
        if n_in or n_over:
            excl = np.zeros(hi - lo, dtype=np.int64)
            _walk(start, dur, seg, empty, empty, excl, 2)
            held = np.flatnonzero(excl != dur)
            outer.append(held + lo)
            inner.append(dur[held] - excl[held])
    tl.notes += flatten_notes(n_wrapped, names, nested, overlap)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))  # noqa: E731
    return Flat(tl, cat(outer), cat(inner), nested, overlap, steps, n_wrapped, tuple(names))


def flatten_notes(wrapped: int, wrappers: list[str], nested: int, overlap: int
                  ) -> list[str]:
    """What flattening left out or cut, in words: ``wrapped`` wrapper timers (named
    ``wrappers``), ``nested`` ops inside another, ``overlap`` ops overlapping the one
    before them."""
    notes = []
    if wrapped:
        notes.append(f"{wrapped:,} wrapper timers ({', '.join(wrappers)}) left out: the "
                     "ops inside them are timed")
    if nested:
        notes.append(f"{nested:,} ops run inside another op on their rank (e.g. "
                     "batch-generator inside forward-compute): the outer op is cut "
                     "around them")
    if overlap:
        notes.append(f"{overlap:,} ops overlap the op before them on their rank "
                     "without being inside it: kept overlapping")
    return notes


DEPTH = 64  # ops open inside each other at most (deeper ones are kept whole)


@nb.njit(cache=True, inline="always")
def _piece(mode, k, row, pst, pdur, r, start, length):  # pragma: no cover (compiled)
    """One piece of op ``r``: counted, written at ``k`` or added to its exclusive time."""
    if mode == 1:
        row[k] = r
        pst[k] = start
        pdur[k] = length
    elif mode == 2:
        pdur[r] += length
    return k + 1


@nb.njit(cache=True)
def _walk(start, dur, seg, row, pst, pdur, mode):  # pragma: no cover (compiled)
    """Counts the pieces (``mode`` 0), writes them (1: ``row``, ``pst``, ``pdur``, in time
    order: an open op's piece up to each op inside it starts, its last piece when it
    ends) or adds each piece to its op's exclusive time (2: ``pdur`` per row). Returns
    (pieces, nested ops, overlapping ops)."""
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
                        k = _piece(mode, k, row, pst, pdur, top, cursor[depth - 1],
                                   st - cursor[depth - 1])
                        pieces[depth - 1] += 1
                    nested += 1
                    break
                else:
                    overlap += 1
                k, depth = _close(mode, k, row, pst, pdur, stack, cursor, pieces, depth,
                                  start, dur)
            if depth < DEPTH:
                stack[depth] = i
                cursor[depth] = st
                pieces[depth] = 0
                depth += 1
            else:
                overlap += 1
                k = _piece(mode, k, row, pst, pdur, i, st, dur[i])
        while depth > 0:
            k, depth = _close(mode, k, row, pst, pdur, stack, cursor, pieces, depth,
                              start, dur)
    return k, nested, overlap


@nb.njit(cache=True, inline="always")
def _close(mode, k, row, pst, pdur, stack, cursor, pieces, depth, start,
           dur):  # pragma: no cover (compiled)
    """The innermost open op ends: its last piece (or its only one, empty), and the op
    around it resumes after it. Returns (pieces so far, depth)."""
    top = stack[depth - 1]
    tend = start[top] + dur[top]
    if tend > cursor[depth - 1] or pieces[depth - 1] == 0:
        k = _piece(mode, k, row, pst, pdur, top, cursor[depth - 1],
                   max(tend - cursor[depth - 1], 0))
    depth -= 1
    if depth > 0:
        cursor[depth - 1] = max(cursor[depth - 1], tend)
    return k, depth
