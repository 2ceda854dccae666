"""Per-rank micro-batch metrics and category spans of a whole job (Megatron-TraceViz's
aggregation), with clock-synchronized times.

Every activity gets a Megatron-TraceViz category: ``pp_communication`` /
``dp_communication`` (communication in a PP / DP group, any phase), else by phase and
kind ``fwd_computation``, ``fwd_communication``, ``bwd_computation``,
``bwd_communication``, ``bwd_computation_recompute``, ``bwd_communication_recompute``,
``optimizer_computation``, ``optimizer_communication``, else ``other``; memory kernels
count as ``memory``; where a communication kernel's wait / transfer split is known, its
wait is ``pp_wait`` (pipeline group: the bubble) or ``comm_wait`` (any other group).

Per rank, iteration, step (Forward; Backward = the backward and the recompute of its
forward) and micro-batch (and model chunk), the step's **window** holds every GPU
activity the step launched (its compute, its memory copies and its communication in every
group: the TP / CP / EP collectives of its layers, the DP reduce-scatters that backward
hooks launch inside the last backward, ...) except its pipeline P2P hand-offs (sends /
receives on the PP group, which the schedule issues between steps and which wait for the
neighbouring stage; reported as ``p2p_ns``):

* ``start_ns`` / ``wall_clock_ns``: first start and last end - first start of the window;
* ``comp_ns`` = |U(COMP)|, ``comm_ns`` = |U(COMM)|, ``mem_ns`` = |U(MEM)|, ``overlap_ns``
  = |U(COMP) ∩ U(COMM)|, ``comp_only_ns`` / ``comm_only_ns`` the rest of each,
  ``idle_ns`` = wall - |U(all of the window)|;
* per parallel group G: ``comm_G_ns`` = |U(COMM of G)| and ``overlap_G_ns`` =
  |U(COMM of G) ∩ U(COMP)| (communication of G hidden behind the step's compute);
* ``recompute_ns`` = |U(what the recomputed forward launched)| (phase RECOMPUTE), split
  into ``recompute_comp_ns`` and ``recompute_comm_ns``;
* ``p2p_ns`` = |U(the step's pipeline P2P kernels)|;
* ``comm_transfer_ns`` / ``comm_wait_ns``: the window's communication split into moving
  data and waiting for each call's last member (:mod:`.diagnose.waits`, transfer first
  where they overlap; they add up to ``comm_ns``), ``p2p_wait_ns`` the P2P hand-offs'
  waiting (the bubble before the step); null where the split is unknown (one rank
  alone, a call's members missing).

Megatron-TraceViz's own micro-batch numbers leave DP and PP communication out; its comm is
``comm_tp_ns`` + ``comm_cp_ns`` + ``comm_ep_ns`` + ``comm_etp_ns`` when the groups do not
overlap in time. Per category: first start, last end, union length, kernels, summed
durations. All times int64 ns; ``start_ns`` is on the synced clock (the rank's ts minus
its offset).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..intervals import grouped_measure, grouped_span
from ..table.arrays import unique_rows
from ..table.schema import (
    BWD,
    COMM,
    COMP,
    FWD,
    GROUPS,
    MEM,
    OPTIMIZER,
    RECOMPUTE,
    collective,
    group,
)
from .activities import RankActivities
from .diagnose.ledger import Pipelines
from .diagnose.waits import comm_split
from .overlap import comm_comp

CATEGORIES = ("optimizer_computation", "optimizer_communication", "dp_communication",
              "pp_communication", "fwd_computation", "fwd_communication",
              "bwd_computation", "bwd_communication", "bwd_computation_recompute",
              "bwd_communication_recompute", "memory", "other", "pp_wait", "comm_wait")
COLUMNS = ("ts", "dur", "kind", "phase", "microbatch", "chunk", "comm_group", "collective",
           "iteration")


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


def categorized(acts: RankActivities, pipelines: Pipelines | None = None
                ) -> RankCategories:
    """The categories of one rank's activities (see :func:`categorize`); where their
    communication split is known, a kernel's wait for the last member of its call is an
    interval of its own: ``pp_wait`` when it waits on a pipeline peer (a pipeline-group
    kernel, or a member on another stage, of any pipeline: the ledger's bubble),
    ``comm_wait`` otherwise; the kernel keeps its category for its transfer."""
    cat = categorize(acts)
    if acts.wait_end is None:
        return RankCategories(acts.rank, acts.ts, acts.end, cat, acts.iteration)
    waits = np.flatnonzero(acts.wait_end > acts.ts)
    pipe = cat[waits] == CATEGORIES.index("pp_communication")
    if pipelines is not None and acts.waited_for is not None:
        pipe |= pipelines.other_stage(acts.rank, acts.waited_for[waits])
    ts = acts.ts.copy()
    ts[waits] = acts.wait_end[waits]
    return RankCategories(
        acts.rank, np.concatenate([ts, acts.ts[waits]]),
        np.concatenate([acts.end, acts.wait_end[waits]]),
        np.concatenate([cat, np.where(pipe, CATEGORIES.index("pp_wait"),
                                      CATEGORIES.index("comm_wait"))]),
        np.concatenate([acts.iteration, acts.iteration[waits]]))


GROUP_COLUMNS = tuple(f"comm_{g.lower()}_ns" for g in GROUPS) + tuple(
    f"overlap_{g.lower()}_ns" for g in GROUPS)
MICROBATCH_COLUMNS = (
    "rank", "iteration", "phase", "microbatch", "chunk", "start_ns", "wall_clock_ns",
    "comp_ns", "comm_ns", "comm_transfer_ns", "comm_wait_ns", "mem_ns", "overlap_ns",
    "comp_only_ns", "comm_only_ns", "idle_ns", "recompute_ns", "recompute_comp_ns",
    "recompute_comm_ns", "p2p_ns", "p2p_wait_ns") + GROUP_COLUMNS
NULLABLE = ("comm_transfer_ns", "comm_wait_ns", "p2p_wait_ns")  # -1: the split is unknown
# one row per rank, iteration, phase, micro-batch and chunk: times in ns (README,
# "step window"); the wait / transfer split null where unknown
MICROBATCH_SCHEMA = pa.schema([(k, pa.string() if k == "phase" else
                                pa.int32() if k == "rank" else pa.int64())
                               for k in MICROBATCH_COLUMNS])
# one row per rank, iteration and Megatron-TraceViz category
SPANS_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("iteration", pa.int64()), ("category", pa.string()),
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("busy_ns", pa.int64()),
    ("kernels", pa.int64()), ("sum_dur_ns", pa.int64())])


def is_p2p(acts: RankActivities) -> np.ndarray:
    """Pipeline send / receive kernels (SendRecv on the PP group): the schedule issues
    them between steps, and they wait for the neighbouring stage."""
    return (acts.kind == COMM) & (acts.group == group("PP")) & (
        acts.collective == collective("SendRecv"))


def microbatch_table(ranks: list[RankActivities]) -> pa.Table:
    """One row per (rank, iteration, step, micro-batch, chunk); see the module doc."""
    out: dict[str, list] = {k: [] for k in MICROBATCH_COLUMNS}
    for ra in ranks:
        forward = ra.phase == FWD
        backward = (ra.phase == BWD) | (ra.phase == RECOMPUTE)
        step = (forward | backward) & (ra.microbatch >= 0)
        p2p = is_p2p(ra)
        sel = np.flatnonzero(step)
        if not sel.size:
            continue
        keys = np.stack([ra.iteration[sel], backward[sel].astype(np.int64),
                         ra.microbatch[sel], ra.chunk[sel]], axis=1)
        uniq, grp = unique_rows(keys)
        n = uniq.shape[0]
        own = ~p2p[sel]  # the window: every activity of the step but its P2P hand-offs
        w = sel[own]
        ts, end, kind, g = ra.ts[w], ra.end[w], ra.kind[w], grp[own]
        cc = comm_comp(ts, end, kind, g, n)
        lo, hi = grouped_span(ts, end, g, n)
        wall = np.where(hi >= lo, hi - lo, 0)
        mem = kind == MEM
        rc = ra.phase[w] == RECOMPUTE
        cols = {
            "start_ns": np.where(hi >= lo, lo, -1), "wall_clock_ns": wall,
            "comp_ns": cc.comp, "comm_ns": cc.comm,
            "mem_ns": grouped_measure(ts[mem], end[mem], g[mem], n),
            "overlap_ns": cc.overlap, "comp_only_ns": cc.comp_only,
            "comm_only_ns": cc.comm_only,
            "idle_ns": wall - grouped_measure(ts, end, g, n),
            "recompute_ns": grouped_measure(ts[rc], end[rc], g[rc], n),
            "recompute_comp_ns": grouped_measure(ts[rc & (kind == COMP)],
                                                 end[rc & (kind == COMP)], g[rc & (kind == COMP)],
                                                 n),
            "recompute_comm_ns": grouped_measure(ts[rc & (kind == COMM)],
                                                 end[rc & (kind == COMM)], g[rc & (kind == COMM)],
                                                 n),
            "p2p_ns": grouped_measure(ra.ts[sel][~own], ra.end[sel][~own], grp[~own], n)}
        keys = np.zeros(len(ra), np.int64)
        keys[sel] = grp
        in_window = np.zeros(len(ra), bool)
        in_window[w] = True
        split = comm_split(ra, keys, n, in_window)
        cols["comm_transfer_ns"], cols["comm_wait_ns"] = split[:, 0], split[:, 1]
        hand_off = np.zeros(len(ra), bool)
        hand_off[sel[~own]] = True
        cols["p2p_wait_ns"] = comm_split(ra, keys, n, hand_off)[:, 1]
        comp, comm_group = kind == COMP, np.where(kind == COMM, ra.group[w], -1)
        for code, name in enumerate(GROUPS):
            comm_col, overlap_col = f"comm_{name.lower()}_ns", f"overlap_{name.lower()}_ns"
            if not (comm_group == code).any():
                cols[comm_col] = cols[overlap_col] = np.zeros(n, dtype=np.int64)
                continue
            mine = comp | (comm_group == code)
            by = comm_comp(ts[mine], end[mine], kind[mine], g[mine], n)
            cols[comm_col], cols[overlap_col] = by.comm, by.overlap
        out["rank"] += [ra.rank] * n
        out["iteration"] += uniq[:, 0].tolist()
        out["phase"] += ["Backward" if b else "Forward" for b in uniq[:, 1].tolist()]
        out["microbatch"] += uniq[:, 2].tolist()
        out["chunk"] += uniq[:, 3].tolist()
        for k, v in cols.items():
            out[k] += v.tolist()
    return pa.table([pa.array(out[f.name], f.type, mask=np.array(out[f.name]) < 0
                              if f.name in NULLABLE else None) for f in MICROBATCH_SCHEMA],
                    schema=MICROBATCH_SCHEMA)


def category_spans(ranks: list[RankCategories]) -> pa.Table:
    """One row per (rank, iteration, category): first start, last end (synced ns), union
    length, number of kernels and summed durations."""
    out: dict[str, list] = {k: [] for k in ("rank", "iteration", "category", "start_ns",
                                            "end_ns", "busy_ns", "kernels", "sum_dur_ns")}
    for ra in ranks:
        keys = np.stack([ra.iteration, ra.category], axis=1)
        if not keys.shape[0]:
            continue
        uniq, grp = unique_rows(keys)
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
    return pa.table([pa.array(out[f.name], f.type) for f in SPANS_SCHEMA],
                    schema=SPANS_SCHEMA)
