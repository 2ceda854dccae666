"""Phase (FWD / BWD / RECOMPUTE / OPTIMIZER / OTHER), micro-batch and model chunk of each
GPU activity, from what the trace states about the CPU call that launched it.

Micro-batch ops (one forward or one backward of one micro-batch) come from, in order of
preference:

1. ``forward_step`` / ``backward_step`` python frames (``with_stack`` traces; the
   outermost frame of a nest is the op);
2. otherwise the launching threads: a run of launches from the main thread (the thread
   of the ``ProfilerStep#N`` annotations) is a forward op, a run from another thread (the
   autograd engine) a backward op; runs are split where the thread changes or a P2P call
   is issued (Megatron sends / receives between micro-batch ops).

The k-th forward op of an iteration is micro-batch ``k`` under 1F1B; under interleaved
1F1B (``vpp`` > 1, ``pp`` stages) Megatron's order maps k to (micro-batch, chunk). A
backward op takes the micro-batch and chunk of the forward op it differentiates, as the
trace states it: its autograd nodes' ``Sequence number`` is that of forward ops on the
main thread (the ``fwdbwd`` flows join the same pairs); the most common answer among its
activities wins. Backward ops without that link fall back to their schedule position
(the k-th backward op, Megatron's order). Then per activity, by its launch:

* inside a forward op -> FWD; inside a backward op -> BWD, or RECOMPUTE when the launch's
  nearest autograd node is a checkpoint function (``CheckpointFunctionBackward``) or it
  runs in a recompute frame (``custom_forward``);
* a P2P send belongs to the op just before it, a receive to the op just after it (the
  activation / gradient it moves), taking that op's phase and micro-batch;
* inside ``Optimizer.step#...`` or optimizer / finalize frames, or after the iteration's
  last backward op (gradient finalization and the optimizer step) -> OPTIMIZER;
* anything else (and activities without a known launch) -> OTHER.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..table.arrays import group_positions
from ..table.schema import BWD, FWD, OPTIMIZER, OTHER, RECOMPUTE

F_OP, B_OP = 0, 1


@dataclass
class LaunchFacts:
    """Per-activity facts about its launch (all arrays aligned with the activities)."""

    ts: np.ndarray          # launch start (ns); -1 where no launch
    end: np.ndarray         # launch end (ns)
    thread: np.ndarray      # thread index of the launch (int32); -1 none
    iteration: np.ndarray   # ProfilerStep number (-1 outside)
    p2p: np.ndarray         # 0 not P2P, 1 send, 2 receive
    recompute: np.ndarray   # nearest autograd node / frame says recompute
    optimizer: np.ndarray   # inside an optimizer annotation or frame
    forward_ts: np.ndarray  # start of the forward op its autograd node differentiates; -1


def root_spans(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans not nested in another span of the set (the outermost of each nest)."""
    if ts.shape[0] == 0:
        return ts, end
    order = np.lexsort((-end, ts))
    ts, end = ts[order], end[order]
    running = np.maximum.accumulate(end)
    keep = np.ones(ts.shape[0], dtype=bool)
    keep[1:] = end[1:] > running[:-1]  # not contained in an earlier (outer) span
    return ts[keep], end[keep]


def schedule_position(k: np.ndarray, backward: bool, pp: int, vpp: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batch, chunk) of the k-th forward or backward op of a stage.

    1F1B: (k, 0). Interleaved (Megatron): micro-batches go in groups of ``pp`` per chunk.
    """
    if vpp <= 1:
        return k.astype(np.int32), np.zeros(k.shape[0], dtype=np.int32)
    mb = (k // (pp * vpp)) * pp + k % pp
    chunk = (k // pp) % vpp
    if backward:
        chunk = vpp - 1 - chunk
    return mb.astype(np.int32), chunk.astype(np.int32)


def ops_from_frames(f_ts, f_end, b_ts, b_end) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, kind) of the micro-batch ops stated by python frames, in time order."""
    f_ts, f_end = root_spans(f_ts, f_end)
    b_ts, b_end = root_spans(b_ts, b_end)
    ts = np.concatenate([f_ts, b_ts])
    end = np.concatenate([f_end, b_end])
    kind = np.concatenate([np.full(f_ts.shape[0], F_OP), np.full(b_ts.shape[0], B_OP)])
    order = np.argsort(ts, kind="stable")
    return ts[order], end[order], kind[order]


