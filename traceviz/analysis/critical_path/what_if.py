"""What-ifs: the job re-timed with one thing changed, and the iteration time it predicts.

Two models, each for what it can answer:

* **Re-timed graph** (:mod:`.job`): own times of chosen edges multiplied, every point
  re-timed, the iteration = the span of the joined points. Specs:
  ``COMM[:GROUP]=F``, ``COMP=F`` (``compute``), ``MEM=F``, ``cpu=F``, ``launch=F``,
  ``kernel:GLOB=F``, ``kernel@R:GLOB=F`` (those kernels on rank R), ``rank:N=F`` (every own time on rank N), ``stage:S=F`` (the
  compute of the ranks on pipeline stage S), ``stagecomm:S=F`` (their transfers that
  move with a stage's layers: TP, CP, EP, ETP, DP, EDP), ``link:GROUP:R1,R2,...=F``
  (the transfers of that parallel group between the listed ranks: a slow group's, or
  a rank pair's), ``link:GROUP@R=F`` (those of the GROUP calls rank R is a member of:
  its whole group, however large);
  ``straggler=fix``: every straggler's compute at its peers' speed (its compute own
  times x 1 / slowdown, :mod:`..diagnose.stragglers`); ``straggler:R=fix`` rank R's;
  ``overlap=GROUP`` (``DP``, ``TP``, ``EP``, ...): that group's communication hidden
  behind compute entirely, as Megatron's overlap options aim for (its own times x 0: an
  upper bound of what overlapping saves).
  A selection by rank (``rank:``, ``kernel@R``, ``stagecomm:``, ``link:``) takes a
  transfer from its source's rank; a large call joined through a hub (9 members or more,
  :mod:`.job`) counts as every member's, so it is taken only where every member is.
* **Pipeline re-simulation** (:func:`..pipeline.resimulated`): ``microbatches=N`` and
  ``vpp=N`` change the schedule itself; Megatron's order is simulated with each stage's
  median step times and P2P hand-off, now and changed, and the iteration changes by the
  difference of the two simulated makespans (the group with the longest one).

Times are int64 ns.
"""
from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import TraceVizError, UsageError
from ...table.schema import GROUPS
from ..pipeline import PipelineView, resimulated
from .job import (
    CATEGORIES,
    COMM0,
    COMPUTE,
    CPU,
    LAUNCH_CAT,
    MEMORY,
    WAIT,
    JobGraph,
    Timing,
    iteration_span,
    path,
    path_times,
    retime,
)

_SCALE = re.compile(r"^\s*(?P<what>[^=]+?)\s*=\s*(?P<factor>[0-9.eE+-]+)\s*$")
_NAMED = re.compile(r"^\s*(?P<what>straggler(?::(?P<rank>\d+))?|overlap|microbatches|vpp)"
                    r"\s*=\s*(?P<value>\S+)\s*$", re.IGNORECASE)
PIPELINE_SPECS = ("microbatches", "vpp")
# the parallel groups whose traffic a stage's layers carry (moves with them)
LAYER_GROUPS = ("TP", "CP", "EP", "ETP", "DP", "EDP")


@dataclass
class Context:
    """What the what-ifs re-time: the joined graph and its measured timing, the
    stragglers' slowdown by rank, the pipeline groups' views; ``adjust_ns``: the
    iteration's span less the graph's (:func:`~.paths.iteration_adjust`: the step's
    CPU ahead of its GPU left out, its GPU work the graph does not join added), the
    same measured and re-timed."""

    jg: JobGraph
    measured: Timing
    stragglers: dict[int, float] = field(default_factory=dict)
    pipelines: list[PipelineView] = field(default_factory=list)
    stages: dict[int, int] = field(default_factory=dict)  # rank -> its pipeline stage
    adjust_ns: int = 0

    def iteration_ns(self, t: Timing) -> int:
        """The iteration under timing ``t`` (ns): its joined points' span, adjusted."""
        first, last = iteration_span(self.jg, t)
        return last - first + self.adjust_ns

    @property
    def baseline_ns(self) -> int:
        return self.iteration_ns(self.measured)


