"""Pipeline-parallel schedule, measured vs ideal (PP-Schedule-Visualization's view).

For one PP group and one iteration, each stage's forward and backward steps are the
micro-batch rows of :func:`.microbatches.microbatch_table` (first kernel start to last
kernel end of the step, clock-synced). Per stage:

* ``busy`` = |union of its steps|; ``makespan`` = last step end - first step start of
  the whole group; ``schedule_idle`` = makespan - busy; ``schedule_idle_pct`` = 100
  schedule_idle / makespan (what PP-Schedule-Visualization calls the bubble, over the
  group's F/B window only);
* the ideal schedule (:func:`..schedule.simulate`) with each stage's median forward and
  backward step and the smallest forward hand-off between consecutive stages measured as
  the P2P latency; ``ideal_schedule_idle_pct`` and the analytic ``(p-1)/(m·v+p-1)``;
* the critical stage is the one with the most busy time;
* ``outside_steps_pct`` = 100 (iteration - busy) / iteration over the stage's whole
  ProfilerStep where the GPU runs it (:mod:`.iterations`; or a timer dump's
  ``total-execution-time``), so the DP / optimizer tail after the last backward counts
  too;
* ``iteration_bubble_pct``: the bubble, as everywhere (README, "bubble"): the stage
  rank's share of its iteration the time ledger (:mod:`.diagnose.ledger`) calls pipeline
  bubble; null without a ledger (timer dumps);
* warm-up / steady / cool-down steps and the largest losses against the ideal rules
  (:mod:`.pipeline_phases`).

Times are int64 ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceVizError
from ..intervals import measure
from ..table.schema import COMM, COMP, OPTIMIZER, collective, group
from .activities import RankActivities
from .diagnose.diagnosis import Diagnosis
from .iterations import windows
from .microbatches import microbatch_table
from .pipeline_phases import largest_gaps, phases
from .schedule import Step, simulate

# one row per stage of a pipeline group (README, "bubble"): times in ns, shares in %;
# ideal and iteration numbers null where unknown
STAGES_SCHEMA = pa.schema([
    ("stage", pa.int64()), ("rank", pa.int64()), ("forward_steps", pa.int64()),
    ("backward_steps", pa.int64()), ("median_forward_ns", pa.int64()),
    ("median_backward_ns", pa.int64()), ("busy_ns", pa.int64()), ("makespan_ns", pa.int64()),
    ("schedule_idle_ns", pa.int64()), ("schedule_idle_pct", pa.float64()),
    ("ideal_makespan_ns", pa.int64()), ("ideal_schedule_idle_pct", pa.float64()),
    ("analytic_schedule_idle_pct", pa.float64()), ("critical", pa.bool_()),
    ("iteration_ns", pa.int64()), ("outside_steps_pct", pa.float64()),
    ("iteration_bubble_pct", pa.float64()),
    ("warmup_steps", pa.int64()), ("steady_pairs", pa.int64()),
    ("cooldown_steps", pa.int64())])


@dataclass
class PipelineView:
    """Measured and ideal steps of one PP group, and the per-stage table."""

    ranks: list[int]              # rank of each stage
    measured: list[Step]          # times relative to the group's first step
    ideal: list[Step]
    stages: pa.Table
    p2p_ns: int
    gaps: list[dict]
    origin: int                   # absolute time (ns) of the measured steps' 0
    vpp: int = 1
    microbatches: int = 0


def resimulated(view: PipelineView, microbatches: int | None = None,
                vpp: int | None = None) -> tuple[int, int]:
    """(ideal makespan now, ideal makespan with ``microbatches`` micro-batches and / or
    ``vpp`` model chunks per stage), ns: Megatron's schedule simulated with each stage's
    median step times (a stage's time per micro-batch split evenly over the new chunks)
    and the measured P2P hand-off (:func:`.schedule.simulate`)."""
    st = view.stages.to_pylist()
    fwd = np.array([s["median_forward_ns"] for s in st], np.float64)
    bwd = np.array([s["median_backward_ns"] for s in st], np.float64)
    pp, m, v = len(st), view.microbatches, view.vpp
    if not m:
        return 0, 0
    now = simulate(pp, m, fwd, bwd, view.p2p_ns, v)
    m2, v2 = microbatches or m, vpp or v
    new = simulate(pp, m2, fwd * v / v2, bwd * v / v2, view.p2p_ns, v2)
    return max(s.end for s in now), max(s.end for s in new)


def measured_steps(rows: list[dict], ranks: list[int]) -> tuple[list[Step], int]:
    """Steps of each stage (index into ``ranks``) from micro-batch rows, in ns from the
    earliest step of the group, and that earliest start."""
    stage_of = {r: i for i, r in enumerate(ranks)}
    steps = [Step(stage_of[r["rank"]], "F" if r["phase"] == "Forward" else "B",
                  r["microbatch"], max(r["chunk"], 0), r["start_ns"],
                  r["start_ns"] + r["wall_clock_ns"],
                  recompute=bool(r.get("recompute_ns") or 0),
                  exposed_dp=sum((r.get(f"comm_{g}_ns") or 0) - (r.get(f"overlap_{g}_ns") or 0)
                                 for g in ("dp", "edp")),
                  waited=r["comm_wait_ns"] if r.get("comm_wait_ns") is not None else -1)
             for r in rows if r["rank"] in stage_of]
    t0 = min((s.start for s in steps), default=0)
    for s in steps:
        s.start -= t0
        s.end -= t0
    return sorted(steps, key=lambda s: (s.stage, s.start)), t0


def _handoff(steps: list[Step], pp: int, vpp: int) -> int:
    """Smallest gap (ns, >= 0) between a forward step's end on virtual stage s and the
    same micro-batch's forward start on s + 1."""
    ends = {(s.microbatch, s.chunk * pp + s.stage): s for s in steps if s.phase == "F"}
    gaps = [nxt.start - cur.end for (mb, vs), cur in ends.items()
            if (nxt := ends.get((mb, vs + 1))) is not None]
    return max(min(gaps), 0) if gaps else 0


def pipeline_view(rows: list[dict], ranks: list[int], vpp: int = 1,
                  iteration_ns: dict[int, int] | None = None,
                  stragglers: list[dict] | None = None,
                  bubble_pct: dict[int, float] | None = None) -> PipelineView:
    """Measured vs ideal schedule of the PP group ``ranks`` (stage order);
    ``iteration_ns``: the length of each rank's whole iteration (ProfilerStep);
    ``bubble_pct``: each rank's bubble share of the iteration (the ledger's);
    ``stragglers``: the job's (:mod:`.diagnose.stragglers` rows), to name a slow stage's
    cause."""
    pp = len(ranks)
    steps, t0 = measured_steps(rows, ranks)
    mbs = len({s.microbatch for s in steps})
    fwd = np.array([np.median([s.end - s.start for s in steps if s.stage == p and
                               s.phase == "F"] or [0]) for p in range(pp)])
    bwd = np.array([np.median([s.end - s.start for s in steps if s.stage == p and
                               s.phase == "B"] or [0]) for p in range(pp)])
    p2p = _handoff(steps, pp, vpp)
    complete = all(sum(s.stage == p for s in steps) == 2 * mbs * vpp for p in range(pp))
    ideal = simulate(pp, mbs, fwd, bwd, p2p, vpp) if complete and mbs else []
    makespan = max((s.end for s in steps), default=0)
    ideal_span = max((s.end for s in ideal), default=0)
    cols: dict[str, list] = {k: [] for k in STAGES_SCHEMA.names}
    busy = []
    for p in range(pp):
        mine = [s for s in steps if s.stage == p]
        busy.append(measure(np.array([s.start for s in mine], np.int64),
                            np.array([s.end for s in mine], np.int64)))
    critical = int(np.argmax(busy)) if busy else -1
    for p in range(pp):
        ideal_busy = sum(s.end - s.start for s in ideal if s.stage == p)
        cols["stage"].append(p)
        cols["rank"].append(ranks[p])
        cols["forward_steps"].append(sum(s.stage == p and s.phase == "F" for s in steps))
        cols["backward_steps"].append(sum(s.stage == p and s.phase == "B" for s in steps))
        cols["median_forward_ns"].append(int(fwd[p]))
        cols["median_backward_ns"].append(int(bwd[p]))
        cols["busy_ns"].append(int(busy[p]))
        cols["makespan_ns"].append(int(makespan))
        cols["schedule_idle_ns"].append(int(makespan - busy[p]))
        cols["schedule_idle_pct"].append(100.0 * (makespan - busy[p]) / makespan if makespan
                                         else float("nan"))
        cols["ideal_makespan_ns"].append(int(ideal_span))
        cols["ideal_schedule_idle_pct"].append(100.0 * (ideal_span - ideal_busy) / ideal_span
                                               if ideal_span else float("nan"))
        cols["analytic_schedule_idle_pct"].append(100.0 * (pp - 1) / (mbs * vpp + pp - 1)
                                                  if mbs else float("nan"))
        cols["critical"].append(p == critical)
        it_ns = (iteration_ns or {}).get(ranks[p])
        cols["iteration_ns"].append(it_ns)
        cols["outside_steps_pct"].append(100.0 * (it_ns - busy[p]) / it_ns if it_ns
                                         else None)
        cols["iteration_bubble_pct"].append((bubble_pct or {}).get(ranks[p]))
        ph = phases([s for s in steps if s.stage == p])
        for k in ("warmup_steps", "steady_pairs", "cooldown_steps"):
            cols[k].append(ph[k])
    gaps = largest_gaps(steps, pp, vpp, p2p, fwd, bwd, ranks, stragglers=stragglers or [])
    return PipelineView(ranks, steps, ideal, pa.table(cols, schema=STAGES_SCHEMA), p2p, gaps,
                        t0, vpp, mbs)


def stage_marks(acts: RankActivities, iteration: int) -> list[tuple[str, int, int]]:
    """What is drawn over one stage's row for ProfilerStep ``iteration``: its pipeline
    P2P kernels ``("P2P", start, end)`` and its optimizer work's span
    ``("optimizer", first start, last end)``: the optimizer step after the micro-batches'
    last compute (the gradient buffers zeroed at the iteration's start are optimizer work
    too, but drawn they would cover the whole iteration); times as the activities have
    them."""
    in_it = acts.iteration == iteration
    p2p = np.flatnonzero(in_it & (acts.kind == COMM) & (acts.group == group("PP"))
                         & (acts.collective == collective("SendRecv")))
    marks = [("P2P", a, b) for a, b in zip(acts.ts[p2p].tolist(), acts.end[p2p].tolist())]
    opt = in_it & (acts.phase == OPTIMIZER)
    work = in_it & (acts.microbatch >= 0) & (acts.kind == COMP)
    if work.any() and (opt & (acts.ts >= acts.ts[work].max())).any():
        opt &= acts.ts >= acts.ts[work].max()
    if opt.any():
        marks.append(("optimizer", int(acts.ts[opt].min()), int(acts.end[opt].max())))
    return marks


def step_length(acts: RankActivities, iteration: int) -> int | None:
    """The length (ns) of ProfilerStep ``iteration``'s window on the GPU
    (:mod:`.iterations`) on one rank (None: the rank has no such step)."""
    win = windows(acts)
    at = np.flatnonzero((win.iteration == iteration) & (win.cpu_start >= 0))
    return int(win.end[at[0]] - win.start[at[0]]) if at.size else None


# the largest losses against the ideal schedule, per PP group (:mod:`.pipeline_phases`)
GAPS_SCHEMA = pa.schema([("pp_group", pa.int32()), ("kind", pa.string()),
                         ("ns", pa.int64()), ("stage", pa.int32()), ("what", pa.string())])


@dataclass
class GroupView:
    """One PP group's view: its index among the job's PP groups, its ranks (one per
    stage), the ProfilerStep it covers (None: a timer dump's) and what is drawn over its
    rows (rank, "P2P" / "optimizer", start, end; the activities' clock)."""

    index: int
    ranks: list[int]
    iteration: int | None
    view: PipelineView
    marks: list[tuple[int, str, int, int]]


@dataclass
class PipelineViews:
    """The views of the PP groups looked at, and what a reader must know."""

    groups: list[GroupView]
    notes: list[str]

    @property
    def stages(self) -> pa.Table:
        """Per PP group and stage (STAGES_SCHEMA + ``pp_group``)."""
        return pa.concat_tables([g.view.stages.append_column(
            "pp_group", pa.array([g.index] * g.view.stages.num_rows, pa.int32()))
            for g in self.groups])

    @property
    def gaps(self) -> pa.Table:
        """The largest losses against the ideal schedule (GAPS_SCHEMA)."""
        return pa.Table.from_pylist([{"pp_group": g.index, **gap} for g in self.groups
                                     for gap in g.view.gaps], schema=GAPS_SCHEMA)


def focus_group(groups: list[list[int]], ranks: list[int]) -> list[int] | None:
    """The PP group to show first: the one holding the first of ``ranks`` (the
    stragglers, worst first, then the ranks the chains of waits run through) that is in
    one; None when none is."""
    for r in ranks:
        for g in groups:
            if r in g:
                return g
    return None


def ledger_bubble_pct(diag: Diagnosis, iteration: int) -> dict[int, float]:
    """Per rank, the ledger's bubble as % of its span in ``iteration`` (the one number
    called bubble in every command)."""
    led = diag.ledger.filter(pc.equal(diag.ledger["iteration"], iteration))
    return {r: 100.0 * b / s for r, b, s in zip(led["rank"].to_pylist(),
                                                led["bubble_ns"].to_pylist(),
                                                led["span_ns"].to_pylist()) if s}


def pipeline_views(ranks: dict[int, RankActivities], diag: Diagnosis,
                   every: list[list[int]], iteration: int | None = None,
                   vpp: int | None = None, all_groups: bool = False,
                   where: str = "the job") -> PipelineViews | None:
    """The views of ``iteration`` (default: the first with micro-batches) of the PP
    groups among ``every`` (the job's) whose ranks are all in ``ranks`` (clock-synced
    activities; ``diag`` their diagnosis): by default the one group holding the first
    straggler (or the chains of waits), every group with ``all_groups``. None when the
    ranks did not profile ``iteration``. ``vpp`` None: as the tables were classified.
    ``where`` names the ranks in errors."""
    rows = microbatch_table(list(ranks.values())).to_pylist()
    its = sorted({r["iteration"] for r in rows})
    if not its:
        raise TraceVizError(f"{where}: no micro-batches found (no forward / backward steps)")
    it = iteration if iteration is not None else its[0]
    if it not in its:
        return None
    rows = [r for r in rows if r["iteration"] == it]
    have = {r["rank"] for r in rows}
    groups = [g for g in every if set(g) <= have]
    if not groups:
        raise TraceVizError(f"{where}: no PP group has all its ranks")
    strag = diag.stragglers.to_pylist()
    first = focus_group(groups, [s["rank"] for s in strag] + diag.chain_ranks())
    notes = []
    if not all_groups and first:
        notes.append(f"PP group {every.index(first)} (ranks {first}) shown: "
                     + ("it holds straggler rank "
                        f"{next(s['rank'] for s in strag if s['rank'] in first)}"
                        if any(s["rank"] in first for s in strag) else
                        "the iteration's chain of waits runs through it")
                     + " (--all-groups draws every group)")
    views = []
    for grp in groups if all_groups else [first or groups[0]]:
        if vpp is None:  # as the tables were classified (found from the traces)
            found = {(ranks[r].meta.get("classification") or {}).get("vpp") or 1 for r in grp}
            if len(found) > 1:
                raise TraceVizError(f"{where}: the stages of PP group {grp} were parsed with "
                                    f"different vpp {sorted(found)}; parse again with --vpp")
            vpp = found.pop()
        lengths = {r: step_length(ranks[r], it) for r in grp}
        marks = [(r, *m) for r in grp for m in stage_marks(ranks[r], it)]
        view = pipeline_view(rows, grp, vpp, {r: n for r, n in lengths.items() if n}, strag,
                             ledger_bubble_pct(diag, it))
        views.append(GroupView(every.index(grp), grp, it, view, marks))
    return PipelineViews(views, notes)
