"""Stragglers: ranks whose GPU runs the same work slower than their peers'.

**Peers** are the ranks doing the same work: the ranks of one pipeline stage (tensor-,
context-, expert- and data-parallel partners run the same layers; stages from the job's
pipeline groups, else the parse's classification). Where no stage is known, the ranks
that launch the same compute kernels the same number of times in each micro-batch. A
rank without peers (one rank per stage in the job, or work no other rank runs) is
compared with nobody: its slowdown is null and it is never called a straggler (ranks of
different stages run different layers; their times say nothing of their GPUs).

**Same kernels.** Compute kernels are summed per *unit*: (iteration, phase, micro-batch,
chunk, kernel name), or (iteration, kernel name) where the trace has no micro-batches
(kernels outside every micro-batch, such as the optimizer's, are left out then). A unit
is compared where at least half of the peers (and two ranks) have it: the rank's time
against the peers' median.

**Test.** Across its units (kernels of every micro-batch and iteration), the one-sided
sign test gives ``p_value``: the chance of at least that many slower units if the rank
were no slower than its peers. ``slowdown`` = the rank's time / the peers' median time
over all its compared units. A rank is a **straggler** when ``p_value`` <= 0.01 and
``slowdown`` >= 1.05 (GPUs of one model differ by a few percent); a rank without peers
has nothing to compare with (null).

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

from ...table.schema import COMP
from ..activities import RankActivities

P_MAX = 0.01
SLOWDOWN_MIN = 1.05
# why no rank is compared (every class of peers has one rank)
NO_PEERS = ("no two ranks do the same work here (one rank per pipeline stage in the job, "
            "and no other rank launches the same kernels); ranks of different stages run "
            "different layers, so their times say nothing of their GPUs")
SCHEMA = pa.schema([
    ("rank", pa.int32()), ("node", pa.int32()), ("local_gpu", pa.int32()),
    ("stage", pa.int32()), ("peers", pa.int32()), ("slowdown", pa.float64()),
    ("units", pa.int32()), ("units_slower", pa.int32()), ("p_value", pa.float64()),
    ("excess_ns", pa.int64()), ("cost_ns", pa.int64()), ("waited_on_ns", pa.int64()),
    ("straggler", pa.bool_())])


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
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    return (uniq, np.bincount(inv.ravel(), weights=dur).astype(np.int64),
            np.bincount(inv.ravel()), acts.names)


def peer_speed(ranks: list[RankActivities], stage: dict[int, int],
               waited_on: dict[int, int], on_chain: dict[int, int]) -> PeerSpeed:
    """Every rank's speed against its peers (see the module doc). ``stage``: pipeline
    stage per rank (absent: one class of every rank); ``waited_on``: exposed ns per
    iteration other ranks waited for each rank; ``on_chain``: each rank's compute time
    per iteration on the chains of waits (ns)."""
    cells = {a.rank: _cells(a) for a in ranks}
    names: dict[str, int] = {}
    keyed: dict[int, dict[tuple, int]] = {}
    work: dict[int, int] = {}
    for r, (keys, ns, count, nm) in cells.items():
        glob = np.array([names.setdefault(x, len(names)) for x in nm] + [-1], np.int64)
        keys = keys.copy()
        keys[:, 4] = glob[keys[:, 4]]
        keyed[r] = dict(zip(map(tuple, keys.tolist()), ns.tolist()))
        work[r] = hash(tuple(zip(map(tuple, keys.tolist()), count.tolist())))
    rows = []
    classes: dict[tuple, list[int]] = {}
    for a in ranks:  # no stage known: the ranks that run the same kernels
        key = ("stage", stage[a.rank]) if a.rank in stage else ("work", work[a.rank])
        classes.setdefault(key, []).append(a.rank)
    for members in classes.values():
        rows += _compare(members, keyed, stage)
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


def _compare(members: list[int], keyed: dict[int, dict[tuple, int]],
             stage: dict[int, int]) -> list[dict]:
    """The rows of one class of peers (``stage``: each rank's, where known)."""
    counts: dict[tuple, int] = {}
    for r in members:
        for cell in keyed[r]:
            counts[cell] = counts.get(cell, 0) + 1
    need = max(2, (len(members) + 1) // 2)
    shared = sorted(c for c, k in counts.items() if k >= need)
    median = {c: float(np.median([keyed[r][c] for r in members if c in keyed[r]]))
              for c in shared}
    iterations = {c[0] for c in shared}
    rows = []
    for r in members:
        mine = [c for c in shared if c in keyed[r]]
        units = len(mine)
        slower = sum(keyed[r][c] > median[c] for c in mine)
        own, med = sum(keyed[r][c] for c in mine), sum(median[c] for c in mine)
        comparable = len(members) >= 2 and units > 0 and med > 0
        slowdown = own / med if comparable else 0.0
        p = sign_test(slower, units) if comparable else 1.0
        rows.append({
            "rank": r, "stage": stage.get(r),
            "peers": len(members) - 1, "slowdown": slowdown if comparable else None,
            "units": units, "units_slower": slower, "p_value": p if comparable else None,
            "excess_ns": int(round((own - med) / max(len(iterations), 1))) if comparable
            else None,
            "straggler": bool(comparable and p <= P_MAX and slowdown >= SLOWDOWN_MIN)})
    return rows
