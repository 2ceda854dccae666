"""Phase (FWD / BWD / RECOMPUTE / OPTIMIZER / OTHER), micro-batch and model chunk of each
GPU activity, from what the trace states about the CPU call that launched it.

Micro-batch ops (one forward or one backward of one micro-batch) come from, in order of
preference:

1. ``forward_step`` / ``backward_step`` python frames (``with_stack`` traces; the
   outermost frame of a nest is the op);
2. otherwise the launching threads: a run of launches from the main thread (the thread
   of the ``ProfilerStep#N`` annotations) is a forward op, a run from another thread (the
   autograd engine) a backward op; runs are split where the thread changes or a P2P call
   is issued (Megatron sends / receives between micro-batch ops). The memsets and
   zeroing kernels that open an iteration (Megatron zeroes the gradient buffers and
   makes its token count before the schedule runs), a run that launches only memory
   copies / sets, and the schedule's bookkeeping at either end of a forward run
   (Megatron's ``total_num_tokens += num_tokens`` after each forward step) are no
   micro-batch op. A backward op's main-thread prelude (Megatron's ``backward_step`` on
   the last stage scales the loss and makes the root gradient on the main thread before
   the autograd thread runs) belongs to it: the main-thread launches after the forward
   op that its first autograd node differentiates, and that op's own where it scales
   the loss (the loss itself, or a whole compiled forward graph, stays forward), when
   that op was started after the op before the preceding run ended; where no Sequence
   number tells, surplus small forward runs right before a backward run (more forward
   runs than backward runs) join it.

The k-th forward op of an iteration is micro-batch ``k`` under 1F1B; under interleaved
1F1B (``vpp`` > 1 model chunks per stage) Megatron's schedule table maps k to
(micro-batch, chunk): micro-batches in groups of ``pp``, every chunk per group. The
schedule and ``vpp`` are found from the trace (:func:`detect_vpp`: the forward ops a stage
runs before its first backward, as Megatron's schedules count their warm-up, and the
interleaved schedule's frame when there are python frames); a given ``vpp`` overrides. A
backward op takes the micro-batch and chunk of the forward op it differentiates, as the
trace states it: its autograd nodes' ``Sequence number`` is that of forward ops on the
main thread (the ``fwdbwd`` flows join the same pairs); the most common answer among its
activities wins. Backward ops without that link fall back to their schedule position
(the k-th backward op, Megatron's order). Then per activity, by its launch:

* inside a forward op -> FWD; inside a backward op -> BWD, or RECOMPUTE when it is what
  a recomputed forward launched (``LaunchFacts.recompute``: inside a checkpoint
  function's backward before its nested backward began, or in a recompute frame);
* a P2P send belongs to the op just before it, a receive to the op just after it (the
  activation / gradient it moves), taking that op's phase and micro-batch;
* inside ``Optimizer.step#...`` or optimizer / finalize frames outside every micro-batch
  op (Megatron's backward_step scales the loss through the optimizer's ``scale_loss``:
  that stays the step's), or after the iteration's last backward op (gradient
  finalization and the optimizer step) -> OPTIMIZER;
* anything else (and activities without a known launch) -> OTHER;
* a kernel whose own or launching op's name says it is backward work
  (``phases.backward_name``) is BWD (micro-batch unknown) unless it is BWD or
  RECOMPUTE already.

Micro-batch ops come only from the main thread and autograd engine threads (those that
launch inside an autograd node or launch backward-named work): launches of other threads
(data loaders, an inference server's workers) are OTHER. A trace with no launch inside
any cpu_op (GPU-only) states nothing about its work: OTHER but for backward names.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..table import parked
from ..table.arrays import group_positions, row_groups
from ..table.parked import InMemory
from ..table.schema import BWD, FWD, OPTIMIZER, OTHER, RECOMPUTE
from ..topology.schedule import schedule_table, warmup

F_OP, B_OP = 0, 1
# LaunchFacts.memory: a memory copy / set, a kernel that fills memory (zeroing), the
# schedule's bookkeeping between steps (patterns.toml: zeroing_kernel, bookkeeping_kernel)
MEMCPY, MEMSET, ZEROING, BOOKKEEPING = 1, 2, 3, 4


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
    # those forward ops: (starts ascending, ends, a loss scaling); None: unknown
    forward_ops: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    memory: np.ndarray | None = None  # MEMCPY / MEMSET / ZEROING / BOOKKEEPING, 0 other
    #                                   (None: unknown, 0)
    backward_named: np.ndarray | None = None  # its kernel or op name says backward
    autograd: np.ndarray | None = None  # launch inside an autograd node (None: unknown)
    in_op: np.ndarray | None = None     # launch inside a cpu_op (None: unknown)


def op_threads(facts: LaunchFacts, main_thread: int, store: InMemory | None = None
               ) -> np.ndarray:
    """Per activity: whether its launch thread can run micro-batch ops, i.e. is the main
    thread or an autograd engine thread (one that launches inside an autograd node, or
    launches work whose name says backward); every launching thread when that is
    unknown. Launches of other threads (data loaders, inference servers' workers) are no
    forward or backward work. Made in ``store``, a slice at a time when it parks."""
    store = store or InMemory()
    if facts.autograd is None:
        return store.map(bool, lambda t: t >= 0, facts.thread)
    said = [facts.autograd] + ([] if facts.backward_named is None else
                               [facts.backward_named])
    engine = store.unique(lambda t, *s: t[np.logical_or.reduce(s) & (t >= 0)],
                          facts.thread, *said)
    return store.map(bool, lambda t: (t >= 0) & ((t == main_thread) | np.isin(t, engine)),
                     facts.thread)


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


def schedule_position(k: np.ndarray, backward: bool, pp: int, vpp: int,
                      microbatches: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batch, chunk) of the k-th forward or backward op of a stage (Megatron's
    schedule table, :mod:`traceviz.topology.schedule`; a backward runs its chunk
    mirrored); -1 past the table. ``microbatches`` defaults to the ops given over
    ``vpp``."""
    k = np.asarray(k, dtype=np.int64)
    if vpp <= 1:
        return k.astype(np.int32), np.zeros(k.shape[0], dtype=np.int32)
    m = microbatches if microbatches is not None else -(-(int(k.max(initial=-1)) + 1) // vpp)
    table = np.array(schedule_table(m, vpp, pp) + [(-1, 0)], dtype=np.int64)
    mb, chunk = table[np.where(k < table.shape[0] - 1, k, -1)].T
    if backward:
        chunk = np.where(mb >= 0, vpp - 1 - chunk, 0)
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

    Returns (start, end, kind, op index per element of ``rows``; -1 for P2P, optimizer
    and memory-only runs' rows), ops in time order.
    """
    local = np.argsort(facts.ts[rows], kind="stable")
    order = rows[local]
    kind = np.where(facts.thread[order] == main_thread, F_OP, B_OP)
    breaker = (facts.p2p[order] > 0) | facts.optimizer[order]
    new_run = np.ones(order.shape[0], dtype=bool)
    new_run[1:] = (kind[1:] != kind[:-1]) | breaker[:-1]
    run = np.where(breaker, -1, np.cumsum(new_run & ~breaker) - 1)
    memory = facts.memory[order] if facts.memory is not None else None
    if memory is not None and order.size:
        # the memsets and zeroing kernels that open the iteration (gradient buffers
        # zeroed, counters made) are no step's
        opening = (memory == MEMSET) | (memory == ZEROING)
        run[:int(np.argmax(~opening)) if (~opening).any() else None] = -1
        # a run of memory copies / sets only is no micro-batch op (a run of fills is:
        # the root gradient's ones_like before a backward)
        work = np.zeros(int(run.max()) + 2, dtype=bool)
        work[run[(memory != MEMCPY) & (memory != MEMSET)]] = True
        run = np.where(work[run], run, -1)
    _move_preludes(facts, order, kind, run)
    if memory is not None:
        _trim_bookkeeping(kind, run, memory == BOOKKEEPING)
    _merge_excess_forwards(kind, run)
    kept, run = np.unique(run, return_inverse=True)  # dense, in time order
    run = run.ravel() - int(kept[0] < 0 if kept.size else 0)
    member = run >= 0
    op_of = np.full(rows.shape[0], -1, dtype=np.int32)  # held for every iteration
    op_of[local[member]] = run[member]
    n_ops = int(run.max()) + 1 if member.any() else 0
    start = np.full(n_ops, np.iinfo(np.int64).max)
    end = np.full(n_ops, np.iinfo(np.int64).min)
    op_kind = np.zeros(n_ops, dtype=np.int64)
    np.minimum.at(start, run[member], facts.ts[order[member]])
    np.maximum.at(end, run[member], facts.end[order[member]])
    np.maximum.at(op_kind, run[member], kind[member])  # a backward keeps its prelude
    return start, end, op_kind, op_of


def _trim_bookkeeping(kind: np.ndarray, run: np.ndarray, bookkeeping: np.ndarray) -> None:
    """Take the bookkeeping launches (``bookkeeping``, per launch in time order) at
    either end of each forward run off it, in place: what the schedule launches between
    steps on their thread (Megatron's running token count) is no step's work."""
    pos = np.flatnonzero(run >= 0)
    if not pos.size or not bookkeeping[pos].any():
        return
    r = run[pos]
    edge = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])  # each run's first launch
    for first, end in zip(edge.tolist(), (np.r_[edge[1:], r.size] - 1).tolist()):
        if kind[pos[first]] != F_OP:
            continue
        k = end
        while k >= first and bookkeeping[pos[k]]:
            run[pos[k]] = -1
            k -= 1
        k, last = first, k
        while k <= last and bookkeeping[pos[k]]:
            run[pos[k]] = -1
            k += 1


EXCESS_RUN_LAUNCHES = 4  # a forward run this small can be a backward's prelude


def _merge_excess_forwards(kind: np.ndarray, run: np.ndarray) -> None:
    """When an iteration has more forward runs than backward runs (before its last
    backward), the surplus are backward preludes the Sequence numbers did not place (the
    root gradient ``torch.autograd.backward`` makes on the calling thread): the smallest
    forward runs (at most :data:`EXCESS_RUN_LAUNCHES` launches) directly before a backward
    run join it, in place, until the counts agree."""
    pos = np.flatnonzero(run >= 0)
    if not pos.size:
        return
    r = run[pos]
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    size = np.diff(np.r_[first, r.size])
    run_kind = kind[pos[first]]
    backs = np.flatnonzero(run_kind == B_OP)
    if not backs.size:
        return
    last_b = backs[-1]
    excess = int((run_kind[:last_b] == F_OP).sum()) - backs.size
    if excess <= 0:
        return
    cands = [b - 1 for b in backs if b >= 1 and run_kind[b - 1] == F_OP
             and size[b - 1] <= EXCESS_RUN_LAUNCHES]
    for c in sorted(cands, key=lambda c: size[c])[:excess]:
        run[pos[first[c]:first[c] + size[c]]] = r[first[c + 1]]


def _move_preludes(facts: LaunchFacts, order: np.ndarray, kind: np.ndarray,
                   run: np.ndarray) -> None:
    """Give each backward run its main-thread prelude (see the module doc), in place:
    the launches of the forward run just before it after the forward op that the
    backward run's first linked autograd node differentiates (the root gradient), and
    that op's own when it scales the loss (``LaunchFacts.forward_ops``), when that op
    began after the run before the forward run ended. ``run``: run number per launch in
    time order (-1: none), non-decreasing over the others."""
    pos = np.flatnonzero(run >= 0)
    if not pos.size:
        return
    r = run[pos]
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    bounds = np.r_[first, r.size]
    run_kind = kind[pos[first]]
    ends = np.maximum.reduceat(facts.end[order[pos]], first)
    fwd_ts = facts.forward_ts[order[pos]]
    ts = facts.ts[order[pos]]
    for b in range(1, first.size):
        if run_kind[b] != B_OP or run_kind[b - 1] != F_OP:
            continue
        linked = np.flatnonzero(fwd_ts[bounds[b]:bounds[b + 1]] >= 0)
        if not linked.size:
            continue
        root = fwd_ts[bounds[b] + linked[0]]
        before = ends[b - 2] if b >= 2 else np.iinfo(np.int64).min
        if before < root <= ends[b - 1]:
            lo, hi = bounds[b - 1], bounds[b]
            run[pos[lo + np.flatnonzero(ts[lo:hi] >= _prelude_from(facts, root))]] = \
                r[bounds[b]]


def _prelude_from(facts: LaunchFacts, root: int) -> int:
    """Where a backward's main-thread prelude begins, given the start of the forward op
    its first autograd node differentiates: that op's start when it scales the loss
    (Megatron's backward_step), else its end (what the main thread launched after the
    forward's last op: the root gradient); its start where the op is unknown."""
    if facts.forward_ops is None:
        return root
    starts, ends, scale = facts.forward_ops
    k = int(np.searchsorted(starts, root))
    if k >= starts.shape[0] or starts[k] != root or scale[k]:
        return root
    return int(ends[k])


def classify_iteration(facts: LaunchFacts, rows: np.ndarray, ops,
                       op_of: tuple[np.ndarray, np.ndarray] | None, pp: int, vpp: int,
                       out_phase, out_mb, out_chunk, eligible: np.ndarray) -> tuple[int, int]:
    """Assign phase / micro-batch / chunk to ``rows`` (activities of one iteration).
    ``op_of`` is (the rows :func:`ops_from_threads` was given, its op per row), or None
    to place launches in the ops' spans (frames). Only ``eligible`` activities (see
    :func:`op_threads`) get a phase from the ops or the optimizer tail.
    Returns (backward ops linked to their forward op by Sequence number, backward ops)."""
    start, end, kind = ops
    training = bool((kind == B_OP).any())
    # forward ops after the last backward op are not micro-batches: that is the
    # finalization + optimizer tail of the step
    if training:
        last_b = np.flatnonzero(kind == B_OP)[-1]
        tail = np.arange(kind.shape[0]) > last_b
        op_phase: np.ndarray = np.where(tail, OPTIMIZER, np.where(kind == F_OP, FWD, BWD))
    else:
        op_phase = np.where(kind == F_OP, FWD, BWD)
    op_mb = np.full(kind.shape[0], -1, dtype=np.int32)
    op_chunk = np.zeros(kind.shape[0], dtype=np.int32)
    for k_kind, k_phase in ((F_OP, FWD), (B_OP, BWD)):
        sel = np.flatnonzero((kind == k_kind) & (op_phase == k_phase))
        op_mb[sel], op_chunk[sel] = schedule_position(np.arange(sel.shape[0]),
                                                      k_kind == B_OP, pp, vpp)
    pairs = [_backward_pairs(facts.forward_ts[part], op, start, end, kind, op_phase)
             for part, _, op in _launch_ops(facts, rows, start, end, op_of)]
    linked = _link_backward_ops(pairs, op_phase, op_mb, op_chunk)
    last_b_end = (end[np.flatnonzero(kind == B_OP)[-1]] if training and end.shape[0]
                  else None)
    for part, t, op in _launch_ops(facts, rows, start, end, op_of):
        p2p = facts.p2p[part]
        # P2P: a send belongs to the op just before it (the last op started at or before
        # it), a receive to the op just after it (the first op not ended before it)
        before = np.searchsorted(start, t, side="right") - 1
        after = np.searchsorted(end, t, side="right")
        op = np.where(p2p == 1, np.where(before >= 0, before, -1), op)
        op = np.where(p2p == 2, np.where(after < start.shape[0], after, -1), op)
        del before, after
        op = np.where(eligible[part], op, -1)
        has = op >= 0
        phase = np.full(part.shape[0], OTHER, dtype=np.int8)
        phase[has] = op_phase[op[has]]
        mb = np.full(part.shape[0], -1, dtype=np.int32)
        chunk = np.zeros(part.shape[0], dtype=np.int32)
        mb[has], chunk[has] = op_mb[op[has]], op_chunk[op[has]]
        phase[(phase == BWD) & facts.recompute[part] & (p2p == 0)] = RECOMPUTE
        if last_b_end is not None:
            phase[(~has) & (t > last_b_end) & eligible[part]] = OPTIMIZER
        # an optimizer frame inside a step is the step's (Megatron's backward_step
        # scales the loss through the optimizer's scale_loss)
        phase[facts.optimizer[part] & ~has] = OPTIMIZER
        mb[phase == OPTIMIZER] = -1
        chunk[phase == OPTIMIZER] = 0
        out_phase[part], out_mb[part], out_chunk[part] = phase, mb, chunk
    return linked, int(((kind == B_OP) & (op_phase == BWD)).sum())


# launches classified at a time: ~80 bytes each of working arrays (20 MB per slice)
LAUNCH_SLICE = 1 << 18


def _launch_ops(facts: LaunchFacts, rows: np.ndarray, start: np.ndarray, end: np.ndarray,
                op_of: tuple[np.ndarray, np.ndarray] | None):
    """Yield ``(part, launch start, op)`` for the launched activities among ``rows``
    (ascending), :data:`LAUNCH_SLICE` of ``rows`` at a time (what one slice holds is a few
    arrays of that length, whatever the iteration's size: a trace without ProfilerStep is
    one iteration). ``op``: the op each launch belongs to (-1 none): the op whose span
    holds it (``op_of`` None: frames), else :func:`ops_from_threads`' op per row given."""
    step = min(parked.SLICE_ROWS, LAUNCH_SLICE)
    for lo in range(0, rows.shape[0], step):
        part = rows[lo:lo + step]
        t = facts.ts[part]
        part, t = part[t >= 0], t[t >= 0]
        if op_of is None:
            pos = np.searchsorted(start, t, side="right") - 1
            op = np.where((pos >= 0) & (t < end[np.maximum(pos, 0)]), pos, -1)
        else:
            own, own_op = op_of
            at = np.minimum(np.searchsorted(own, part), max(own.shape[0] - 1, 0))
            op = (np.where(own[at] == part, own_op[at], -1) if own.shape[0]
                  else np.full(part.shape[0], -1, dtype=np.int64))
        yield part, t, op


def _backward_pairs(forward_ts, op, start, end, kind, op_phase
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs, counts)``: the distinct (backward op, forward op) pairs among these
    launches (``pairs``: 2 x k) and how many launches state each, where a launch's
    autograd node differentiates a forward cpu_op started at ``forward_ts``. A forward
    cpu_op starts before its first launch, so its micro-batch op is the first op ending
    after it."""
    none = (np.zeros((2, 0), dtype=np.int64), np.zeros(0, dtype=np.int64))
    sel = np.flatnonzero((forward_ts >= 0) & (op >= 0))
    sel = sel[kind[op[sel]] == B_OP]
    if not sel.size:
        return none
    target = np.searchsorted(end, forward_ts[sel], side="right")
    ok = target < start.shape[0]
    sel, target = sel[ok], target[ok]
    ok = (kind[target] == F_OP) & (op_phase[target] == FWD)
    b_op, f_op = op[sel[ok]], target[ok]
    if not b_op.size:
        return none
    first, pair = row_groups(b_op.astype(np.int64), f_op.astype(np.int64))
    return np.stack([b_op[first], f_op[first]]).astype(np.int64), np.bincount(pair)


def _link_backward_ops(pairs: list[tuple[np.ndarray, np.ndarray]], op_phase, op_mb,
                       op_chunk) -> int:
    """Give each backward op the micro-batch / chunk of the forward op most of its
    activities' autograd nodes differentiate (``pairs``: :func:`_backward_pairs` of each
    slice of launches). Updates ``op_mb`` / ``op_chunk`` in place; returns the backward
    ops linked."""
    if not any(c.size for _, c in pairs):
        return 0
    pairs_all = np.concatenate([p for p, _ in pairs], axis=1)
    firsts, inverse = row_groups(*pairs_all)
    uniq = pairs_all[:, firsts]
    counts = np.bincount(inverse, weights=np.concatenate([c for _, c in pairs]),
                         minlength=uniq.shape[1])
    best = np.lexsort((-counts, uniq[0]))  # per backward op, the most common first
    first = np.ones(best.shape[0], dtype=bool)
    first[1:] = uniq[0, best[1:]] != uniq[0, best[:-1]]
    b, f = uniq[0, best[first]], uniq[1, best[first]]
    keep = op_phase[b] == BWD  # not the optimizer tail
    b, f = b[keep], f[keep]
    op_mb[b], op_chunk[b] = op_mb[f], op_chunk[f]
    return int(b.shape[0])


def _forwards_first(pp: int, stage: int, vpp: int, forwards: int) -> int:
    """Forward steps Megatron runs before a stage's first backward: its warm-up, and the
    first steady-state forward when warm-up is not all of them."""
    warm = warmup(pp, stage, vpp, forwards)
    return warm + 1 if warm < forwards else forwards


def detect_vpp(kinds: list[np.ndarray], pp: int, stage: int | None,
               interleaved: bool | None) -> tuple[int, str]:
    """(model chunks per stage, the evidence) from the op kinds (F_OP / B_OP, time order)
    of each iteration of a stage: the forward steps before the first backward are
    Megatron's warm-up and one more, which tells 1F1B (warm-up ``pp - stage - 1``) from
    the interleaved schedule (``2 (pp - stage - 1) + (vpp - 1) pp``, at least ``pp``
    micro-batches); ``interleaved`` is what the schedule's python frame says (None: no
    frame). 1 when nothing tells."""
    if pp <= 1:
        return 1, "no pipeline parallelism"
    frame = {True: "; the interleaved schedule's frame is in the trace",
             False: "; the 1F1B schedule's frame is in the trace", None: ""}[interleaved]
    if stage is None:
        return 1, "stage unknown (no pipeline group for this rank): 1F1B assumed" + frame
    for k in kinds:
        if not (k == B_OP).any():
            continue
        last_b = np.flatnonzero(k == B_OP)[-1]
        forwards = int((k[:last_b] == F_OP).sum())
        warm = int(np.argmax(k == B_OP))
        # Megatron's interleaved schedule needs at least pp micro-batches
        fits = [v for v in range(1, forwards + 1) if forwards % v == 0
                and (v == 1 or forwards // v >= pp)
                and _forwards_first(pp, stage, v, forwards) == warm
                and (interleaved is None or interleaved == (v > 1))]
        said = (f"{warm} forward steps before the first backward and {forwards} in all "
                f"on stage {stage} of {pp}")
        if len(fits) == 1:
            v = fits[0]
            kind = "1F1B" if v == 1 else f"interleaved 1F1B, {v} model chunks per stage"
            return v, f"{kind}: {said}" + frame
        if len(fits) > 1:
            return 1, (f"ambiguous ({said} fit vpp {fits}); 1F1B assumed, pass --vpp"
                       + frame)
        return 1, f"no Megatron schedule fits ({said}); 1F1B assumed" + frame
    return 1, "no backward step: 1F1B assumed" + frame


def _own(facts: LaunchFacts, rows: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """The launched activities among ``rows`` whose launch thread runs micro-batch ops."""
    return rows[(facts.ts[rows] >= 0) & eligible[rows]]


def _by_iteration(iteration: np.ndarray, its: np.ndarray, store: InMemory
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, bounds)``: the activities of iteration ``its[k]`` (ascending) are
    ``positions[bounds[k]:bounds[k+1]]``; a counting sort, a ``store`` slice at a time."""
    shift = its[0] if its.shape[0] else 0
    if not store.parks:
        return group_positions(iteration - shift, its - shift)
    counts = np.zeros(its.shape[0], dtype=np.int64)
    for lo, hi in store.slices(iteration.shape[0]):
        counts += np.diff(group_positions(iteration[lo:hi] - shift, its - shift)[1])
    bounds = np.zeros(its.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    positions = store.full(int(bounds[-1]), 0,
                           np.int32 if iteration.shape[0] < 2**31 else np.int64)
    cursor = bounds[:-1].copy()
    for lo, hi in store.slices(iteration.shape[0]):
        pos, b = group_positions(iteration[lo:hi] - shift, its - shift)
        for k in np.flatnonzero(np.diff(b)).tolist():
            m = int(b[k + 1] - b[k])
            positions[cursor[k]:cursor[k] + m] = pos[b[k]:b[k + 1]] + lo
            cursor[k] += m
    return positions, bounds


def classify(facts: LaunchFacts, frames: dict[str, tuple[np.ndarray, np.ndarray]],
             main_thread: int, pp: int, vpp: int | None, stage: int | None = 0,
             interleaved: bool | None = None, store: InMemory | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Phase codes, micro-batch and chunk per activity, and the evidence used. ``vpp``
    None: found from the trace (:func:`detect_vpp`; ``stage``: this rank's pipeline
    stage, None unknown; ``interleaved``: what the schedule's frame says).

    ``store`` (:mod:`traceviz.table.parked`) holds the per-activity results and working
    arrays; when it parks them, each iteration's work touches only that iteration's
    activities (they are contiguous but for the launches that overlap the iteration's
    edges), and their pages are released after it."""
    store = store or InMemory()
    n = facts.ts.shape[0]
    phase = store.full(n, OTHER, np.int8)
    mb = store.full(n, -1, np.int32)
    chunk = store.full(n, 0, np.int32)
    use_frames = frames["forward_step"][0].shape[0] > 0
    # no launch inside any cpu_op: nothing states what the work is (GPU-only traces)
    unknown = (not use_frames and facts.in_op is not None
               and not store.count(facts.in_op, lambda v: v))
    eligible = (store.full(n, False, bool) if unknown
                else op_threads(facts, main_thread, store))
    its = store.unique(lambda i: i, facts.iteration)  # -1 (outside every step) first
    by_iteration, bounds = _by_iteration(facts.iteration, its, store)
    op_all = None if use_frames else store.full(n, -1, np.int32)  # op per launch
    found: list[tuple[np.ndarray, tuple]] = []  # per iteration: (rows, ops)
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
            found.append((rows, ops_from_frames(*spans["forward_step"],
                                                *spans["backward_step"])))
        else:
            own = _own(facts, rows, eligible)
            *ops, op_of = ops_from_threads(facts, own, main_thread)
            assert op_all is not None  # made for the threads' ops above
            op_all[own] = op_of  # a few pages: the iteration's
            found.append((rows, tuple(ops)))
        store.release()
    if vpp is None:
        vpp, schedule = detect_vpp([found_ops[2] for _, found_ops in found], pp, stage,
                                   interleaved)
    else:
        schedule = f"vpp {vpp} given"
    linked = backward = 0
    for rows, it_ops in found:
        given = None
        if op_all is not None:
            own = _own(facts, rows, eligible)
            given = (own, op_all[own])
        counts = classify_iteration(facts, rows, it_ops, given, pp, vpp, phase, mb, chunk,
                                    eligible)
        linked, backward = linked + counts[0], backward + counts[1]
        store.release()
    renamed = 0
    if facts.backward_named is not None:  # a kernel whose name says backward is BWD
        for lo, hi in store.slices(n):
            wrong = np.flatnonzero(facts.backward_named[lo:hi] & (phase[lo:hi] != BWD)
                                   & (phase[lo:hi] != RECOMPUTE))
            renamed += wrong.shape[0]
            phase[lo + wrong], mb[lo + wrong], chunk[lo + wrong] = BWD, -1, 0
    evidence = {
        "micro-batch ops": ("python frames forward_step / backward_step" if use_frames else
                            "none: no launch inside a cpu_op (phases OTHER but for "
                            "backward-named kernels)" if unknown else
                            "launching threads (main-thread forward runs, autograd-engine-"
                            "thread backward runs, split at P2P calls)"),
        "schedule": schedule, "vpp": vpp,
        "backward ops": backward,
        "backward ops paired with their forward op by Sequence number": linked,
        "backward ops paired by schedule position": backward - linked,
        "backward kernels by name outside a backward op": renamed}
    return phase, mb, chunk, evidence
