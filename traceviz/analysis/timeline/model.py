"""The job's op timeline as one model: its pieces (:mod:`.flatten`), layout
(:mod:`.layout`), each step's graph (:mod:`.graph`) and the **typical** values every
what-if re-times to.

**Typical** duration of a local op: the median exclusive time (its pieces' sum) of the
ops with its name on its stage and model chunk, over every rank and micro-batch of up to
:data:`SAMPLE_STEPS` steps spread over the run (the median is robust to a few slow
workers, steps or micro-batches); a communication op's typical **transfer** and every
op's typical **gap** before it, the same way.

**Workers**: a rank, or with TP ranks given the ranks of one stage and DP rank (TP peers
run in lockstep: their timers cannot tell which of them is slow).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...errors import TraceVizError
from .data import OpTimeline
from .flatten import Flat, flatten
from .graph import Layout, StepGraph, step_graph
from .layout import complete_layout
from .ops import COMMUNICATION, P2P
from .simulate import simulate

SAMPLE_STEPS = 16      # steps the typical values are taken over (evenly spread)
MAX_WORKER_STEPS = 16_000_000  # a worker x step table of float64: 128 MB
KEEP_GRAPHS = 4_000_000  # ops up to which the steps' graphs are kept between passes


@dataclass
class Medians:
    """Per key (sorted, :meth:`TimelineModel.keys`) the median of its values (ns)."""

    keys: np.ndarray
    values: np.ndarray

    def of(self, keys: np.ndarray) -> np.ndarray:
        """The medians of ``keys`` (NaN: a key without values)."""
        out = np.full(len(keys), np.nan)
        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            hit = self.keys[pos] == keys
            out[hit] = self.values[pos[hit]]
        return out


@dataclass
class Typical:
    """The typical exclusive duration, transfer and gap of each key (see the module
    doc)."""

    duration: Medians
    transfer: Medians
    gap: Medians


@dataclass
class JobShape:
    """What every step of the job shares, and each block of its steps is modelled with
    (:class:`TimelineModel` of some steps): the op names (codes index them), each rank's
    place (``ranks`` sorted, its ``stage``, ``dp``, ``tp``; where each came from), model
    chunks per stage, micro-batch slots (the largest micro-batch + 1; 0: none), every
    step, the op rows and the op codes that have rows (wrappers left out), and the notes
    on reading the job (layout, wrappers, nested timers)."""

    names: tuple[str, ...]
    ranks: np.ndarray
    stage: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    layout_from: dict[str, str]
    chunks: int
    microbatches: int
    steps: np.ndarray     # int64, ascending
    ops: int
    present: np.ndarray   # int64 op codes, ascending
    notes: list[str]

    @classmethod
    def of(cls, flat: Flat) -> JobShape:
        """The shape of a whole job's flattened timeline (its layout completed)."""
        t = flat.timeline
        return cls(t.names, t.ranks, t.stage, t.dp, t.tp, dict(t.layout_from), t.chunks,
                   t.microbatch_slots, flat.step_numbers, len(t),
                   np.unique(t.op).astype(np.int64), list(t.notes))

    def timeline(self) -> OpTimeline:
        """An op timeline of this shape without rows (its ranks' layout, names, notes)."""
        return OpTimeline.without_rows(self.names, self.ranks, self.stage, self.dp,
                                       self.tp, self.layout_from, self.notes)


def sampled(n: int) -> np.ndarray:
    """The places (0..n-1) of the steps the typical values are taken over: up to
    :data:`SAMPLE_STEPS`, evenly spread."""
    return np.unique(np.linspace(0, n - 1, min(n, SAMPLE_STEPS)).round().astype(int))


