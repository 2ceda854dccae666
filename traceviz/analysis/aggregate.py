"""``traceviz aggregate``: per-rank micro-batch metrics and category spans of a whole job
(Megatron-TraceViz's aggregation), with clock-synchronized times.

Every activity gets a Megatron-TraceViz category: ``pp_communication`` /
``dp_communication`` (communication in a PP / DP group, any phase), else by phase and
kind ``fwd_computation``, ``fwd_communication``, ``bwd_computation``,
``bwd_communication``, ``bwd_computation_recompute``, ``bwd_communication_recompute``,
``optimizer_computation``, ``optimizer_communication``, else ``other``; memory kernels
count as ``memory``.

Per rank, iteration, phase (Forward; Backward = backward and recompute work) and
micro-batch (Megatron-TraceViz's definitions, its communication without PP / DP):
``wall_clock`` = last end - first start of its compute and communication kernels;
``comp`` = |U(compute)|; ``comm`` = |U(communication)|; ``overlap`` = |U(comp) ∩
U(comm)|; ``idle`` = wall - (comp + comm - overlap). Per category: first start, last
end, union length, kernels, summed durations. All times int64 ns; ``start_ns`` is on the
synced clock (the rank's ts minus its offset).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..classify.groups import GROUPS
from ..classify.kinds import KINDS
from ..classify.phases import PHASES
from ..intervals import grouped_combination_times, grouped_measure, grouped_span
from .clocks import ClockSync
from .select import index_in

CATEGORIES = ("optimizer_computation", "optimizer_communication", "dp_communication",
              "pp_communication", "fwd_computation", "fwd_communication",
              "bwd_computation", "bwd_communication", "bwd_computation_recompute",
              "bwd_communication_recompute", "memory", "other")
COLUMNS = ("ts", "dur", "kind", "phase", "microbatch", "chunk", "comm_group", "iteration")


@dataclass
class RankActivities:
    """One rank's activities as arrays; ``category`` indexes :data:`CATEGORIES`."""

    rank: int
    ts: np.ndarray          # synced ns
    end: np.ndarray
    category: np.ndarray
    kind: np.ndarray        # index into KINDS (COMP, COMM, MEM); -1 unknown
    phase: np.ndarray       # index into PHASES; -1 unknown
    microbatch: np.ndarray  # -1 unknown
    chunk: np.ndarray
    iteration: np.ndarray


