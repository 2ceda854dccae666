"""The job's layout where the op timeline does not give it: stages from the pipeline
transfers' order, DP ranks from which ranks run the same stage, else unknown; each
inference stated in a note, and one that is not clear-cut is an error asking for the
column (never a silent guess).

* **Stages** (no ``stage`` column): without pipeline transfers every rank is stage 0 (a
  job without pipeline parallelism). With them, the ranks that never receive from a
  previous stage are the first stage, and the pipeline has ranks / first-stage ranks
  stages; a rank's stage is its place in the order of the first forward compute of the
  first step (each stage starts its first micro-batch after the one before sent it). The
  ranks split into that many equal groups by that time, each group wholly before the
  next; if they do not, the stages are not inferred. Under interleaving (every rank
  receives) the stages are not inferred.
* **DP ranks** (no ``dp_rank`` column): within each stage (and TP rank), the ranks in
  global order: the i-th of every stage form one pipeline (Megatron's default rank
  order, and any order that numbers the pipelines alike on every stage).
* **TP ranks** (no ``tp_rank`` column): unknown; each rank is its own worker and every
  rank of a stage is in its DP group.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import TraceVizError
from .data import OpTimeline
from .ops import BOTH, COMPUTE, NEXT, P2P, PREV


NONE = np.iinfo(np.int64).max  # no forward compute in the first step


@dataclass
class StageFacts:
    """What the stages are inferred from, per rank (index of ``OpTimeline.ranks``):
    whether it receives from the previous stage and sends to the next (its pipeline
    transfers), and when its first forward compute of the first step starts (ns;
    :data:`NONE`: it has none)."""

    receives: np.ndarray  # bool
    sends: np.ndarray     # bool
    first_forward: np.ndarray  # int64

    @classmethod
    def of(cls, tl: OpTimeline) -> StageFacts:
        """From the rows of ``tl`` (every step of the job)."""
        n = len(tl.ranks)
        cls_, sides = tl.classes[tl.op], tl.sides[tl.op]
        p2p = cls_ == P2P
        ri = tl.rank_index
        receives = np.zeros(n, dtype=bool)
        receives[ri[p2p & ((sides == PREV) | (sides == BOTH))]] = True
        sends = np.zeros(n, dtype=bool)
        sends[ri[p2p & ((sides == NEXT) | (sides == BOTH))]] = True
        first = np.full(n, NONE, dtype=np.int64)
        if len(tl):
            step0 = tl.step == tl.step.min()
            fwd = step0 & (cls_ == COMPUTE) & np.array(
                [nm == "forward-compute" for nm in tl.names], dtype=bool)[tl.op]
            np.minimum.at(first, ri[fwd], tl.start[fwd])
        return cls(receives, sends, first)


def complete_layout(tl: OpTimeline, facts: StageFacts | None = None) -> OpTimeline:
    """``tl`` with its stages, DP and TP ranks where unknown inferred (see the module
    doc), in place; notes say how. ``facts``: the stages' facts of the whole job (default:
    from the rows of ``tl``, which then holds every step)."""
    n = len(tl.ranks)
    if (tl.stage < 0).any():
        if (tl.stage >= 0).any():
            bad = int(tl.ranks[np.flatnonzero(tl.stage < 0)[0]])
            raise TraceVizError(f"rank {bad}: no stage where other ranks have one: give "
                                "every rank's stage or none")
        tl.stage = _stages(tl, facts if facts is not None else StageFacts.of(tl))
    if (tl.tp < 0).any():
        tl.tp = np.zeros(n, dtype=np.int32)
        tl.layout_from["tp"] = "unknown"
        if tl.stage.max() >= 0 and n > 1:
            tl.notes.append("TP ranks unknown (no tp_rank column): each rank is a worker "
                            "of its own and its stage's ranks are its DP group")
    if (tl.dp < 0).any():
        counts = np.bincount(tl.stage)
        sizes = np.unique(counts[counts > 0])
        if len(sizes) > 1:  # the i-th rank of every stage: only where they are alike
            raise TraceVizError(f"stages of unequal size ({', '.join(map(str, counts))} "
                                "ranks) and no dp_rank column: give the DP ranks")
        if (tl.dp >= 0).any():
            bad = int(tl.ranks[np.flatnonzero(tl.dp < 0)[0]])
            raise TraceVizError(f"rank {bad}: no dp_rank where other ranks have one: give "
                                "every rank's DP rank or none")
        dp = np.zeros(n, dtype=np.int32)
        for s in np.unique(tl.stage):
            for t in np.unique(tl.tp):
                mine = np.flatnonzero((tl.stage == s) & (tl.tp == t))
                dp[mine] = np.arange(len(mine))  # ranks are sorted: global order
        tl.dp = dp
        tl.layout_from["dp"] = "inferred: the ranks of each stage in global order"
        if len(np.unique(tl.stage)) > 1:
            tl.notes.append("DP ranks inferred: the i-th rank (in global order) of every "
                            "stage are one pipeline; give dp_rank where the ranks are "
                            "numbered otherwise")
    place = (tl.stage.astype(np.int64) << 40) | (tl.dp.astype(np.int64) << 12) | tl.tp
    uniq, first, count = np.unique(place, return_index=True, return_counts=True)
    if (count > 1).any():  # two ranks in one place: their neighbours would be one rank
        k = int(np.flatnonzero(count > 1)[0])
        same = tl.ranks[place == uniq[k]][:2].tolist()
        raise TraceVizError(
            f"ranks {same[0]} and {same[1]} have the same stage, DP and TP rank "
            f"({int(tl.stage[first[k]])}, {int(tl.dp[first[k]])}, {int(tl.tp[first[k]])}): "
            "give the columns that tell them apart (tp_rank for TP peers)")
    return tl


def _stages(tl: OpTimeline, facts: StageFacts) -> np.ndarray:
    n = len(tl.ranks)
    receives, sends = facts.receives, facts.sends
    if not (receives.any() or sends.any()):
        tl.layout_from["stage"] = "inferred: no pipeline transfers, one stage"
        if n > 1:
            tl.notes.append("stages inferred: no pipeline transfers in the timeline, every "
                            "rank is stage 0")
        return np.zeros(n, dtype=np.int32)
    first = ~receives
    if not first.any() or (~sends).sum() != first.sum():
        raise TraceVizError("the stages cannot be inferred from the pipeline transfers "
                            f"({int(first.sum())} ranks never receive, {int((~sends).sum())} "
                            "never send; interleaved?): give the stage column")
    pp = n // int(first.sum())
    if pp * int(first.sum()) != n:
        raise TraceVizError(f"{int(first.sum())} first-stage ranks do not divide the {n} "
                            "ranks into stages: give the stage column")
    t = facts.first_forward
    if (t == NONE).any():
        raise TraceVizError("the stages cannot be inferred: some ranks have no "
                            "forward-compute in the first step: give the stage column")
    order = np.argsort(t, kind="stable")
    each = n // pp
    stage = np.empty(n, dtype=np.int32)
    for s in range(pp):
        stage[order[s * each:(s + 1) * each]] = s
    groups = [t[order[s * each:(s + 1) * each]] for s in range(pp)]
    clear = all(groups[s].max() < groups[s + 1].min() for s in range(pp - 1))
    if not clear or not (first == (stage == 0)).all():
        raise TraceVizError("the stages cannot be inferred: the first forward computes of "
                            "the stages' ranks interleave in time: give the stage column")
    tl.layout_from["stage"] = "inferred: the order of the first forward compute"
    tl.notes.append(f"stages inferred ({pp}): the ranks that never receive are the first, "
                    "the others by when their first forward compute starts")
    return stage
