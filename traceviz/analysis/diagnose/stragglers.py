"""Stragglers: ranks whose GPU runs the same work slower than their peers'.

**Peers** are the ranks doing the same work: the ranks of one pipeline stage (tensor-,
context-, expert- and data-parallel partners run the same layers; stages from the job's
pipeline groups, else the parse's classification). Where no stage is known, or a rank
is alone on its stage, the ranks that launch the same compute kernels the same number
of times in each micro-batch (stages of equal layers). A rank without peers (work no
other rank runs) is compared with nobody: its slowdown is null and it is never called a straggler (ranks of
different stages run different layers; their times say nothing of their GPUs).

**Same kernels.** Compute kernels are summed per *unit*: (iteration, phase, micro-batch,
chunk, kernel name), or (iteration, kernel name) where the trace has no micro-batches
(kernels outside every micro-batch, such as the optimizer's, are left out then). A unit
is compared where at least half of the peers (and two ranks) have it: the rank's time
against the peers' median.

**Test.** A unit's *peers' time* is the median of the other peers' times for it (the
rank left out: with two peers, the other's). ``slowdown`` = the rank's time / its
peers' time, over all its compared units; the one-sided sign test across its units
gives ``p_value``: the chance of at least that many slower units if the rank were no
slower than its peers. GPUs of one model differ by a percent or two, so a rank is
judged against the *spread* of every compared rank's slowdown in the job: ``z_score`` =
(slowdown - their median) / their robust standard deviation (1.4826 x the median
absolute deviation, at least :data:`SPREAD_FLOOR`). A rank is a **straggler** when it
stands out of that spread (``z_score`` >= :data:`Z_MIN`), is slower by a margin worth a
GPU's replacement (``slowdown`` >= :data:`SLOWDOWN_MIN`) and consistently so
(``p_value`` <= :data:`P_MAX`); a rank without peers has nothing to compare with (null).

**Cost.** ``excess_ns``: the rank's compute time beyond its peers' median per iteration.
``cost_ns``: the time the job loses to it per iteration: where the ranks' CPU tables
give the job's graph, the re-timed saving of running it at its peers' speed (the
advice's ``straggler:R=fix``, :mod:`.advice`); else estimated from the iterations'
chains of waits (:mod:`.diagnosis`): the rank's compute time on the chain x (1 -
1 / slowdown), what the chain would be shorter if the rank ran at its peers' speed (0 when
no chain runs through it: the job does not wait for it). ``waited_on_ns``: the exposed
time other ranks spent per iteration waiting for it in collectives (the ledger).
Stragglers are sorted by ``cost_ns``, the worst first.

Node and local GPU: node = rank // GPUs per node (the devices the trace lists: ranks
numbered node by node, as torchrun does), local GPU = the device the kernels ran on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...table.arrays import unique_rows
from ...table.schema import COMP
from ..activities import RankActivities

P_MAX = 0.01
SLOWDOWN_MIN = 1.05
Z_MIN = 4.5           # robust z-score beyond which a slowdown is not the ordinary spread
SPREAD_FLOOR = 0.005  # least robust standard deviation of the slowdowns (identical GPUs)
# what "no straggler" means, in words
NONE_FOUND = (f"no rank's slowdown against its peers on the same kernels stands out of "
              f"the ranks' spread (robust z-score >= {Z_MIN}, at least {SLOWDOWN_MIN}x, "
              f"slower in most kernels)")
# why no rank is compared (every class of peers has one rank)
NO_PEERS = ("no two ranks do the same work here (one rank per pipeline stage in the job, "
            "and no other rank launches the same kernels); ranks of different stages run "
            "different layers, so their times say nothing of their GPUs")
SCHEMA = pa.schema([
    ("rank", pa.int32()), ("node", pa.int32()), ("local_gpu", pa.int32()),
    ("stage", pa.int32()), ("peers", pa.int32()), ("slowdown", pa.float64()),
    ("z_score", pa.float64()),
    ("units", pa.int32()), ("units_slower", pa.int32()), ("p_value", pa.float64()),
    ("excess_ns", pa.int64()), ("cost_ns", pa.int64()), ("waited_on_ns", pa.int64()),
    ("straggler", pa.bool_())])


@dataclass(frozen=True)
class Straggler:
    """One rank against its peers (a row of :data:`SCHEMA`): ``slowdown`` its compute
    time over its peers' median on the same kernels, ``z_score`` that slowdown against
    every rank's (robust), ``excess_ns`` its extra compute per iteration, ``cost_ns``
    the re-timed saving of fixing it (None: not re-timed), ``waited_on_ns`` what others
    wait for it; node / local_gpu / stage None where unknown."""

    rank: int
    node: int | None
    local_gpu: int | None
    stage: int | None
    peers: int
    slowdown: float
    z_score: float | None
    units: int
    units_slower: int
    p_value: float
    excess_ns: int
    cost_ns: int | None
    waited_on_ns: int
    straggler: bool


@dataclass
class PeerSpeed:
    """Every rank's speed against its peers (one row per rank, :data:`SCHEMA`)."""

    table: pa.Table

    def with_costs(self, costs: dict[int, int]) -> PeerSpeed:
        """The table with ``cost_ns`` of the ranks in ``costs`` replaced (a re-timed
        saving, more exact than the chain's estimate)."""
        ranks = self.table["rank"].to_pylist()
        cost = [costs.get(r, c) for r, c in zip(ranks, self.table["cost_ns"].to_pylist())]
        at = self.table.schema.get_field_index("cost_ns")
        return PeerSpeed(self.table.set_column(at, "cost_ns", pa.array(cost, pa.int64())))

    def stragglers(self) -> pa.Table:
        """The stragglers, the worst (largest ``cost_ns``, then ``excess_ns``) first."""
        t = self.table.filter(self.table["straggler"])
        order = np.lexsort((-t["excess_ns"].to_numpy(), -t["cost_ns"].to_numpy()))
        return t.take(order)


