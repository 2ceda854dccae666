"""What-ifs on an op timeline: each step re-simulated (:mod:`.simulate`) with some ops'
durations, transfers or gaps replaced, the rest as measured. A what-if is a list of
changes; each change picks nodes (a worker's compute from a step on, a stage's, one
op's transfers, a micro-batch's compute, the gaps, ...) and says what they become:

* ``scale`` / ``transfer_scale``: local pieces' durations / communication transfers
  times a factor per node;
* ``typical``: local pieces at most their op's typical duration (or at it, ``exact``;
  :mod:`.model`, shared out over an op's pieces as measured);
* ``transfer``: communication transfers at most their op's typical transfer (or at
  it, ``exact``);
* ``gap``: gaps at most their op's typical gap (or at it, ``exact``).

Specs in words (``what_if`` of the advice): ``worker:W/F@S`` (worker W's compute / F
from step S on; ``@S-E``: steps S to E), ``stages=even`` / ``stages=A,B,...`` (each stage's compute times its
factor), ``balance`` (each micro-batch's compute at its step's mean share), ``op:NAME``
(that op's transfers or durations at most typical), ``dp-group:S=NAME.TP/F,...`` (stage S's DP groups' transfers of NAME / F),
``data`` (data loading and the step's first gap at most typical), ``gaps`` (every gap
at most typical), ``ideal`` (everything at typical), ``dp:D`` (DP rank D's compute at
typical), ``worker-typical:W``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .graph import StepGraph
from .model import TimelineModel
from .ops import COMPUTE, DATA
from .simulate import links, simulate


@dataclass
class StepView:
    """One step's nodes with what a change picks them by."""

    g: StepGraph
    index: int          # the step's place in the run (0 first)
    step: int
    rank: np.ndarray    # rank index per node
    worker: np.ndarray
    stage: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    cls: np.ndarray
    op: np.ndarray
    mb: np.ndarray
    key: np.ndarray
    first: np.ndarray   # the first piece of its op
    local: np.ndarray
    share: np.ndarray   # the piece's share of its op's exclusive time
    typ_dur: np.ndarray  # the piece's typical duration (its share of its op's; NaN: none)
    typ_transfer: np.ndarray
    typ_gap: np.ndarray

    @classmethod
    def of(cls, model: TimelineModel, index: int, g: StepGraph) -> StepView:
        """The view of ``g``, the step at place ``index`` of ``model``'s own steps."""
        t = model.timeline
        rows = g.rows
        ri = np.searchsorted(t.ranks, t.rank[rows])
        excl = model.flat.exclusive(rows)
        key = model.keys(rows)
        share = np.divide(g.dur, excl, out=np.ones(len(rows)), where=excl > 0)
        ty = model.typical
        return cls(g, model.first_index + index, g.step, ri, model.worker[ri], t.stage[ri], t.dp[ri], t.tp[ri],
                   t.classes[t.op[rows]], t.op[rows], t.microbatch[rows], key,
                   np.r_[True, rows[1:] != rows[:-1]] if len(rows) else np.zeros(0, bool),
                   g.group < 0, share, ty.duration.of(key) * share, ty.transfer.of(key),
                   ty.gap.of(key))


THREADS = max(1, min(4, os.cpu_count() or 1))  # re-simulations of one step at once
Pick = Callable[[StepView], np.ndarray]  # a mask (or factors) over the step's nodes


@dataclass
class Change:
    """Nodes picked by ``pick`` become what ``how`` says (see the module doc); for
    ``scale``, ``pick`` gives each node's factor (1: unchanged)."""

    how: str
    pick: Pick
    exact: bool = False


@dataclass
class WhatIf:
    """A named what-if: its spec in words and its changes."""

    spec: str
    changes: list[Change] = field(default_factory=list)


