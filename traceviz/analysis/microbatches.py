"""Per-rank micro-batch metrics and category spans of a whole job (Megatron-TraceViz's
aggregation), with clock-synchronized times.

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

from ..intervals import grouped_measure, grouped_span
from ..table.schema import BWD, COMM, COMP, FWD, MEM, OPTIMIZER, RECOMPUTE, group
from .activities import RankActivities
from .overlap import comm_comp

CATEGORIES = ("optimizer_computation", "optimizer_communication", "dp_communication",
              "pp_communication", "fwd_computation", "fwd_communication",
              "bwd_computation", "bwd_communication", "bwd_computation_recompute",
              "bwd_communication_recompute", "memory", "other")
COLUMNS = ("ts", "dur", "kind", "phase", "microbatch", "chunk", "comm_group", "iteration")


def categorize(acts: RankActivities) -> np.ndarray:
    """Index into :data:`CATEGORIES` per activity (see the module doc)."""
    kind, phase, grp = acts.kind, acts.phase, acts.group
    comp, comm = kind == COMP, kind == COMM
    out = np.full(kind.shape[0], CATEGORIES.index("other"), dtype=np.int64)
    for ph, name in ((FWD, "fwd"), (BWD, "bwd"), (RECOMPUTE, "bwd"), (OPTIMIZER, "optimizer")):
        suffix = "_recompute" if ph == RECOMPUTE else ""
        on = phase == ph
        out[on & comp] = CATEGORIES.index(f"{name}_computation{suffix}")
        out[on & comm] = CATEGORIES.index(f"{name}_communication{suffix}")
    out[comm & (grp == group("PP"))] = CATEGORIES.index("pp_communication")
    out[comm & np.isin(grp, (group("DP"), group("EDP")))] = CATEGORIES.index("dp_communication")
    out[kind == MEM] = CATEGORIES.index("memory")
    return out


@dataclass
class RankCategories:
    """One rank's activities by Megatron-TraceViz category (what its timelines draw)."""

    rank: int
    ts: np.ndarray          # ns, on the clock the activities were read on
    end: np.ndarray
    category: np.ndarray    # index into CATEGORIES
    iteration: np.ndarray


def categorized(acts: RankActivities) -> RankCategories:
    """The categories of one rank's activities (see :func:`categorize`)."""
    return RankCategories(acts.rank, acts.ts, acts.end, categorize(acts), acts.iteration)


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
        category = categorize(ra)
        forward = ra.phase == FWD
        backward = (ra.phase == BWD) | (ra.phase == RECOMPUTE)
        sel = np.flatnonzero((forward | backward) & (ra.microbatch >= 0)
                             & ((ra.kind == COMP) | (ra.kind == COMM))
                             & ~np.isin(category, pp_dp))
        if not sel.size:
            continue
        keys = np.stack([ra.iteration[sel], backward[sel].astype(np.int64),
                         ra.microbatch[sel], ra.chunk[sel]], axis=1)
        uniq, grp = np.unique(keys, axis=0, return_inverse=True)
        grp = grp.ravel()
        n = uniq.shape[0]
        ts, end = ra.ts[sel], ra.end[sel]
        cc = comm_comp(ts, end, ra.kind[sel], grp, n)
        rc = np.isin(category[sel], recompute)
        rc_times = grouped_measure(ts[rc], end[rc], grp[rc], n)
        lo, hi = grouped_span(ts, end, grp, n)
        wall = hi - lo
        out["rank"] += [ra.rank] * n
        out["iteration"] += uniq[:, 0].tolist()
        out["phase"] += ["Backward" if b else "Forward" for b in uniq[:, 1].tolist()]
        out["microbatch"] += uniq[:, 2].tolist()
        out["chunk"] += uniq[:, 3].tolist()
        out["start_ns"] += lo.tolist()
        out["wall_clock_ns"] += wall.tolist()
        out["comp_ns"] += cc.comp.tolist()
        out["comm_ns"] += cc.comm.tolist()
        out["overlap_ns"] += cc.overlap.tolist()
        out["comp_only_ns"] += cc.comp_only.tolist()
        out["comm_only_ns"] += cc.comm_only.tolist()
        out["idle_ns"] += (wall - cc.busy).tolist()
        out["recompute_ns"] += rc_times.tolist()
    return pa.table({k: pa.array(v, pa.string() if k == "phase" else
                                 pa.int32() if k == "rank" else pa.int64())
                     for k, v in out.items()})


def category_spans(ranks: list[RankCategories]) -> pa.Table:
    """One row per (rank, iteration, category): first start, last end (synced ns), union
    length, number of kernels and summed durations."""
    out: dict[str, list] = {k: [] for k in ("rank", "iteration", "category", "start_ns",
                                            "end_ns", "busy_ns", "kernels", "sum_dur_ns")}
    for ra in ranks:
        keys = np.stack([ra.iteration, ra.category], axis=1)
        if not keys.shape[0]:
            continue
        uniq, grp = np.unique(keys, axis=0, return_inverse=True)
        grp = grp.ravel()
        n = uniq.shape[0]
        busy = grouped_measure(ra.ts, ra.end, grp, n)
        lo, hi = grouped_span(ra.ts, ra.end, grp, n)
        out["rank"] += [ra.rank] * n
        out["iteration"] += uniq[:, 0].tolist()
        out["category"] += [CATEGORIES[c] for c in uniq[:, 1].tolist()]
        out["start_ns"] += lo.tolist()
        out["end_ns"] += hi.tolist()
        out["busy_ns"] += busy.tolist()
        out["kernels"] += np.bincount(grp, minlength=n).tolist()
        out["sum_dur_ns"] += np.bincount(grp, weights=ra.end - ra.ts,
                                         minlength=n).astype(np.int64).tolist()
    return pa.table({k: pa.array(v, pa.string() if k == "category" else
                                 pa.int32() if k == "rank" else pa.int64())
                     for k, v in out.items()})
