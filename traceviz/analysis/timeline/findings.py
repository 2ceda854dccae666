"""What the op timeline shows, before any what-if: each worker's speed per step and the
slow ones, uneven data, the stages' balance and the slow data-parallel groups.

**Worker speed** in a step: its compute ops' exclusive time / their typical time
(:mod:`.model`). With three or more stages, divided by its pipeline's (DP rank's)
median over the stages in that step, so that a step's uneven data (which slows every
stage of a pipeline alike) is not taken for a slow GPU. Its **slowdown** in a step: that
speed / the median worker's in the step.

**A persistent slow worker** (a straggler): its slowdown (each step's the median of it and
its neighbours') is >= 1 + :data:`MIN_SLOW` in :data:`PERSIST` consecutive steps or more
(every step of a shorter run); over its longest such run (it started at the run's first
step) its median slowdown is >= 1 + :data:`MIN_SLOW` and stands out of the workers'
ordinary spread: (it - the median worker's over the same steps) / the robust standard
deviation of the workers' median slowdowns over the whole run or over those steps,
the larger (1.4826 x MAD, at least :data:`MIN_MAD`) >= :data:`MIN_Z` (the trace diagnosis's bounds,
:mod:`traceviz.analysis.diagnose.stragglers`).
**Transient**: slowdown >= 1 + 2 x :data:`MIN_SLOW` with a z-score >= :data:`MIN_Z` in
single steps (named, not a straggler).

**Uneven data**: per step, DP rank and micro-batch, the share of compute its
micro-batch took (every stage's forward and backward of it against their typical, a
persistent slow worker's at its peers' speed); uneven when the shares vary across a
step's micro-batches by a coefficient of variation >= :data:`DATA_CV` and the forward's
and backward's shares agree (correlation >= :data:`DATA_CORR`: sequence lengths slow
both, noise does not). Balanced, each micro-batch's compute becomes its step's mean
share: its own share's deviation from that mean is first shrunk to the part of the
shares' variance the forward and backward have in common (their covariance: the data's;
the rest is the ops' own noise, which balancing does not remove).

**Slow DP group**: a data-parallel op whose transfers in one group (a stage and TP rank)
take >= :data:`SLOW_GROUP` x the median over the op's groups (the median over steps).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnose.stages import StageBalance
from ..diagnose.stragglers import SLOWDOWN_MIN, SPREAD_FLOOR, Z_MIN
from .cells import MAX_CELLS, Cells
from .model import TimelineModel, medians
from .ops import DP

# the trace diagnosis's bounds of the ordinary spread (one definition for both inputs)
MIN_SLOW, MIN_Z, MIN_MAD = SLOWDOWN_MIN - 1.0, Z_MIN, SPREAD_FLOOR
PERSIST = 3
DATA_CV, DATA_CORR = 0.03, 0.5
SLOW_GROUP = 1.5


@dataclass
class WorkerSeries:
    """[worker, step] compute time / typical (``speed``) and slowdown against the
    step's median worker, with its robust z-score; NaN where a worker has no compute in
    a step."""

    speed: np.ndarray
    slowdown: np.ndarray
    z: np.ndarray


@dataclass
class SlowWorker:
    worker: int
    ranks: list[int]
    stage: int
    dp: int
    slowdown: float
    z: float
    since_index: int      # the step's place in the run
    since_step: int
    slow_steps: int
    persistent: bool
    until_index: int = 0  # a persistent one: slow up to this place (exclusive)
    until_step: int = 0   # the last slow step


@dataclass
class DataImbalance:
    """Per [step index, DP rank, micro-batch] the micro-batch's compute share (NaN:
    none), the mean coefficient of variation within steps, the forward / backward
    agreement and how alike consecutive steps' patterns are (correlation)."""

    share: np.ndarray
    cv: float
    agreement: float
    step_to_step: float
    shrink: float = 1.0   # the part of the shares' spread that is the data's, not noise

    @property
    def uneven(self) -> bool:
        return self.cv >= DATA_CV and self.agreement >= DATA_CORR

    def factors(self) -> np.ndarray:
        """Per cell its compute's factor when balanced: the step's mean share / its own
        (its deviation from the mean shrunk to the data's part of the spread)."""
        mean = np.nanmean(self.share, axis=(1, 2), keepdims=True)
        own = mean + self.shrink * (self.share - mean)
        return np.where(np.isfinite(own) & (own > 0), mean / own, 1.0)


