"""The compute ops summed per step, worker and micro-batch: their exclusive time and
their typical time (:mod:`.model`), forward and backward apart, in one pass over the
steps (a step's rows at a time). Every finding on compute (:mod:`.findings`: worker
speed, uneven data, stage balance) reads these sums, never the rows again.

Slot ``microbatches`` (the last) holds compute without a micro-batch. The sums are
float32 ns (0.1 ppm: far below any threshold), :data:`MAX_CELLS` cells at most (beyond,
the micro-batches are folded into one slot and uneven data is not looked for)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import TimelineModel
from .ops import COMPUTE

MAX_CELLS = 64_000_000  # steps x workers x micro-batch slots (x 4 sums of 4 bytes)


@dataclass
class Cells:
    """[step index, worker, micro-batch slot] sums (ns); ``by_microbatch`` False when
    the micro-batches were folded into one slot (too many cells)."""

    excl_fwd: np.ndarray
    typ_fwd: np.ndarray
    excl_bwd: np.ndarray
    typ_bwd: np.ndarray
    by_microbatch: bool

    @property
    def microbatches(self) -> int:
        return self.excl_fwd.shape[2] - 1

    @classmethod
    def joined(cls, parts: list[Cells]) -> Cells:
        """Cells of consecutive blocks of steps, in order, as one."""
        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts])
        return cls(cat("excl_fwd"), cat("typ_fwd"), cat("excl_bwd"), cat("typ_bwd"),
                   parts[0].by_microbatch)

    def worker_step(self) -> tuple[np.ndarray, np.ndarray]:
        """[worker, step] (exclusive, typical) compute."""
        e = (self.excl_fwd.sum(axis=2, dtype=np.float64)
             + self.excl_bwd.sum(axis=2, dtype=np.float64))
        t = (self.typ_fwd.sum(axis=2, dtype=np.float64)
             + self.typ_bwd.sum(axis=2, dtype=np.float64))
        return e.T, t.T


def compute_cells(model: TimelineModel) -> Cells:
    """The cells of ``model``'s own steps (the job's, or a block of them)."""
    t = model.timeline
    ns, nw = len(model.slices), model.workers
    mbs = model.shape.microbatches
    by_mb = len(model.steps) * nw * (mbs + 1) <= MAX_CELLS  # alike in every block
    slots = mbs + 1 if by_mb else 1
    shape = (ns, nw, slots)
    out = [np.zeros(shape, dtype=np.float32) for _ in range(4)]
    cls = t.classes
    fwd_op = np.array([n == "forward-compute" for n in t.names])
    for i, (_, lo, hi) in enumerate(model.slices):
        rows = lo + np.flatnonzero(cls[t.op[lo:hi]] == COMPUTE)
        if not len(rows):
            continue
        typ = model.typical.duration.of(model.keys(rows))
        ok = np.isfinite(typ) & (typ > 0)
        rows, typ = rows[ok], typ[ok]
        w = model.worker[np.searchsorted(t.ranks, t.rank[rows])]
        mb = t.microbatch[rows].astype(np.int64)
        slot = np.where(mb >= 0, mb, mbs) if by_mb else np.zeros(len(rows), np.int64)
        cell = w * slots + slot
        fwd = fwd_op[t.op[rows]]
        excl = model.flat.exclusive(rows).astype(np.float64)
        size = nw * slots
        for k, (values, mask) in enumerate(((excl, fwd), (typ, fwd), (excl, ~fwd),
                                            (typ, ~fwd))):
            out[k][i] = np.bincount(cell[mask], weights=values[mask],
                                    minlength=size).reshape(nw, slots)
    return Cells(out[0], out[1], out[2], out[3], by_mb)
