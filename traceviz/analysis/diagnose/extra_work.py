"""Extra work: compute kernels one rank runs that the ranks doing its work do not (a
debugging kernel left in, a metric computed on one rank, a hook of its own).

**Compared with.** A rank's *stage peers* (the other ranks of its pipeline stage: tensor-,
context-, expert- and data-parallel partners run the same layers), where it has some;
else every other rank of the job (one rank per stage: the stages hold the same kind of
layers). The first and last stages run the embedding and the loss that the others do
not: without stage peers, their kernels named as the embedding's or the loss's
(:data:`EDGE_KERNEL`) are theirs by design, not extra.

**Extra.** A compute kernel (by name) is extra on a rank when none of the ranks it is
compared with runs it and it takes at least :data:`MIN_PCT` % of the rank's profiled
steps (and :data:`MIN_NS` per iteration). Per extra kernel: its launches and time per
iteration, the phase most of them ran in and whether they run once per forward /
backward step of every micro-batch. Its cost is predicted by the advice's what-if
``kernel@R:NAME=0`` (the kernel removed on that rank, the job re-timed).

The stages' balance (:mod:`.stages`) leaves extra kernels out: a stage is heavy by its
layers, embedding or loss, not by one rank's own work.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...table.arrays import row_groups
from ...table.schema import COMP, PHASES
from ..activities import RankActivities

PHASE_WORDS = {"FWD": "forward", "BWD": "backward", "RECOMPUTE": "recompute",
               "OPTIMIZER": "optimizer", "OTHER": "other"}
MIN_PCT = 1.0        # share of the rank's profiled steps an extra kernel takes at least
MIN_NS = 100_000     # and per iteration (ns)
# the embedding's (lookup, gradient scatter) and the loss's (softmax, NLL, cross entropy)
# kernels of the first / last stage
EDGE_KERNEL = re.compile(r"(?i)embedding|index_?select|indexSelect|scatter|cross_?entropy|"
                         r"nll_loss|softmax|logsumexp|vocab|partial_?segment|grad_weight")


@dataclass(frozen=True)
class ExtraKernel:
    """One kernel one rank runs that its comparison ranks do not: ``launches`` and
    ``ns`` per iteration (the mean over the profiled iterations), ``phase`` the phase
    most of it ran in, ``per_step``: launches per forward / backward step of each
    micro-batch when that is whole (None otherwise), ``compared`` what it was compared
    with (words), ``step_ns`` the rank's mean profiled step (ns)."""

    rank: int
    name: str
    launches: float
    ns: float
    phase: str
    per_step: int | None
    compared: str
    step_ns: float

    @property
    def pct(self) -> float:
        # kernels of several streams can overlap: at most the whole step
        return min(100.0, 100.0 * self.ns / self.step_ns) if self.step_ns > 0 else 0.0

    def text(self) -> str:
        """``rank 2 runs spin_kernel in every forward step: 2.00 ms x 8 per iteration``."""
        each = self.ns / self.launches if self.launches else 0.0
        phase = PHASE_WORDS[self.phase]
        when = (f"in every {phase} step" if self.per_step == 1 else
                f"{self.per_step} times in every {phase} step" if self.per_step
                else f"mostly in {phase} work")
        return (f"rank {self.rank} runs {self.name} {when}: {each / 1e6:.2f} ms x "
                f"{self.launches:g} per iteration ({self.ns / 1e6:.2f} ms, "
                f"{self.pct:.1f} % of its step); {self.compared} do not")