@dataclass
class SlowGroup:
    op: int
    name: str
    stage: int
    tp: int
    ratio: float          # its median transfer / the op's groups' median
    median_ns: float


def worker_series(model: TimelineModel, cells: Cells) -> WorkerSeries:
    nw, ns = model.workers, len(model.steps)
    spent, typical = cells.worker_step()
    speed = np.divide(spent, typical, out=np.full((nw, ns), np.nan), where=typical > 0)
    dp = model.timeline.dp[model.first_rank]
    rel = speed
    if model.pp >= 3:  # against the median stage of its pipeline in each step
        order = np.argsort(dp, kind="stable")
        cut = np.flatnonzero(np.r_[True, dp[order][1:] != dp[order][:-1], True])
        pipe = np.empty_like(speed)
        with np.errstate(all="ignore"):
            for a, b in zip(cut[:-1], cut[1:]):
                mine = order[a:b]
                pipe[mine] = np.nanmedian(speed[mine], axis=0)
            rel = speed / pipe
    with np.errstate(all="ignore"):
        med = np.nanmedian(rel, axis=0)
        slowdown = rel / med
        mad = np.maximum(1.4826 * np.nanmedian(np.abs(slowdown - 1.0), axis=0), MIN_MAD)
        z = (slowdown - 1.0) / mad
    return WorkerSeries(speed, slowdown, z)


def slow_workers(model: TimelineModel, s: WorkerSeries) -> list[SlowWorker]:
    """Every worker slow (see the module doc), persistent first, the slowest first;
    none among fewer than three workers (no spread to judge by)."""
    if model.workers < 3:
        return []
    ns = len(model.steps)
    need = min(PERSIST, ns)
    smooth = _rolling_median(s.slowdown)
    with np.errstate(invalid="ignore"):
        above = smooth >= 1 + MIN_SLOW
    with np.errstate(all="ignore"):  # the workers' ordinary spread, over the whole run
        whole = np.nanmedian(s.slowdown, axis=1)
        spread = max(1.4826 * float(np.nanmedian(np.abs(whole - np.nanmedian(whole)))),
                     MIN_MAD)
    out = []
    for w in np.flatnonzero(above.any(axis=1)):
        start, length = _longest_run(above[w])
        if length < need:
            continue
        span = slice(start, start + length)
        with np.errstate(all="ignore"):
            level = np.nanmedian(s.slowdown[:, span], axis=1)
            # over a short run the levels spread wider than over the whole one
            here = 1.4826 * float(np.nanmedian(np.abs(level - np.nanmedian(level))))
        z = (level[w] - float(np.nanmedian(level))) / max(spread, here)
        if level[w] < 1 + MIN_SLOW or z < MIN_Z:
            continue
        out.append(_slow(model, int(w), float(level[w]), float(z), start, length, True))
        out[-1].until_index = start + length
        out[-1].until_step = int(model.steps[start + length - 1])
    persistent = {x.worker for x in out}
    with np.errstate(invalid="ignore"):
        spikes = (s.slowdown >= 1 + 2 * MIN_SLOW) & (s.z >= MIN_Z)
    for w in np.flatnonzero(spikes.any(axis=1)):
        if int(w) in persistent:
            continue
        steps = np.flatnonzero(spikes[w])
        out.append(_slow(model, int(w), float(np.nanmax(s.slowdown[w, steps])),
                         float(np.nanmax(s.z[w, steps])), int(steps[0]), len(steps), False))
    out.sort(key=lambda x: (not x.persistent, -x.slowdown))
    return out


