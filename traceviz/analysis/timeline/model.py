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


class TimelineModel:
    """One job's op timeline ready to re-simulate (see the module doc)."""

    def __init__(self, tl: OpTimeline) -> None:
        tl = complete_layout(tl)
        self.flat: Flat = flatten(tl)
        self.timeline = t = self.flat.timeline
        self.layout = Layout(t)
        self.has_p2p = bool((t.classes[t.op] == P2P).any())
        self.slices = self.flat.steps
        self.steps = np.array([s for s, _, _ in self.slices], dtype=np.int64)
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
        self.typical = self._typical()

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
        n = len(self.slices)
        pick = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_STEPS)).round().astype(int))
        sampled = set(pick.tolist())
        rows_k, rows_v, tr_k, tr_v, gap_k, gap_v = [], [], [], [], [], []
        cls = t.classes
        for i, g in self.graphs():
            if i not in sampled:
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