def _kernel_time(a: RankActivities) -> tuple[dict[str, float], dict[str, float], int, float]:
    """Per compute kernel name of the rank (inside the profiled steps): its total ns and
    launches; the number of iterations; the rank's total profiled step span (ns)."""
    inside = (a.iteration >= 0) & (a.kind == COMP)
    stepped = a.iteration >= 0
    its, at = np.unique(a.iteration[stepped], return_inverse=True)
    if not its.size:
        return {}, {}, 0, 0.0
    first = np.full(its.size, np.iinfo(np.int64).max)
    last = np.full(its.size, np.iinfo(np.int64).min)
    np.minimum.at(first, at, a.ts[stepped])
    np.maximum.at(last, at, a.end[stepped])
    span = float((last - first).sum())
    codes = a.name[inside]
    ns = np.bincount(codes, weights=(a.end - a.ts)[inside], minlength=len(a.names))
    n = np.bincount(codes, minlength=len(a.names))
    present = np.flatnonzero(n)
    return ({a.names[i]: float(ns[i]) for i in present},
            {a.names[i]: float(n[i]) for i in present}, int(its.size), span)


def extra_kernels(acts: list[RankActivities], stage: Mapping[int, int]) -> list[ExtraKernel]:
    """The extra kernels of every rank (see the module doc), the costliest first."""
    timed = {a.rank: _kernel_time(a) for a in acts}
    by_stage: dict[int, list[int]] = {}
    for r, s in stage.items():
        if r in timed:
            by_stage.setdefault(s, []).append(r)
    last = max(stage.values(), default=0)
    # per class of ranks compared together, how many of them run each kernel name (once
    # per class: a name run by one rank of its class is that rank's alone)
    everyone = _runs(timed, list(timed))
    runs = {s: _runs(timed, ranks) for s, ranks in by_stage.items() if len(ranks) > 1}
    out: list[ExtraKernel] = []
    for a in acts:
        ns, launches, n_its, span = timed[a.rank]
        if not n_its or span <= 0 or len(timed) < 2:
            continue
        peers = stage.get(a.rank, -1) in runs
        edge = not peers and stage.get(a.rank) in (0, last) and len(by_stage) > 1
        counts = runs[stage[a.rank]] if peers else everyone
        compared = ("the other ranks of its stage" if peers else
                    "the ranks of the other stages" if stage else "the other ranks")
        for name, total in ns.items():
            if counts[name] > 1 or (edge and EDGE_KERNEL.search(name)):
                continue
            per_it = total / n_its
            if per_it < MIN_NS or 100.0 * total / span < MIN_PCT:
                continue
            out.append(_described(a, name, per_it, launches[name] / n_its, compared,
                                  span / n_its))
    return sorted(out, key=lambda e: -e.ns)


def _runs(timed: Mapping[int, tuple], ranks: list[int]) -> dict[str, int]:
    """How many of ``ranks`` run each compute kernel name."""
    out: dict[str, int] = {}
    for r in ranks:
        for name in timed[r][0]:
            out[name] = out.get(name, 0) + 1
    return out


def _described(a: RankActivities, name: str, ns: float, launches: float, compared: str,
               step_ns: float) -> ExtraKernel:
    """The extra kernel ``name`` of rank ``a`` with its phase and launches per step."""
    code = a.names.index(name)
    rows = (a.name == code) & (a.iteration >= 0) & (a.kind == COMP)
    phases = a.phase[rows]
    top = int(np.bincount(phases[phases >= 0], minlength=len(PHASES)).argmax()) if (
        phases >= 0).any() else PHASES.index("OTHER")
    steps = rows & (a.phase == top) & (a.microbatch >= 0)
    per_step = None
    if steps.any():
        counts = np.bincount(row_groups(a.iteration[steps], a.microbatch[steps],
                                        a.chunk[steps])[1])
        # every micro-batch step of that phase runs it the same number of times
        all_steps = (a.phase == top) & (a.microbatch >= 0) & (a.iteration >= 0)
        n_steps = row_groups(a.iteration[all_steps], a.microbatch[all_steps],
                             a.chunk[all_steps])[0].size
        if counts.size == n_steps and (counts == counts[0]).all():
            per_step = int(counts[0])
    return ExtraKernel(a.rank, name, launches, ns, PHASES[top], per_step, compared, step_ns)