def _slow(model: TimelineModel, w: int, slowdown: float, z: float, since: int, steps: int,
          persistent: bool) -> SlowWorker:
    t = model.timeline
    first = int(model.first_rank[w])
    return SlowWorker(w, model.worker_ranks(w), int(t.stage[first]), int(t.dp[first]),
                      slowdown, z, since, int(model.steps[since]), steps, persistent)


def _rolling_median(x: np.ndarray) -> np.ndarray:
    """Each step's value as the median of it and its two neighbours (one at the ends)."""
    if x.shape[1] < 3:
        return x
    padded = np.concatenate([x[:, :1], x, x[:, -1:]], axis=1)
    with np.errstate(all="ignore"):
        return np.nanmedian(np.stack([padded[:, :-2], padded[:, 1:-1], padded[:, 2:]]),
                            axis=0)


def _longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True (the last such run on a tie)."""
    best, best_at, run, at = 0, 0, 0, 0
    for i, f in enumerate(flags):
        if f:
            at = i if run == 0 else at
            run += 1
            if run >= best:
                best, best_at = run, at
        else:
            run = 0
    return best_at, best


def data_imbalance(model: TimelineModel, cells: Cells, slow: list[SlowWorker]
                   ) -> DataImbalance | None:
    """The micro-batches' compute shares (see the module doc); None without
    micro-batches."""
    if not cells.by_microbatch or cells.microbatches == 0:
        return None
    m = cells.microbatches
    t = model.timeline
    dp = t.dp[model.first_rank].astype(np.int64)
    ndp = int(dp.max()) + 1
    ns = len(model.steps)
    if ns * ndp * m > MAX_CELLS:  # DP ranks far apart (a part of a job): not looked at
        return None
    # a persistent slow worker's compute at its peers' speed
    fix = np.ones((ns, model.workers))
    for x in slow:
        if x.persistent:
            fix[x.since_index:x.until_index, x.worker] = 1.0 / x.slowdown

    def share(excl: np.ndarray, typ: np.ndarray) -> np.ndarray:
        """[step, DP rank, micro-batch] compute / its typical, over the pipeline's
        workers."""
        e = np.zeros((ndp, ns, m))
        ty = np.zeros((ndp, ns, m))
        np.add.at(e, dp, (excl[:, :, :m] * fix[:, :, None]).transpose(1, 0, 2))
        np.add.at(ty, dp, typ[:, :, :m].transpose(1, 0, 2))
        e, ty = e.transpose(1, 0, 2), ty.transpose(1, 0, 2)
        return np.divide(e, ty, out=np.full(e.shape, np.nan), where=ty > 0)

    f = share(cells.excl_fwd, cells.typ_fwd)
    b = share(cells.excl_bwd, cells.typ_bwd)
    every = share(cells.excl_fwd + cells.excl_bwd, cells.typ_fwd + cells.typ_bwd)
    if not np.isfinite(every).any():
        return None
    with np.errstate(all="ignore"):
        mean = np.nanmean(every, axis=(1, 2))
        cv = float(np.nanmean(np.nanstd(every, axis=(1, 2)) / mean))
        fc = f - np.nanmean(f, axis=(1, 2), keepdims=True)
        bc = b - np.nanmean(b, axis=(1, 2), keepdims=True)
        ok = np.isfinite(fc) & np.isfinite(bc)
        agreement = float(np.corrcoef(fc[ok], bc[ok])[0, 1]) if ok.sum() > 2 else 0.0
        # the data's variance is what the forward and backward shares have in common
        # (their noise is independent): the cells' spread shrunk to it
        ec_all = (every - np.nanmean(every, axis=(1, 2), keepdims=True))[ok]
        total = float(np.mean(ec_all ** 2)) if ok.sum() > 2 else 0.0
        common = float(np.mean(fc[ok] * bc[ok])) if ok.sum() > 2 else 0.0
        shrink = min(max(common / total, 0.0), 1.0) if total > 0 else 1.0
        ec = (every - mean[:, None, None]).reshape(ns, -1)
        pairs = [(ec[i], ec[i + 1]) for i in range(ns - 1)]
        alike = [np.corrcoef(a[np.isfinite(a) & np.isfinite(c)],
                             c[np.isfinite(a) & np.isfinite(c)])[0, 1]
                 for a, c in pairs if (np.isfinite(a) & np.isfinite(c)).sum() > 2]
    return DataImbalance(every, cv if np.isfinite(cv) else 0.0,
                         agreement if np.isfinite(agreement) else 0.0,
                         float(np.nanmean(alike)) if np.isfinite(alike).any() else float("nan"),
                         shrink if np.isfinite(shrink) else 1.0)


def stage_balance(model: TimelineModel, cells: Cells, num_layers: int | None
                  ) -> StageBalance | None:
    """Each stage's compute per micro-batch (the median over its workers and steps of a
    worker's compute in a step / its micro-batches) and, with ``num_layers``, the split
    of :func:`~traceviz.analysis.diagnose.stages.best_split`; None with one stage."""
    pp = model.pp
    if pp < 2:
        return None
    t = model.timeline
    stage = t.stage[model.first_rank]
    if len(np.unique(stage)) != pp:  # some stages' ranks are not in the timeline
        return None
    spent, _ = cells.worker_step()
    typ = cells.typ_fwd + cells.typ_bwd
    count = ((typ[:, :, :cells.microbatches] > 0).sum(axis=2).T if cells.by_microbatch
             and cells.microbatches else np.ones(spent.shape))
    count = np.where(count == 0, 1, count)  # compute without micro-batches: one
    per = np.where(spent > 0, spent / count, np.nan)
    with np.errstate(all="ignore"):
        compute = [float(np.nanmedian(per[stage == s])) for s in range(pp)]
    if not all(np.isfinite(compute)):
        return None
    layers: list[int | None] = [num_layers // pp] * pp if num_layers else [None] * pp
    if num_layers and num_layers % pp:
        layers = [None] * pp
    lay_ns = None
    if num_layers and all(n is not None for n in layers):
        middle = compute[1:-1] or [min(compute)]
        lay_ns = float(np.median(middle)) / (num_layers // pp)
    extra = [c - n * lay_ns if n is not None and lay_ns is not None else None
             for c, n in zip(compute, layers)]
    ranks = {s: [int(r) for r in t.ranks[t.stage == s]] for s in range(pp)}
    return StageBalance(compute, layers, lay_ns, extra,
                        "--num-layers" if num_layers else "unknown", ranks,
                        model.layout.chunks)


def slow_dp_groups(model: TimelineModel, op: np.ndarray, stage: np.ndarray,
                   tp: np.ndarray, transfer: np.ndarray) -> list[SlowGroup]:
    """The slow DP groups (see the module doc) from every DP call's (op, stage, TP rank,
    transfer ns)."""
    t = model.timeline
    out = []
    for o in np.unique(op):
        if t.classes[o] != DP:
            continue
        m = op == o
        key = stage[m].astype(np.int64) * (1 << 12) + tp[m]  # tp < 2^12
        per_group = medians(key, transfer[m].astype(np.float64))
        if len(per_group.keys) < 2:
            continue
        med = per_group.values
        ref = float(np.median(med))
        for g in np.flatnonzero(med >= SLOW_GROUP * ref) if ref > 0 else []:
            k = int(per_group.keys[g])
            out.append(SlowGroup(int(o), t.names[o], k >> 12, k & 0xFFF,
                                 float(med[g] / ref), float(med[g])))
    return out