def apply(v: StepView, w: WhatIf) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(durations, transfers, gaps) of the step with ``w``'s changes."""
    g = v.g
    dur, transfer, gap = g.dur, g.transfer, g.gap
    for c in w.changes:
        if c.how in ("scale", "transfer_scale"):
            f = c.pick(v)
            if c.how == "scale":
                dur = np.where(v.local, np.rint(dur * f).astype(np.int64), dur)
            else:
                transfer = np.where(v.local, transfer,
                                    np.rint(transfer * f).astype(np.int64))
            continue
        m = c.pick(v)
        if c.how == "typical":
            typ = v.typ_dur
            m = m & v.local & np.isfinite(typ)
            new = np.rint(np.nan_to_num(typ)).astype(np.int64)
            dur = np.where(m, new if c.exact else np.minimum(dur, new), dur)
        elif c.how == "transfer":
            typ = v.typ_transfer
            m = m & ~v.local & np.isfinite(typ)
            new = np.rint(np.nan_to_num(typ)).astype(np.int64)
            transfer = np.where(m, new if c.exact else np.minimum(transfer, new), transfer)
        elif c.how == "gap":
            typ = v.typ_gap
            m = m & v.first & np.isfinite(typ)
            new = np.rint(np.nan_to_num(typ)).astype(np.int64)
            gap = np.where(m, new if c.exact else np.minimum(gap, new), gap)
    return dur, transfer, gap


def step_times(model: TimelineModel, whatifs: list[WhatIf], threads: int = THREADS
               ) -> tuple[np.ndarray, np.ndarray]:
    """(measured step times, [what-if, step] re-simulated times) in ns; every step
    re-simulated with each what-if, the what-ifs of a step on ``threads`` threads (the
    re-simulation releases the GIL)."""
    measured = np.zeros(len(model.slices), dtype=np.int64)
    out = np.zeros((len(whatifs), len(model.slices)), dtype=np.int64)

    def one(v: StepView, w: WhatIf) -> int:
        return simulate(v.g, *apply(v, w)).step_ns

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for i, g in model.graphs():
            v = StepView.of(model, i, g)
            measured[i] = int(g.end.max() - g.t0) if len(g) else 0
            links(g)  # made once, before the threads share it
            out[:, i] = list(pool.map(lambda w: one(v, w), whatifs))
    return measured, out


# ---- the what-ifs the diagnosis asks ------------------------------------------------
# Each pick is a small frozen dataclass (not a closure): a what-if travels to the worker
# processes re-simulating a block of steps (pickled by name).


@dataclass(frozen=True)
class Every:
    """Every node."""

    def __call__(self, v: StepView) -> np.ndarray:
        return np.ones(len(v.g), dtype=bool)


@dataclass(frozen=True)
class OfClass:
    """The nodes of an op class (:mod:`.ops`)."""

    klass: int

    def __call__(self, v: StepView) -> np.ndarray:
        return v.cls == self.klass


@dataclass(frozen=True)
class OfOp:
    """The nodes of one op (its code)."""

    op: int

    def __call__(self, v: StepView) -> np.ndarray:
        return v.op == self.op


@dataclass(frozen=True)
class FirstOnRank:
    """Each rank's first node of the step (its gap: the step's first)."""

    def __call__(self, v: StepView) -> np.ndarray:
        return v.g.pred < 0


@dataclass(frozen=True)
class WorkerCompute:
    """Worker ``worker``'s compute (of DP rank ``dp`` where ``worker`` is -1), times
    ``factor`` (a scale) in the steps at places ``since`` to ``until`` (exclusive); a
    mask where ``factor`` is None."""

    worker: int = -1
    dp: int = -1
    factor: float | None = None
    since: int = 0
    until: int = 1 << 62

    def __call__(self, v: StepView) -> np.ndarray:
        who = v.worker == self.worker if self.worker >= 0 else v.dp == self.dp
        on = who & (v.cls == COMPUTE) & (self.since <= v.index < self.until)
        return on if self.factor is None else np.where(on, self.factor, 1.0)


@dataclass(frozen=True)
class StageCompute:
    """Each stage's compute times its factor."""

    factors: tuple[float, ...]

    def __call__(self, v: StepView) -> np.ndarray:
        return np.where(v.cls == COMPUTE, np.array(self.factors)[v.stage], 1.0)