class TimelineModel:
    """One job's op timeline ready to re-simulate (see the module doc): all of it, or a
    block of its steps (``tl`` holding only those rows) modelled with the whole job's
    ``shape`` and ``typical`` values, its first step at place ``first_index`` of the
    job's; a model of ``shape`` alone holds no rows (:meth:`of_shape`)."""

    def __init__(self, tl: OpTimeline, shape: JobShape | None = None,
                 typical: Typical | None = None, first_index: int = 0) -> None:
        if shape is None:  # the whole job: its layout completed, its shape taken
            tl = complete_layout(tl)
            self.flat: Flat = flatten(tl)
            shape = JobShape.of(self.flat)
        else:  # some of its steps: the job's layout; the notes on them are the job's
            tl.ranks, tl.stage, tl.dp, tl.tp = shape.ranks, shape.stage, shape.dp, shape.tp
            tl.layout_from = dict(shape.layout_from)
            if len(tl):
                self.flat = flatten(tl)
                tl.notes = []  # the shape's; a step's own follow (transfers in a circle)
            else:
                self.flat = Flat(tl, *(np.zeros(0, np.int64),) * 2, 0, 0, [])
        self.shape = shape
        self.timeline = t = self.flat.timeline
        self.layout = Layout(t, shape.chunks)
        self.has_p2p = bool((t.classes[shape.present] == P2P).any())
        self.slices = self.flat.steps          # this model's steps: (step, first row, end)
        self.steps = shape.steps               # the job's
        self.first_index = first_index
        if (t.tp >= 0).all() and self.layout_from("tp") == "column" and t.tp.max() > 0:
            keys = t.stage.astype(np.int64) * (int(t.dp.max()) + 1) + t.dp
            _, self.worker = np.unique(keys, return_inverse=True)
        else:
            self.worker = np.arange(len(t.ranks))
        self.worker = self.worker.astype(np.int64)
        self.workers = int(self.worker.max()) + 1
        if self.workers * len(self.steps) > MAX_WORKER_STEPS:
            raise TraceVizError(
                f"{self.workers:,} workers x {len(self.steps):,} steps: more than "
                f"{MAX_WORKER_STEPS:,} (the per-step tables of every worker): diagnose "
                "fewer steps at a time")
        # per worker its first rank's index
        self.first_rank = np.full(self.workers, len(self.worker), dtype=np.int64)
        np.minimum.at(self.first_rank, self.worker, np.arange(len(self.worker)))
        self._graphs: dict[int, StepGraph] = {}
        self.checked: set[int] = set()    # steps whose paired graph was simulated once
        self.unpaired: set[int] = set()   # steps whose transfers run alone
        self.typical = typical if typical is not None else self._typical()

    @classmethod
    def of_shape(cls, shape: JobShape, typical: Typical) -> TimelineModel:
        """The model of the job's ``shape`` alone (no rows: what the findings read where
        the steps are modelled elsewhere)."""
        return cls(shape.timeline(), shape, typical)

    def layout_from(self, key: str) -> str:
        return self.timeline.layout_from.get(key, "unknown")

    @property
    def pp(self) -> int:
        return self.layout.pp

    def worker_ranks(self, w: int) -> list[int]:
        return [int(r) for r in self.timeline.ranks[self.worker == w]]

    def keys(self, rows: np.ndarray) -> np.ndarray:
        """Per row its typical-value key: (op, stage, chunk)."""
        t = self.timeline
        stage = t.stage[np.searchsorted(t.ranks, t.rank[rows])]
        return ((t.op[rows].astype(np.int64) * self.pp + stage) * self.layout.chunks
                + t.chunk[rows])

    def graphs(self) -> Iterator[tuple[int, StepGraph]]:
        """(index, graph) of every step, built once where they fit in memory."""
        keep = len(self.timeline) <= KEEP_GRAPHS
        for i, (step, lo, hi) in enumerate(self.slices):
            g = self._graphs.get(i)
            if g is None:
                pairs = self.has_p2p and i not in self.unpaired
                g = step_graph(self.flat, self.layout, lo, hi, pairs)
                if pairs and i not in self.checked:
                    self.checked.add(i)
                    try:
                        simulate(g)
                    except TraceVizError:  # transfers paired into a circle: alone
                        self.unpaired.add(i)
                        self.timeline.notes.append(
                            f"step {step}: its pipeline transfers, paired in order, wait "
                            "on each other in a circle (an order traceviz does not know): "
                            "they run alone with their measured time, the compute after "
                            "the stage it receives from")
                        g = step_graph(self.flat, self.layout, lo, hi, False)
                if keep:
                    self._graphs[i] = g
            yield i, g

    def _typical(self) -> Typical:
        t = self.timeline
        chosen = set(sampled(len(self.slices)).tolist())
        rows_k, rows_v, tr_k, tr_v, gap_k, gap_v = [], [], [], [], [], []
        cls = t.classes
        for i, g in self.graphs():
            if i not in chosen:
                continue
            rows = g.rows
            k = self.keys(rows)
            first = np.r_[True, rows[1:] != rows[:-1]]
            comm = g.group >= 0
            local_rows = np.unique(rows[~np.isin(cls[t.op[rows]], COMMUNICATION)])
            rows_k.append(self.keys(local_rows))
            rows_v.append(self.flat.exclusive(local_rows))
            tr_k.append(k[comm])
            tr_v.append(g.transfer[comm].astype(np.float64))
            gap_k.append(k[first])
            gap_v.append(g.gap[first].astype(np.float64))
        cat = (lambda xs, dtype: np.concatenate(xs) if xs  # noqa: E731
               else np.zeros(0, dtype))
        return Typical(*(medians(cat(kk, np.int64), cat(vv, np.float64))
                         for kk, vv in ((rows_k, rows_v), (tr_k, tr_v), (gap_k, gap_v))))


def medians(keys: np.ndarray, values: np.ndarray) -> Medians:
    """Each key's median value (one sort, whatever the number of keys)."""
    if not len(keys):
        return Medians(np.zeros(0, np.int64), np.zeros(0))
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order].astype(np.float64)
    cut = np.flatnonzero(np.r_[True, k[1:] != k[:-1], True])
    lo, hi = cut[:-1], cut[1:]
    return Medians(k[lo], (v[lo + (hi - lo - 1) // 2] + v[lo + (hi - lo) // 2]) / 2.0)
