"""Each rank's time in each step, in parts that add up to the step: the time its timed
ops cover by class (compute, data loading, optimizer, other; a communication op's
transfer by group, and its wait for its last peer; one left alone, without peers that
line up, is other), the untimed gaps between them
(``untimed``: CPU work and whatever no timer covers) and ``idle`` after its last op
until the step's last rank ends. Where timers overlap, the time is counted once (the
earlier op's). ``step_ns`` = the latest end of any rank - the step's start (the
earliest start)."""
from __future__ import annotations

import numba as nb
import numpy as np
import pyarrow as pa

from .ops import COMMUNICATION, COMPUTE, DATA, DP, EMB, OPT, OTHER, P2P, PPG, TP
from .simulate import Simulated
from .whatif import StepView

PARTS = ("compute", "data", "optimizer", "other", "transfer_pp", "transfer_dp",
         "transfer_tp", "transfer_embedding", "wait", "untimed", "idle")
_PART_OF_CLASS = np.full(10, PARTS.index("other"), dtype=np.int64)
for _c, _p in ((COMPUTE, "compute"), (DATA, "data"), (OPT, "optimizer"), (OTHER, "other"),
               (P2P, "transfer_pp"), (DP, "transfer_dp"), (TP, "transfer_tp"),
               (EMB, "transfer_embedding"), (PPG, "transfer_embedding")):
    _PART_OF_CLASS[_c] = PARTS.index(_p)

SCHEMA = pa.schema([("rank", pa.int32()), ("step", pa.int32()), ("step_ns", pa.int64())]
                   + [(f"{p}_ns", pa.int64()) for p in PARTS])


def ledger_table(ranks: np.ndarray, step: int, step_ns: int, parts: np.ndarray
                 ) -> pa.Table:
    """One step's ledger rows (:data:`SCHEMA`): each of ``ranks``' ``parts`` [rank,
    part] (ns) in a step of ``step_ns``."""
    n = len(ranks)
    cols = [pa.array(ranks, pa.int32()), pa.array(np.full(n, step), pa.int32()),
            pa.array(np.full(n, step_ns), pa.int64())]
    cols += [pa.array(parts[:, k], pa.int64()) for k in range(len(PARTS))]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def step_ledger(v: StepView, sim: Simulated) -> tuple[np.ndarray, np.ndarray]:
    """(rank indexes, [rank, part] ns) of one step, from its re-simulated (or measured)
    starts and ends."""
    # a communication op left alone (no peers in the timeline, or none lining up) is
    # timed work of its own: other, not a transfer
    part = np.where(np.isin(v.cls, COMMUNICATION) & (v.g.group < 0), PARTS.index("other"),
                    _PART_OF_CLASS[v.cls])
    ranks, parts = _ledger(v.rank.astype(np.int64), sim.start, sim.end, part,
                           v.g.transfer, (v.g.group >= 0), v.g.t0,
                           v.g.t0 + sim.step_ns, len(PARTS), PARTS.index("wait"),
                           PARTS.index("untimed"), PARTS.index("idle"))
    return ranks, parts


@nb.njit(cache=True)
def _ledger(rank, start, end, part, transfer, comm, t0, t_end, nparts, wait, untimed,
            idle):  # pragma: no cover (compiled)
    n = len(rank)
    nr = 0
    for i in range(n):
        if i == 0 or rank[i] != rank[i - 1]:
            nr += 1
    ranks = np.empty(nr, dtype=np.int64)
    out = np.zeros((nr, nparts), dtype=np.int64)
    r = -1
    covered = t0
    for i in range(n):
        if i == 0 or rank[i] != rank[i - 1]:
            if r >= 0:
                out[r, idle] += t_end - covered
            r += 1
            ranks[r] = rank[i]
            covered = t0
        if start[i] > covered:
            out[r, untimed] += start[i] - covered
            covered = start[i]
        if end[i] > covered:
            seen = end[i] - covered
            if comm[i]:
                t = min(seen, transfer[i])
                out[r, part[i]] += t
                out[r, wait] += seen - t
            else:
                out[r, part[i]] += seen
            covered = end[i]
    if r >= 0:
        out[r, idle] += t_end - covered
    return ranks, out
