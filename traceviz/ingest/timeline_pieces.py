"""An op timeline diagnosed on workers (``-j`` local processes or a Dask cluster), a
block of its steps at a time: the command's process holds the job's shape (names, each
rank's place, the steps), the typical values and the per-step sums the findings read
(each rank's ledger, the compute cells, the DP calls), never the ops.

Four passes over the timeline's parquet row groups; a task reads the row groups whose
statistics overlap its steps and checks every row it reads:

1. **Facts**: each block of step numbers (the statistics' range cut evenly) gives its op
   names (where each first appears), ranks, layout columns, the stages' facts, steps
   and counts; here they make the job's shape (:class:`~traceviz.analysis.timeline.
   model.JobShape`) as one process makes it from every row, and each row group's
   statistics are checked against its rows.
2. **Typical values**: one task models the steps they are taken over (up to 16).
3. **Measured**: each block of steps re-simulated as measured (:class:`~traceviz.
   analysis.timeline.diagnosis.Measured`), joined in step order.
4. **What-ifs**: each block re-simulated under every what-if the findings ask for.

Without statistics (a writer that stores none) the facts are one task reading every
row group, and each block of the later passes reads every row group and keeps its
steps' rows: correct, but the timeline is read once per block; a row group of many
steps is read by each block that holds one of them. Each task has one file open at a
time.

The outputs are those of the whole timeline read in one process (an error a row of the
timeline raises too: where several rows are bad, the one named may be another). Timelines in other
formats (CSV, JSON lines, a Chrome trace), and parquet ones of fewer than
:data:`MIN_ROWS` ops without a scheduler named, are read and diagnosed in the
command's process. A block whose worker dies twice stops the diagnosis, naming its
steps (a diagnosis without some steps would be another one).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ..analysis.timeline import whatif as W
from ..analysis.timeline.data import (
    OpTimeline,
    check_names,
    check_steps,
    rank_layout,
    see_layout,
)
from ..analysis.timeline.diagnosis import Measured, measured_steps
from ..analysis.timeline.flatten import flatten, flatten_notes
from ..analysis.timeline.layout import NONE, StageFacts, complete_layout
from ..analysis.timeline.model import JobShape, TimelineModel, Typical, sampled
from ..errors import TraceVizError
from ..table.cores import usable_cores
from . import workers as pool
from .op_timeline import MAX_OP_NAMES, RowGroup, read_steps, row_groups
from .rank_pieces import Workers

MIN_ROWS = 2_000_000        # fewer ops: diagnosed in the command's process
ROWS_PER_BLOCK = 4_000_000  # ops a task models at a time (about 0.6 GB of a worker's)


@dataclass
class BlockFacts:
    """What one block of step numbers says of the job (pass 1): its rows, where each op
    name first appears (file, row), its steps (those left once wrappers are left out)
    and ranks, what its rows give of each rank's stage, DP and TP rank (the ranks that
    give it, and their values), the ranks that receive from / send to a pipeline
    neighbour, its first step with each rank's earliest forward compute in it, and,
    flattened (:mod:`~traceviz.analysis.timeline.flatten`), its model chunks and
    micro-batch slots, wrappers left out, nested and overlapping ops, ops and the op
    names that have rows."""

    rows: int
    first_seen: dict[str, tuple[int, int]]
    steps: np.ndarray
    ranks: np.ndarray
    layout: dict[str, tuple[np.ndarray, np.ndarray]]
    receives: np.ndarray
    sends: np.ndarray
    first_step: int
    forward_ranks: np.ndarray
    forward_starts: np.ndarray
    chunks: int
    microbatches: int
    wrapped: int
    wrappers: tuple[str, ...]
    nested: int
    overlap: int
    ops: int
    present: tuple[str, ...]


def facts_of_block(task: tuple[int, int | None, int | None], groups: list[RowGroup]
                   ) -> BlockFacts | None:
    """Pass 1 for the step numbers ``task`` = (block, lowest, highest) (None: every
    step); None where it holds no row."""
    _, lo, hi = task
    tl, seen = read_steps(groups, lo, hi, first=True)
    if tl is None:
        return None
    layout = {name: (tl.ranks[v >= 0], v[v >= 0]) for name, v in
              (("stage", tl.stage), ("dp_rank", tl.dp), ("tp_rank", tl.tp))}
    facts = StageFacts.of(tl)  # (of every row, as the layout is completed)
    fwd = facts.first_forward != NONE
    rows, first_step, ranks = len(tl), int(tl.step.min()), tl.ranks
    flat = flatten(tl)
    t = flat.timeline
    return BlockFacts(
        rows, seen, flat.step_numbers, ranks, layout, ranks[facts.receives],
        ranks[facts.sends], first_step, ranks[fwd], facts.first_forward[fwd], t.chunks,
        t.microbatch_slots, flat.wrapped, flat.wrappers, flat.nested, flat.overlapping, len(t),
        tuple(t.names[o] for o in np.unique(t.op)))


def shape_of(blocks: list[BlockFacts], path: str | os.PathLike, files: int) -> JobShape:
    """The job's shape from every block's facts, as one process makes it from every
    row (:class:`~traceviz.analysis.timeline.model.JobShape`) of the timeline at
    ``path`` (``files`` files)."""
    if not blocks:
        raise TraceVizError("the op timeline has no rows")
    first: dict[str, tuple[int, int]] = {}
    for b in blocks:
        for name, pos in b.first_seen.items():
            first[name] = min(first.get(name, pos), pos)
    check_names(len(first), path, MAX_OP_NAMES)
    names = tuple(sorted(first, key=first.__getitem__))
    steps = np.unique(np.concatenate([b.steps for b in blocks])).astype(np.int64)
    check_steps(len(steps))
    ranks = np.unique(np.concatenate([b.ranks for b in blocks])).astype(np.int32)
    seen: dict[str, dict[int, tuple[int, int]]] = {"stage": {}, "dp_rank": {},
                                                    "tp_rank": {}}
    for b in blocks:
        for name, (given, values) in b.layout.items():
            see_layout(seen[name], given, values, values, name, path)
    layout, found = rank_layout(seen, ranks)
    rows = sum(b.rows for b in blocks)
    tl = OpTimeline.without_rows(
        names, ranks, layout["stage"], layout["dp"], layout["tp"], found,
        [f"{path}: {files} op timeline files, {rows:,} ops"] if files > 1 else [])
    first_step = min(b.first_step for b in blocks)
    forward = np.full(len(ranks), NONE, dtype=np.int64)
    for b in blocks:
        if b.first_step == first_step:
            np.minimum.at(forward, np.searchsorted(ranks, b.forward_ranks),
                          b.forward_starts)
    receives = np.isin(ranks, np.concatenate([b.receives for b in blocks]))
    sends = np.isin(ranks, np.concatenate([b.sends for b in blocks]))
    tl = complete_layout(tl, StageFacts(receives, sends, forward))
    tl.notes += flatten_notes(sum(b.wrapped for b in blocks),
                              sorted({w for b in blocks for w in b.wrappers}),
                              sum(b.nested for b in blocks), sum(b.overlap for b in blocks))
    code = {n: i for i, n in enumerate(names)}
    present = np.unique(np.array([code[n] for b in blocks for n in b.present],
                                 dtype=np.int64))
    return JobShape(names, ranks, tl.stage, tl.dp, tl.tp, dict(tl.layout_from),
                    max(b.chunks for b in blocks), max(b.microbatches for b in blocks),
                    steps, sum(b.ops for b in blocks), present, tl.notes)


def _model(groups: list[RowGroup], shape: JobShape, typical: Typical | None,
           places: tuple[int, int], only: frozenset[int] | None = None) -> TimelineModel:
    """The model of the job's steps at places ``places`` (first, end), or of ``only``
    those steps (numbers) among them."""
    a, b = places
    tl, _ = read_steps(groups, int(shape.steps[a]), int(shape.steps[b - 1]), shape.names,
                       only)
    if tl is None:  # a block of steps always has rows: the file changed
        raise TraceVizError(f"{groups[0].path}: steps {int(shape.steps[a])} to "
                            f"{int(shape.steps[b - 1])} are gone: it changed while it was "
                            "being read; run again")
    return TimelineModel(tl, shape, typical, a)


def typical_of_steps(task: tuple[int, int, int], groups: list[RowGroup], shape: JobShape
                     ) -> Typical:
    """Pass 2: the typical values, from the steps they are taken over (one task:
    ``task`` says nothing more)."""
    chosen = shape.steps[sampled(len(shape.steps))]
    return _model(groups, shape, None, (0, len(shape.steps)),
                  frozenset(int(s) for s in chosen)).typical


def measured_of_block(task: tuple[int, int, int], groups: list[RowGroup], shape: JobShape,
                      typical: Typical) -> Measured:
    """Pass 3: the steps at places ``task`` = (block, first, end) re-simulated as
    measured."""
    return measured_steps(_model(groups, shape, typical, task[1:]))


def times_of_block(task: tuple[int, int, int], groups: list[RowGroup], shape: JobShape,
                   typical: Typical, whatifs: list[W.WhatIf]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Pass 4: the block's steps' measured times and [what-if, step] re-simulated
    times (ns), on one thread (the blocks run side by side)."""
    return W.step_times(_model(groups, shape, typical, task[1:]), whatifs, threads=1)