def ops_from_threads(facts: LaunchFacts, rows: np.ndarray, main_thread: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Micro-batch ops as runs of launches (see the module doc) among ``rows``.

    Returns (start, end, kind, op index per element of ``rows``; -1 for P2P and
    optimizer rows).
    """
    local = np.argsort(facts.ts[rows], kind="stable")
    order = rows[local]
    kind = np.where(facts.thread[order] == main_thread, F_OP, B_OP)
    breaker = (facts.p2p[order] > 0) | facts.optimizer[order]
    new_run = np.ones(order.shape[0], dtype=bool)
    new_run[1:] = (kind[1:] != kind[:-1]) | breaker[:-1]
    run = np.cumsum(new_run & ~breaker) - 1
    member = ~breaker
    op_of = np.full(rows.shape[0], -1, dtype=np.int64)
    op_of[local[member]] = run[member]
    n_ops = int(run[member].max()) + 1 if member.any() else 0
    start = np.full(n_ops, np.iinfo(np.int64).max)
    end = np.full(n_ops, np.iinfo(np.int64).min)
    op_kind = np.zeros(n_ops, dtype=np.int64)
    np.minimum.at(start, run[member], facts.ts[order[member]])
    np.maximum.at(end, run[member], facts.end[order[member]])
    op_kind[run[member]] = kind[member]
    return start, end, op_kind, op_of


def classify_iteration(facts: LaunchFacts, rows: np.ndarray, ops, op_of: np.ndarray | None,
                       pp: int, vpp: int, out_phase, out_mb, out_chunk) -> tuple[int, int]:
    """Assign phase / micro-batch / chunk to ``rows`` (activities of one iteration).
    ``op_of`` is :func:`ops_from_threads`' op per launched row (the ``rows`` with a
    launch, in order), or None to place launches in the ops' spans (frames).
    Returns (backward ops linked to their forward op by Sequence number, backward ops)."""
    start, end, kind = ops
    training = bool((kind == B_OP).any())
    # forward ops after the last backward op are not micro-batches: that is the
    # finalization + optimizer tail of the step
    if training:
        last_b = np.flatnonzero(kind == B_OP)[-1]
        tail = np.arange(kind.shape[0]) > last_b
        op_phase = np.where(tail, OPTIMIZER, np.where(kind == F_OP, FWD, BWD))
    else:
        op_phase = np.where(kind == F_OP, FWD, BWD)
    op_mb = np.full(kind.shape[0], -1, dtype=np.int32)
    op_chunk = np.zeros(kind.shape[0], dtype=np.int32)
    for k_kind, phase in ((F_OP, FWD), (B_OP, BWD)):
        sel = np.flatnonzero((kind == k_kind) & (op_phase == phase))
        mb, chunk = schedule_position(np.arange(sel.shape[0]), k_kind == B_OP, pp, vpp)
        op_mb[sel], op_chunk[sel] = mb, chunk
    launched = rows[facts.ts[rows] >= 0]
    t = facts.ts[launched]
    if op_of is None:  # frames: the op whose span holds the launch
        pos = np.searchsorted(start, t, side="right") - 1
        inside = (pos >= 0) & (t < end[np.maximum(pos, 0)])
        op = np.where(inside, pos, -1)
    else:  # ops_from_threads' op per launched row
        op = op_of
    linked = _link_backward_ops(facts.forward_ts[launched], op, start, end, kind, op_phase,
                                op_mb, op_chunk)
    p2p = facts.p2p[launched]
    # P2P: a send belongs to the op just before it (the last op started at or before
    # it), a receive to the op just after it (the first op not ended before it)
    before = np.searchsorted(start, t, side="right") - 1
    after = np.searchsorted(end, t, side="right")
    op = np.where(p2p == 1, np.where(before >= 0, before, -1), op)
    op = np.where(p2p == 2, np.where(after < start.shape[0], after, -1), op)
    has = op >= 0
    phase = np.full(launched.shape[0], OTHER, dtype=np.int8)
    phase[has] = op_phase[op[has]]
    mb = np.full(launched.shape[0], -1, dtype=np.int32)
    chunk = np.zeros(launched.shape[0], dtype=np.int32)
    mb[has], chunk[has] = op_mb[op[has]], op_chunk[op[has]]
    phase[(phase == BWD) & facts.recompute[launched] & (p2p == 0)] = RECOMPUTE
    if training and end.shape[0]:
        last_b_end = end[np.flatnonzero(kind == B_OP)[-1]]
        tail = (~has) & (t > last_b_end)
        phase[tail] = OPTIMIZER
    opt = facts.optimizer[launched]
    phase[opt] = OPTIMIZER
    mb[phase == OPTIMIZER] = -1
    chunk[phase == OPTIMIZER] = 0
    out_phase[launched], out_mb[launched], out_chunk[launched] = phase, mb, chunk
    return linked, int(((kind == B_OP) & (op_phase == BWD)).sum())


def _link_backward_ops(forward_ts, op, start, end, kind, op_phase, op_mb, op_chunk) -> int:
    """Give each backward op the micro-batch / chunk of the forward op its activities'
    autograd nodes differentiate (``forward_ts``: that forward op's start). A forward
    cpu_op starts before its first launch, so its micro-batch op is the first op ending
    after it. Updates ``op_mb`` / ``op_chunk`` in place; returns the backward ops linked."""
    sel = np.flatnonzero((forward_ts >= 0) & (op >= 0))
    sel = sel[kind[op[sel]] == B_OP]
    if not sel.size:
        return 0
    target = np.searchsorted(end, forward_ts[sel], side="right")
    ok = target < start.shape[0]
    sel, target = sel[ok], target[ok]
    ok = (kind[target] == F_OP) & (op_phase[target] == FWD)
    b_op, f_op = op[sel[ok]], target[ok]
    if not b_op.size:
        return 0
    pairs, counts = np.unique(np.stack([b_op, f_op]), axis=1, return_counts=True)
    best = np.lexsort((-counts, pairs[0]))  # per backward op, the most common first
    first = np.ones(best.shape[0], dtype=bool)
    first[1:] = pairs[0, best[1:]] != pairs[0, best[:-1]]
    b, f = pairs[0, best[first]], pairs[1, best[first]]
    keep = op_phase[b] == BWD  # not the optimizer tail
    b, f = b[keep], f[keep]
    op_mb[b], op_chunk[b] = op_mb[f], op_chunk[f]
    return int(b.shape[0])


def classify(facts: LaunchFacts, frames: dict[str, tuple[np.ndarray, np.ndarray]],
             main_thread: int, pp: int, vpp: int) -> tuple[np.ndarray, np.ndarray,
                                                            np.ndarray, dict]:
    """Phase codes, micro-batch and chunk per activity, and the evidence used."""
    n = facts.ts.shape[0]
    phase = np.full(n, OTHER, dtype=np.int8)
    mb = np.full(n, -1, dtype=np.int32)
    chunk = np.zeros(n, dtype=np.int32)
    use_frames = frames["forward_step"][0].shape[0] > 0
    linked = backward = 0
    its = np.unique(facts.iteration)  # -1 (outside every step) first, if any
    shift = its[0] if n else 0
    by_iteration, bounds = group_positions(facts.iteration - shift, its - shift)
    for k in range(its.shape[0]):
        rows = by_iteration[bounds[k]:bounds[k + 1]]  # ascending
        if use_frames:
            lo = facts.ts[rows][facts.ts[rows] >= 0].min(initial=np.iinfo(np.int64).max)
            hi = facts.end[rows].max(initial=np.iinfo(np.int64).min)
            spans = {}
            for key in ("forward_step", "backward_step"):
                ts, end = frames[key]
                sel = (end > lo) & (ts < hi)
                spans[key] = (ts[sel], end[sel])
            ops = ops_from_frames(*spans["forward_step"], *spans["backward_step"])
            counts = classify_iteration(facts, rows, ops, None, pp, vpp, phase, mb, chunk)
        else:
            launched = rows[facts.ts[rows] >= 0]
            *ops, op_of = ops_from_threads(facts, launched, main_thread)
            counts = classify_iteration(facts, rows, tuple(ops), op_of, pp, vpp, phase, mb,
                                        chunk)
        linked, backward = linked + counts[0], backward + counts[1]
    evidence = {
        "micro-batch ops": ("python frames forward_step / backward_step" if use_frames else
                            "launching threads (main-thread forward runs, autograd-thread "
                            "backward runs, split at P2P calls)"),
        "backward ops": backward,
        "backward ops paired with their forward op by Sequence number": linked,
        "backward ops paired by schedule position": backward - linked}
    return phase, mb, chunk, evidence