def sign_test(slower: int, units: int) -> float:
    """One-sided sign test: P(X >= slower) for X ~ Binomial(units, 1/2)."""
    if units <= 0:
        return 1.0
    logs = [math.lgamma(units + 1) - math.lgamma(k + 1) - math.lgamma(units - k + 1)
            for k in range(slower, units + 1)]
    if not logs:
        return 0.0
    top = max(logs)
    return min(1.0, math.exp(top - units * math.log(2)) * sum(math.exp(x - top)
                                                               for x in logs))


def _cells(acts: RankActivities) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(cell keys [n, 5]: iteration, phase, micro-batch, chunk (-1 without
    micro-batches), name id; summed ns per cell; kernels per cell; the names) of one
    rank's compute kernels."""
    comp = acts.kind == COMP
    mb = acts.microbatch[comp]
    has_mb = (mb >= 0).any()
    none = np.full(mb.size, -1, np.int64)
    keys = np.stack([acts.iteration[comp], acts.phase[comp] if has_mb else none,
                     mb if has_mb else none, acts.chunk[comp] if has_mb else none,
                     acts.name[comp]], axis=1).astype(np.int64)
    if has_mb:  # kernels outside every micro-batch (optimizer, ...) are not compared
        inside = mb >= 0
        keys = keys[inside]
        dur = (acts.end - acts.ts)[comp][inside]
    else:
        dur = (acts.end - acts.ts)[comp]
    if not keys.size:
        return (np.zeros((0, 5), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                acts.names)
    uniq, inv = unique_rows(keys)
    return (uniq, np.bincount(inv, weights=dur).astype(np.int64), np.bincount(inv),
            acts.names)


def peer_speed(ranks: list[RankActivities], stage: dict[int, int],
               waited_on: dict[int, int], on_chain: dict[int, int]) -> PeerSpeed:
    """Every rank's speed against its peers (see the module doc). ``stage``: pipeline
    stage per rank (absent: one class of every rank); ``waited_on``: exposed ns per
    iteration other ranks waited for each rank; ``on_chain``: each rank's compute time
    per iteration on the chains of waits (ns)."""
    names: dict[str, int] = {}
    cells: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    work: dict[int, int] = {}
    for a in ranks:
        keys, ns, count, nm = _cells(a)
        glob = np.array([names.setdefault(x, len(names)) for x in nm] + [-1], np.int64)
        keys = keys.copy()
        keys[:, 4] = glob[keys[:, 4]]
        cells[a.rank] = (keys, ns)
        work[a.rank] = hash((keys.tobytes(), count.tobytes()))
    classes: dict[tuple, list[int]] = {}
    for a in ranks:  # no stage known: the ranks that run the same kernels
        key = ("stage", stage[a.rank]) if a.rank in stage else ("work", work[a.rank])
        classes.setdefault(key, []).append(a.rank)
    # a rank alone on its stage: the ranks of other stages that run the same kernels the
    # same number of times (stages of equal layers) are its peers
    for key in [k for k, m in classes.items() if k[0] == "stage" and len(m) == 1]:
        (r,) = classes.pop(key)
        classes.setdefault(("work", work[r]), []).append(r)
    rows = [row for members in classes.values() for row in _compare(members, cells, stage)]
    _z_scores(rows)
    by_rank = {a.rank: a for a in ranks}
    out: dict[str, list] = {f.name: [] for f in SCHEMA}
    for row in rows:
        a = by_rank[row["rank"]]
        gpn = len(a.meta.get("device_properties") or [])
        dev = a.device[a.device >= 0]
        row["node"] = row["rank"] // gpn if gpn else None
        row["local_gpu"] = int(np.bincount(dev).argmax()) if dev.size else None
        row["waited_on_ns"] = int(waited_on.get(row["rank"], 0))
        slow = row["slowdown"]
        row["cost_ns"] = (int(round(on_chain.get(row["rank"], 0) * (1 - 1 / slow)))
                          if slow is not None and slow > 1 else
                          (0 if slow is not None else None))
        for f in SCHEMA:
            out[f.name].append(row[f.name])
    return PeerSpeed(pa.table(out, schema=SCHEMA))


def spread(slowdowns: np.ndarray) -> tuple[float, float]:
    """(median, robust standard deviation) of the compared ranks' slowdowns: 1.4826 x
    their median absolute deviation, at least :data:`SPREAD_FLOOR`."""
    center = float(np.median(slowdowns))
    mad = float(np.median(np.abs(slowdowns - center)))
    return center, max(1.4826 * mad, SPREAD_FLOOR)


def _z_scores(rows: list[dict]) -> None:
    """Each compared row's ``z_score`` against every compared rank's slowdown, and its
    ``straggler`` flag (see the module doc)."""
    compared = np.array([r["slowdown"] for r in rows if r["slowdown"] is not None])
    center, sigma = spread(compared) if compared.size else (1.0, SPREAD_FLOOR)
    for r in rows:
        if r["slowdown"] is None:
            r["z_score"], r["straggler"] = None, False
            continue
        r["z_score"] = (r["slowdown"] - center) / sigma
        r["straggler"] = bool(r["z_score"] >= Z_MIN and r["slowdown"] >= SLOWDOWN_MIN
                              and r["p_value"] <= P_MAX)


def leave_one_out_median(m: np.ndarray) -> np.ndarray:
    """Per entry of ``m`` [members, cells] (NaN: the member lacks the cell), the median
    of the other members' values of its cell (NaN where no other member has it)."""
    n_rows = m.shape[0]
    order = np.argsort(m, axis=0, kind="stable")  # NaNs last
    srt = np.take_along_axis(m, order, axis=0)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n_rows)[:, None].repeat(m.shape[1], 1), axis=0)
    others = (~np.isnan(m)).sum(axis=0)[None, :] - 1  # values left without the entry
    others = np.broadcast_to(others, m.shape)

    def at(k: np.ndarray) -> np.ndarray:  # the k-th of the others, in sorted order
        k = np.clip(k, 0, n_rows - 1)
        idx = np.clip(np.where(k < pos, k, k + 1), 0, n_rows - 1)
        return np.take_along_axis(srt, idx, axis=0)

    lo, hi = at((others - 1) // 2), at(others // 2)
    out = np.where(others % 2 == 1, lo, (lo + hi) / 2)
    return np.where((others >= 1) & ~np.isnan(m), out, np.nan)


def _compare(members: list[int], cells: dict[int, tuple[np.ndarray, np.ndarray]],
             stage: dict[int, int]) -> list[dict]:
    """The rows of one class of peers (``stage``: each rank's, where known), without
    their ``z_score`` / ``straggler`` (job-wide, :func:`_z_scores`)."""
    keys = [cells[r][0] for r in members]
    every = np.concatenate(keys) if keys else np.zeros((0, 5), np.int64)
    uniq, inv = unique_rows(every)
    m = np.full((len(members), uniq.shape[0]), np.nan)
    at = 0
    for i, r in enumerate(members):
        n = keys[i].shape[0]
        m[i, inv[at:at + n]] = cells[r][1]
        at += n
    need = max(2, (len(members) + 1) // 2)
    shared = (~np.isnan(m)).sum(axis=0) >= need
    m = m[:, shared]
    iterations = np.unique(uniq[shared, 0]).size
    peers = leave_one_out_median(m) if len(members) >= 2 else np.full_like(m, np.nan)
    mine = ~np.isnan(m) & ~np.isnan(peers)
    own = np.where(mine, m, 0.0).sum(axis=1)
    med = np.where(mine, peers, 0.0).sum(axis=1)
    units = mine.sum(axis=1)
    slower = (mine & (np.nan_to_num(m) > np.nan_to_num(peers))).sum(axis=1)
    rows = []
    for i, r in enumerate(members):
        comparable = len(members) >= 2 and units[i] > 0 and med[i] > 0
        rows.append({
            "rank": r, "stage": stage.get(r), "peers": len(members) - 1,
            "slowdown": float(own[i] / med[i]) if comparable else None,
            "units": int(units[i]), "units_slower": int(slower[i]),
            "p_value": sign_test(int(slower[i]), int(units[i])) if comparable else None,
            "excess_ns": int(round((own[i] - med[i]) / max(iterations, 1))) if comparable
            else None})
    return rows