@dataclass
class Outcome:
    """One what-if's predicted iteration."""

    what_if: str
    iteration_ns: int
    baseline_ns: int
    model: str          # "re-timed graph" | "pipeline re-simulation"
    path_ranks: list[int]
    # what holds the predicted iteration: the category (job.CATEGORIES) taking most of
    # the re-timed critical path, and its share of the path (%); None: not re-timed
    bound: str | None = None
    bound_pct: float | None = None

    @property
    def change_pct(self) -> float | None:
        return (100.0 * (self.iteration_ns - self.baseline_ns) / self.baseline_ns
                if self.baseline_ns else None)


def is_pipeline(spec: str) -> bool:
    """Whether ``spec`` changes the pipeline schedule (re-simulated, not re-timed)."""
    m = _NAMED.match(spec)
    return m is not None and m["what"].lower() in PIPELINE_SPECS


def evaluate(ctx: Context, specs: list[str]) -> Outcome:
    """The iteration ``specs`` predict together (scaling specs only) or alone (a
    pipeline spec). The graph's own times are changed while it runs and put back:
    one what-if at a time on a graph."""
    label = " + ".join(specs)
    base = ctx.baseline_ns
    if len(specs) == 1 and is_pipeline(specs[0]):
        return Outcome(label, base + _pipeline_change(ctx, specs[0]), base,
                       "pipeline re-simulation", [])
    if any(is_pipeline(s) for s in specs):
        raise UsageError(f"--what-if {label!r}: microbatches / vpp change the schedule and "
                         "are predicted alone")
    scale = scale_of(ctx, specs)
    # the scaled edges' own times changed in place and put back after (a job's millions
    # of edges are not copied for each what-if)
    own = ctx.jg.own
    at = np.flatnonzero(scale != 1.0)
    measured = own[at]
    try:
        own[at] = np.round(measured * scale[at])
        del scale  # not held while the job is re-timed
        t = retime(ctx.jg, ctx.measured, own)
        g = ctx.jg.graph
        edges = path(ctx.jg, t)
        ranks = sorted(set(g.node_rank[g.dst[edges]].tolist()))
        bound, pct = _bound(ctx.jg, t, edges, own)
        iteration = ctx.iteration_ns(t)
    finally:
        own[at] = measured
    return Outcome(label, iteration, base, "re-timed graph", ranks, bound, pct)


def _bound(jg: JobGraph, t: Timing, edges: np.ndarray, own: np.ndarray
           ) -> tuple[str | None, float | None]:
    """(the category taking most of the critical path ``edges``, its share %): own times
    by the edge's category, waits apart (:func:`.job.path_times`)."""
    mine, wait = path_times(jg, t, edges, own)
    total = int(mine.sum() + wait.sum())
    if not total:
        return None, None
    parts = np.bincount(jg.category[edges].astype(np.int64), weights=mine,
                        minlength=len(CATEGORIES))
    parts[WAIT] += float(wait.sum())
    top = int(np.argmax(parts))
    return CATEGORIES[top], 100.0 * float(parts[top]) / total


def _pipeline_change(ctx: Context, spec: str) -> int:
    """How much a pipeline spec changes the iteration (ns): the longest simulated
    makespan of the job's pipeline groups, changed minus now."""
    m = _NAMED.match(spec)
    if m is None:
        raise UsageError(f"--what-if {spec!r}: expected WHAT=VALUE")
    try:
        value = int(m["value"])
    except ValueError:
        raise UsageError(f"--what-if {spec!r}: expected a whole number, e.g. "
                         f"{m['what'].lower()}=16") from None
    if value < 1:
        raise UsageError(f"--what-if {spec!r}: must be >= 1")
    if not ctx.pipelines:
        raise TraceVizError(f"--what-if {spec!r}: no pipeline group with every stage's "
                            "micro-batch steps (needs the job's layout and micro-batches)")
    key = m["what"].lower()
    try:
        sims = [resimulated(v, **{key: value}) for v in ctx.pipelines]
    except TraceVizError as exc:
        raise UsageError(f"--what-if {spec!r}: {exc}") from None
    return max(new for _, new in sims) - max(now for now, _ in sims)