@dataclass
class OnWorkers:
    """The timeline's steps re-simulated on workers (:class:`~traceviz.analysis.
    timeline.diagnosis.Steps`), after its shape and typical values are made there
    (``model``: the job's shape alone, what the findings read)."""

    groups: list[RowGroup]
    shape: JobShape
    typical: Typical
    model: TimelineModel
    blocks: list[tuple[int, int, int]]
    on: Workers
    processes: int

    def measured(self) -> Measured:
        return Measured.joined(self._map(measured_of_block, (self.typical,)))

    def times(self, whatifs: list[W.WhatIf]) -> tuple[np.ndarray, np.ndarray]:
        parts = self._map(times_of_block, (self.typical, whatifs))
        return (np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts], axis=1))

    def _map(self, work, args: tuple) -> list:
        return _run(work, self.blocks, (self.groups, self.shape) + args, self.on,
                    self.processes, self.shape.steps)


def _run(work, tasks: list[tuple], args: tuple, on: Workers, processes: int,
         steps: np.ndarray | None) -> list:
    """``work(task, *args)`` of every task, in the tasks' order; a task whose worker
    died (twice) stops it, naming its steps."""
    out: dict[int, object] = {}
    for f in pool.run(work, tasks, args, jobs=processes, scheduler=on.scheduler):
        if f.died is not None:
            k, a, b = f.task
            which = (f"steps {int(steps[a])} to {int(steps[b - 1])}" if steps is not None
                     else f"step numbers {a} to {b}" if a is not None else "every step")
            raise TraceVizError(f"the process modelling {which} of the op timeline "
                                f"{f.died}; run again with fewer --jobs")
        out[f.task[0]] = f.result
    return [out[t[0]] for t in tasks]


