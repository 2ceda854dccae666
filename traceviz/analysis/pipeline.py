"""Pipeline-parallel schedule, measured vs ideal (PP-Schedule-Visualization's view).

For one PP group and one iteration, each stage's forward and backward steps are the
micro-batch rows of :func:`.microbatches.microbatch_table` (first kernel start to last
kernel end of the step, clock-synced). Per stage:

* ``busy`` = |union of its steps|; ``makespan`` = last step end - first step start of
  the whole group; ``bubble`` = makespan - busy; ``bubble_pct`` = 100 bubble / makespan
  (PP-Schedule-Visualization's definition, over the group's F/B window);
* the ideal schedule (:func:`..schedule.simulate`) with each stage's median forward and
  backward step and the smallest forward hand-off between consecutive stages measured as
  the P2P latency; ``ideal_bubble_pct`` and the analytic ``(p-1)/(m·v+p-1)``;
* the critical stage is the one with the most busy time;
* ``iteration_bubble_pct`` = 100 (iteration - busy) / iteration over the stage's whole
  ProfilerStep (or timer dump's ``total-execution-time``), so the DP / optimizer tail
  after the last backward counts too;
* warm-up / steady / cool-down steps and the largest losses against the ideal rules
  (:mod:`.pipeline_phases`).

Times are int64 ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..intervals import measure
from ..table.schema import COMM, OPTIMIZER, collective, group
from .activities import RankActivities
from .pipeline_phases import largest_gaps, phases
from .schedule import Step, simulate

# one row per stage of a pipeline group (README, "bubble"): times in ns, shares in %;
# ideal and iteration numbers null where unknown
STAGES_SCHEMA = pa.schema([
    ("stage", pa.int64()), ("rank", pa.int64()), ("forward_steps", pa.int64()),
    ("backward_steps", pa.int64()), ("median_forward_ns", pa.int64()),
    ("median_backward_ns", pa.int64()), ("busy_ns", pa.int64()), ("makespan_ns", pa.int64()),
    ("bubble_ns", pa.int64()), ("bubble_pct", pa.float64()),
    ("ideal_makespan_ns", pa.int64()), ("ideal_bubble_pct", pa.float64()),
    ("analytic_bubble_pct", pa.float64()), ("critical", pa.bool_()),
    ("iteration_ns", pa.int64()), ("iteration_bubble_pct", pa.float64()),
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
                  stragglers: list[dict] | None = None) -> PipelineView:
    """Measured vs ideal schedule of the PP group ``ranks`` (stage order);
    ``iteration_ns``: the length of each rank's whole iteration (ProfilerStep);
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
        cols["bubble_ns"].append(int(makespan - busy[p]))
        cols["bubble_pct"].append(100.0 * (makespan - busy[p]) / makespan if makespan
                                  else float("nan"))
        cols["ideal_makespan_ns"].append(int(ideal_span))
        cols["ideal_bubble_pct"].append(100.0 * (ideal_span - ideal_busy) / ideal_span
                                        if ideal_span else float("nan"))
        cols["analytic_bubble_pct"].append(100.0 * (pp - 1) / (mbs * vpp + pp - 1)
                                           if mbs else float("nan"))
        cols["critical"].append(p == critical)
        it_ns = (iteration_ns or {}).get(ranks[p])
        cols["iteration_ns"].append(it_ns)
        cols["iteration_bubble_pct"].append(100.0 * (it_ns - busy[p]) / it_ns if it_ns
                                            else None)
        ph = phases([s for s in steps if s.stage == p])
        for k in ("warmup_steps", "steady_pairs", "cooldown_steps"):
            cols[k].append(ph[k])
    gaps = largest_gaps(steps, pp, vpp, p2p, fwd, bwd, ranks, stragglers=stragglers or [])
    return PipelineView(ranks, steps, ideal, pa.table(cols, schema=STAGES_SCHEMA), p2p, gaps,
                        t0, vpp, mbs)


def stage_marks(acts: RankActivities, iteration: int) -> list[tuple[str, int, int]]:
    """What is drawn over one stage's row for ProfilerStep ``iteration``: its pipeline
    P2P kernels ``("P2P", start, end)`` and its optimizer work's span
    ``("optimizer", first start, last end)``; times as the activities have them."""
    in_it = acts.iteration == iteration
    p2p = np.flatnonzero(in_it & (acts.kind == COMM) & (acts.group == group("PP"))
                         & (acts.collective == collective("SendRecv")))
    marks = [("P2P", a, b) for a, b in zip(acts.ts[p2p].tolist(), acts.end[p2p].tolist())]
    opt = in_it & (acts.phase == OPTIMIZER)
    if opt.any():
        marks.append(("optimizer", int(acts.ts[opt].min()), int(acts.end[opt].max())))
    return marks


def step_length(meta: dict, iteration: int) -> int | None:
    """The length (ns) of ProfilerStep ``iteration`` in a rank's metadata (None: absent)."""
    for step in meta.get("steps") or []:
        if step.get("iteration") == iteration:
            return int(step["dur"])
    return None