def scale_of(ctx: Context, specs: list[str]) -> np.ndarray:
    """Per edge, the factor its own time is multiplied by (see the module doc)."""
    jg = ctx.jg
    scale = np.ones(jg.graph.src.size)
    for spec in specs:
        named = _NAMED.match(spec)
        if named and named["what"].lower().startswith("straggler"):
            if named["value"].lower() != "fix":
                raise UsageError(f"--what-if {spec!r}: expected straggler=fix or "
                                 "straggler:RANK=fix")
            which = ({int(named["rank"]): ctx.stragglers.get(int(named["rank"]))}
                     if named["rank"] else ctx.stragglers)
            if None in which.values():
                raise UsageError(f"--what-if {spec!r}: rank {named['rank']} is not a "
                                 "straggler (see stragglers.csv of 'traceviz diagnose')")
            comp = np.flatnonzero(jg.category == COMPUTE)  # each rank's own compute
            src_rank = jg.graph.node_rank[jg.graph.src[comp]]
            for rank, slowdown in which.items():
                scale[comp[src_rank == rank]] /= slowdown
            continue
        if named and named["what"].lower() == "overlap":
            sel = _selection(jg, f"comm:{named['value']}")
            if sel is None:
                raise UsageError(f"--what-if {spec!r}: unknown group; use one of "
                                 f"{', '.join(GROUPS)}")
            scale[sel] = 0.0
            continue
        m = _SCALE.match(spec)
        if not m:
            raise UsageError(f"--what-if {spec!r}: expected WHAT=FACTOR (e.g. COMM:TP=0.5), "
                             "straggler=fix, overlap=GROUP, microbatches=N or vpp=N")
        factor = float(m["factor"])
        if not 0 <= factor < math.inf:  # 1e999 reads as inf: no time to re-time with
            raise UsageError(f"--what-if {spec!r}: the factor must be a number >= 0")
        sel = _selection(jg, m["what"], ctx.stages)
        if sel is None:
            raise UsageError(f"--what-if {spec!r}: unknown target {m['what']!r}; use "
                             "COMM[:GROUP], COMP, MEM, cpu, launch, kernel:GLOB, "
                             "kernel@R:GLOB, rank:N, "
                             "stage:S, stagecomm:S, link:GROUP:R1,R2,..., link:GROUP@R, "
                             "straggler=fix, overlap=GROUP, microbatches=N or vpp=N")
        scale[sel] *= factor
    return scale