def on_workers(path: str | os.PathLike, on: Workers) -> OnWorkers | None:
    """The op timeline at ``path`` ready to diagnose on ``on`` (passes 1 and 2 run),
    None where it is diagnosed in this process (see the module doc)."""
    if on.scheduler is None and on.jobs == 1:
        return None
    listed = row_groups(path)
    if listed is None or not listed[1]:  # (no row group: one process says so)
        return None
    files, groups = listed
    rows = sum(g.rows for g in groups)
    if on.scheduler is None and rows < MIN_ROWS:
        return None
    processes = max(1, on.jobs or usable_cores())
    # (the footers' row counts are not trusted for more tasks than row groups)
    count = min(max(processes, math.ceil(rows / ROWS_PER_BLOCK)),
                max(processes, len(groups)))
    stated = [g.steps for g in groups if g.steps is not None]
    if len(stated) == len(groups):  # the statistics' range cut evenly
        lo, hi = min(s[0] for s in stated), max(s[1] for s in stated)
        width = max(1, math.ceil((hi - lo + 1) / count))
        ranges: list[tuple[int, int | None, int | None]] = [
            (k, a, min(a + width - 1, hi)) for k, a in enumerate(range(lo, hi + 1, width))]
    else:
        ranges = [(0, None, None)]
    found = _run(facts_of_block, ranges, (groups,), on, processes, None)
    shape = shape_of([b for b in found if b is not None], path, len(files))
    n = len(shape.steps)
    count = min(n, max(processes, math.ceil(shape.ops / ROWS_PER_BLOCK)))
    cuts = np.linspace(0, n, count + 1).round().astype(int)
    blocks = [(k, int(a), int(b)) for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))
              if b > a]
    typical = _run(typical_of_steps, [(0, 0, n)], (groups, shape), on, processes,
                   shape.steps)[0]
    return OnWorkers(groups, shape, typical, TimelineModel.of_shape(shape, typical),
                     blocks, on, processes)
