"""Communication-computation overlap, computed here and nowhere else.

For a set of activities: ``comp`` = |U(COMP)|, ``comm`` = |U(COMM)|, ``overlap`` =
|U(COMM) ∩ U(COMP)| (the communication time hidden behind computation), all int64 ns
over interval unions, so concurrent kernels count once. The overlap percentage is
``100 overlap / comm`` (HTA's definition), null without communication. MEM and other
activities are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..intervals import grouped_combination_times, grouped_measure, intersect, union
from ..table.schema import COMM, COMP


@dataclass
class CommComp:
    """Per group (arrays of one length): compute, communication and their overlap (ns)."""

    comp: np.ndarray
    comm: np.ndarray
    overlap: np.ndarray

    @property
    def comp_only(self) -> np.ndarray:
        return self.comp - self.overlap

    @property
    def comm_only(self) -> np.ndarray:
        return self.comm - self.overlap

    @property
    def busy(self) -> np.ndarray:
        """|U(COMP) ∪ U(COMM)|."""
        return self.comp + self.comm - self.overlap

    def pct(self) -> np.ndarray:
        """100 overlap / comm per group (NaN without communication)."""
        return percent(self.overlap, self.comm)


def from_sweep(times: np.ndarray) -> CommComp:
    """Compute / communication / overlap of a sweep's time per open-kind mask
    (``times[..., mask]``, bit ``1 << kind`` for the schema's kind codes)."""
    masks = np.arange(times.shape[-1])
    comp = (masks >> COMP) & 1 == 1
    comm = (masks >> COMM) & 1 == 1
    return CommComp(times[..., comp].sum(axis=-1), times[..., comm].sum(axis=-1),
                    times[..., comp & comm].sum(axis=-1))


def comm_comp(ts: np.ndarray, end: np.ndarray, kind: np.ndarray, keys: np.ndarray,
              n: int) -> CommComp:
    """Per group ``keys`` in [0, n): compute, communication and overlap of its activities
    (``kind``: schema codes; rows of other kinds are ignored)."""
    on = (kind == COMP) | (kind == COMM)
    times = grouped_combination_times(ts[on], end[on], kind[on], keys[on], n, 2)
    return from_sweep(times)


def comm_by_key(ts: np.ndarray, end: np.ndarray, kind: np.ndarray, keys: np.ndarray,
                n: int) -> CommComp:
    """Per key in [0, n) of the COMM rows (``keys`` of other rows are ignored): that
    key's communication and its overlap with *all* the compute of the set (``comp`` is
    that whole compute, the same for every key). Unions, not a sweep per key: the
    compute is merged once, whatever the number of keys."""
    comp_rows, comm_rows = kind == COMP, kind == COMM
    comp = union(ts[comp_rows], end[comp_rows])
    comm = grouped_measure(ts[comm_rows], end[comm_rows], keys[comm_rows], n)
    overlap = np.zeros(n, dtype=np.int64)
    for k in range(n):
        on = comm_rows & (keys == k)
        both = intersect(union(ts[on], end[on]), comp)
        overlap[k] = int((both[1] - both[0]).sum())
    return CommComp(np.full(n, int((comp[1] - comp[0]).sum())), comm, overlap)


def percent(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """100 part / whole, NaN where whole is 0."""
    part, whole = np.asarray(part), np.asarray(whole)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(whole > 0, 100.0 * part / np.maximum(whole, 1), np.nan)