def categorize(kind: np.ndarray, phase: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Index into :data:`CATEGORIES` per activity (see the module doc); ``kind``,
    ``phase`` and ``group`` are indexes into KINDS, PHASES and GROUPS."""
    comp, comm = kind == KINDS.index("COMP"), kind == KINDS.index("COMM")
    out = np.full(kind.shape[0], CATEGORIES.index("other"), dtype=np.int64)
    for ph, name in (("FWD", "fwd"), ("BWD", "bwd"), ("RECOMPUTE", "bwd"),
                     ("OPTIMIZER", "optimizer")):
        suffix = "_recompute" if ph == "RECOMPUTE" else ""
        on = phase == PHASES.index(ph)
        out[on & comp] = CATEGORIES.index(f"{name}_computation{suffix}")
        out[on & comm] = CATEGORIES.index(f"{name}_communication{suffix}")
    out[comm & (group == GROUPS.index("PP"))] = CATEGORIES.index("pp_communication")
    out[comm & np.isin(group, (GROUPS.index("DP"), GROUPS.index("EDP")))] = \
        CATEGORIES.index("dp_communication")
    out[kind == KINDS.index("MEM")] = CATEGORIES.index("memory")
    return out


def rank_activities(rank: int, table: pa.Table, sync: ClockSync | None) -> RankActivities:
    """Arrays of one rank's table, times on the synced clock when ``sync`` is given."""
    ts = table["ts"].to_numpy()
    end = ts + np.maximum(table["dur"].fill_null(0).to_numpy(), 0)
    offset = sync.offset_of(rank) if sync is not None else 0
    kind = index_in(table["kind"], KINDS)
    phase = index_in(table["phase"], PHASES)
    return RankActivities(
        rank=rank, ts=ts - offset, end=end - offset,
        category=categorize(kind, phase, index_in(table["comm_group"], GROUPS)),
        kind=kind, phase=phase,
        microbatch=table["microbatch"].fill_null(-1).to_numpy().astype(np.int64),
        chunk=table["chunk"].fill_null(-1).to_numpy().astype(np.int64),
        iteration=table["iteration"].fill_null(-1).to_numpy().astype(np.int64))


def microbatch_table(ranks: list[RankActivities]) -> pa.Table:
    """One row per (rank, iteration, phase, micro-batch, chunk); see the module doc."""
    out: dict[str, list] = {k: [] for k in (
        "rank", "iteration", "phase", "microbatch", "chunk", "start_ns", "wall_clock_ns",
        "comp_ns", "comm_ns", "overlap_ns", "comp_only_ns", "comm_only_ns", "idle_ns",
        "recompute_ns")}
    pp_dp = [CATEGORIES.index("pp_communication"), CATEGORIES.index("dp_communication")]
    recompute = [CATEGORIES.index("bwd_computation_recompute"),
                 CATEGORIES.index("bwd_communication_recompute")]
    for ra in ranks:
        forward = ra.phase == PHASES.index("FWD")
        backward = np.isin(ra.phase, (PHASES.index("BWD"), PHASES.index("RECOMPUTE")))
        sel = np.flatnonzero((forward | backward) & (ra.microbatch >= 0)
                             & np.isin(ra.kind, (0, 1)) & ~np.isin(ra.category, pp_dp))
        if not sel.size:
            continue
        keys = np.stack([ra.iteration[sel], backward[sel].astype(np.int64),
                         ra.microbatch[sel], ra.chunk[sel]], axis=1)
        uniq, group = np.unique(keys, axis=0, return_inverse=True)
        group = group.ravel()
        n = uniq.shape[0]
        ts, end = ra.ts[sel], ra.end[sel]
        times = grouped_combination_times(ts, end, ra.kind[sel], group, n, 2)  # COMP, COMM
        rc = np.isin(ra.category[sel], recompute)
        rc_times = grouped_measure(ts[rc], end[rc], group[rc], n)
        lo, hi = grouped_span(ts, end, group, n)
        comp = times[:, 1] + times[:, 3]
        comm = times[:, 2] + times[:, 3]
        both = times[:, 3]
        wall = hi - lo
        out["rank"] += [ra.rank] * n
        out["iteration"] += uniq[:, 0].tolist()
        out["phase"] += ["Backward" if b else "Forward" for b in uniq[:, 1].tolist()]
        out["microbatch"] += uniq[:, 2].tolist()
        out["chunk"] += uniq[:, 3].tolist()
        out["start_ns"] += lo.tolist()
        out["wall_clock_ns"] += wall.tolist()
        out["comp_ns"] += comp.tolist()
        out["comm_ns"] += comm.tolist()
        out["overlap_ns"] += both.tolist()
        out["comp_only_ns"] += (comp - both).tolist()
        out["comm_only_ns"] += (comm - both).tolist()
        out["idle_ns"] += (wall - (comp + comm - both)).tolist()
        out["recompute_ns"] += rc_times.tolist()
    return pa.table({k: pa.array(v, pa.string() if k == "phase" else
                                 pa.int32() if k == "rank" else pa.int64())
                     for k, v in out.items()})


def category_spans(ranks: list[RankActivities]) -> pa.Table:
    """One row per (rank, iteration, category): first start, last end (synced ns), union
    length, number of kernels and summed durations."""
    out: dict[str, list] = {k: [] for k in ("rank", "iteration", "category", "start_ns",
                                            "end_ns", "busy_ns", "kernels", "sum_dur_ns")}
    for ra in ranks:
        keys = np.stack([ra.iteration, ra.category], axis=1)
        if not keys.shape[0]:
            continue
        uniq, group = np.unique(keys, axis=0, return_inverse=True)
        group = group.ravel()
        n = uniq.shape[0]
        busy = grouped_measure(ra.ts, ra.end, group, n)
        lo, hi = grouped_span(ra.ts, ra.end, group, n)
        out["rank"] += [ra.rank] * n
        out["iteration"] += uniq[:, 0].tolist()
        out["category"] += [CATEGORIES[c] for c in uniq[:, 1].tolist()]
        out["start_ns"] += lo.tolist()
        out["end_ns"] += hi.tolist()
        out["busy_ns"] += busy.tolist()
        out["kernels"] += np.bincount(group, minlength=n).tolist()
        out["sum_dur_ns"] += np.bincount(group, weights=ra.end - ra.ts,
                                         minlength=n).astype(np.int64).tolist()
    return pa.table({k: pa.array(v, pa.string() if k == "category" else
                                 pa.int32() if k == "rank" else pa.int64())
                     for k, v in out.items()})