def _selection(jg: JobGraph, what: str, stages: dict[int, int] | None = None
               ) -> np.ndarray | None:
    """The edges a scaling target names (None: no such target); ``stages``: each rank's
    pipeline stage (``stage:S``)."""
    cat = jg.category
    low = what.lower().strip()
    if low in ("comm", "communication"):
        return cat >= COMM0
    if low.startswith("comm:"):
        grp = what.split(":", 1)[1].strip().upper()
        return cat == COMM0 + GROUPS.index(grp) if grp in GROUPS else None
    simple = {"comp": COMPUTE, "compute": COMPUTE, "mem": MEMORY, "memory": MEMORY,
              "cpu": CPU, "launch": LAUNCH_CAT}
    if low in simple:
        return cat == simple[low]
    if low.startswith(("kernel:", "kernel@")):
        head, _, pat = what.partition(":")
        hit = np.array([fnmatch.fnmatchcase(t, pat.strip()) for t in jg.names] + [False])
        on = hit[jg.edge_name]
        if head.strip().lower() == "kernel":
            return on
        of = head.partition("@")[2].strip()
        if not of.isdigit():
            return None
        return on & _from_ranks(jg, lambda r: r == int(of))
    if low.startswith("rank:"):
        try:
            r = int(what.split(":", 1)[1])
        except ValueError:
            return None
        return _from_ranks(jg, lambda x: x == r)
    if low.startswith(("stage:", "stagecomm:")):
        try:
            st = int(what.split(":", 1)[1])
        except ValueError:
            return None
        if not stages or st not in stages.values():
            raise UsageError(f"--what-if {what!r}: no rank is known to run stage {st} "
                             "(needs the job's ordered pipeline stages)")
        ranks = np.array([r for r, s in stages.items() if s == st], np.int64)
        # the stage's compute, or the traffic its layers carry (edge ids of those only)
        among = np.flatnonzero(cat == COMPUTE if low.startswith("stage:") else
                               np.isin(cat, [COMM0 + GROUPS.index(g) for g in LAYER_GROUPS]))
        return _mask(cat.size, among, _from_ranks(jg, lambda r: np.isin(r, ranks), among))
    if low.startswith("link:"):
        g = jg.graph
        bits = what.split(":")
        at = len(bits) == 2 and "@" in bits[1]  # link:GROUP@R: the GROUP group of rank R
        if not at and len(bits) != 3:
            return None
        grp, _, of = bits[1].partition("@") if at else (bits[1], "", "")
        grp = grp.strip().upper()
        if grp not in GROUPS or (at and not of.strip().isdigit()):
            return None
        among = np.flatnonzero(cat == COMM0 + GROUPS.index(grp))  # the group's transfers
        if at:
            src, dst = g.node_rank[g.src[among]], g.node_rank[g.dst[among]]
            r = int(of)
            # a large call's members are joined through its hub: those of r's hubs too
            hubs = g.dst[among[(src == r) & (g.dst[among] >= jg.node_base[-1])]]
            members = np.union1d(np.union1d(dst[src == r], src[dst == r]),
                                 np.union1d(dst[np.isin(g.src[among], hubs)], [r]))
        else:
            try:
                members = np.array([int(x) for x in bits[2].split(",")], np.int64)
            except ValueError:
                return None
        if not members.size:
            return None
        # the group's transfers between members (edge ids of the group's only: a job's
        # millions of edges are not each looked at twice)
        return _mask(cat.size, among, _from_ranks(jg, lambda r: np.isin(r, members), among)
                     & np.isin(g.node_rank[g.dst[among]], members))
    return None


def _mask(n: int, among: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Per edge of ``n``, whether it is one of the edge ids ``among`` where ``chosen``."""
    out = np.zeros(n, bool)
    out[among[chosen]] = True
    return out


def _from_ranks(jg: JobGraph, chosen: Callable[[np.ndarray], np.ndarray],
                among: np.ndarray | None = None) -> np.ndarray:
    """Per edge (of ``among``: edge ids, default every edge), whether it comes from a
    chosen rank (``chosen``: ranks -> bool): its source's rank is; an edge out of a
    large call's hub (:func:`.job._collective_edges`) stands for the pairwise edges from
    every member of the call, so only where every member is chosen (a selection of some
    of its members leaves the call's transfers to the others as measured; their own
    kernels' spans go with their ranks). Whether every member is chosen is read from
    every edge into the hub, of ``among`` or not (its members may state different
    groups)."""
    g = jg.graph
    src = g.src if among is None else g.src[among]
    out = chosen(g.node_rank[src])
    n_rank = int(jg.node_base[-1])
    if g.n_nodes > n_rank:
        into = np.flatnonzero(g.dst >= n_rank)
        every = np.ones(g.n_nodes - n_rank, bool)
        np.logical_and.at(every, g.dst[into] - n_rank, chosen(g.node_rank[g.src[into]]))
        hub = np.flatnonzero(src >= n_rank)
        out[hub] = every[src[hub] - n_rank]
    return out