@dataclass(frozen=True, eq=False)  # (an array: compared and hashed as itself)
class CellCompute:
    """Each micro-batch's compute times its factor: ``factors`` [step place, DP rank,
    micro-batch] (the last DP rank's and micro-batch's beyond the table)."""

    factors: np.ndarray

    def __call__(self, v: StepView) -> np.ndarray:
        f, mb = self.factors, v.mb
        ok = (v.cls == COMPUTE) & (mb >= 0) & (mb < f.shape[2])
        return np.where(ok, f[v.index, np.minimum(v.dp, f.shape[1] - 1),
                              np.clip(mb, 0, f.shape[2] - 1)], 1.0)


@dataclass(frozen=True)
class GroupTransfers:
    """Stage ``stage``'s transfers of each (op, TP rank) in ``factors`` times its
    factor."""

    stage: int
    factors: tuple[tuple[int, int, float], ...]  # (op, TP rank, factor)

    def __call__(self, v: StepView) -> np.ndarray:
        f = np.ones(len(v.g))
        for op, tp, x in self.factors:
            f[(v.op == op) & (v.stage == self.stage) & (v.tp == tp)] = x
        return f


@dataclass(frozen=True)
class ClassFactor:
    """The nodes of an op class times ``factor``, the others unchanged."""

    klass: int
    factor: float

    def __call__(self, v: StepView) -> np.ndarray:
        return np.where(v.cls == self.klass, self.factor, 1.0)


def ideal() -> WhatIf:
    """Every op at its typical duration, transfer and gap."""
    return WhatIf("ideal", [Change("typical", Every(), True), Change("transfer", Every(), True),
                            Change("gap", Every(), True)])


def slow_worker(w: int, factor: float, since: int, until: int, steps: str) -> WhatIf:
    """Worker ``w``'s compute / ``factor`` in the steps at places ``since`` to ``until``
    (exclusive; ``steps`` says which in words: ``S`` or ``S-E``)."""
    return WhatIf(f"worker:{w}/{factor:.3f}@{steps}",
                  [Change("scale", WorkerCompute(w, factor=1.0 / factor, since=since,
                                                 until=until))])


def worker_typical(w: int) -> WhatIf:
    return WhatIf(f"worker-typical:{w}", [Change("typical", WorkerCompute(w), True)])


def dp_typical(d: int) -> WhatIf:
    return WhatIf(f"dp:{d}", [Change("typical", WorkerCompute(dp=d), True)])


def stages(factors: np.ndarray, spec: str) -> WhatIf:
    """Each stage's compute times its factor."""
    return WhatIf(spec, [Change("scale", StageCompute(tuple(float(f) for f in factors)))])


def balance(factors: np.ndarray) -> WhatIf:
    """Each micro-batch's compute times its factor (its step's mean share / its own):
    ``factors`` [step place, DP rank, micro-batch]."""
    return WhatIf("balance", [Change("scale", CellCompute(factors))])


def dp_groups(spec: str, stage: int, factors: tuple[tuple[int, int, float], ...]) -> WhatIf:
    """Stage ``stage``'s DP groups' transfers of (op, TP rank) times their factor."""
    return WhatIf(spec, [Change("transfer_scale", GroupTransfers(stage, factors))])


def overlap(klass: int, spec: str) -> WhatIf:
    """The transfers of op class ``klass`` hidden entirely (x 0)."""
    return WhatIf(spec, [Change("transfer_scale", ClassFactor(klass, 0.0))])


def op_fix(op: int, name: str, communication: bool) -> WhatIf:
    """One op's transfers (a communication op) or durations at most typical."""
    return WhatIf(f"op:{name}", [Change("transfer" if communication else "typical",
                                        OfOp(op))])


def data_fix() -> WhatIf:
    """Data loading and each rank's first gap of the step at most typical."""
    return WhatIf("data", [Change("typical", OfClass(DATA)), Change("gap", FirstOnRank())])


def gaps_fix() -> WhatIf:
    return WhatIf("gaps", [Change("gap", Every())])
