"""Iteration windows: where each ProfilerStep runs on the GPU (one definition, used by
the ledger, the report, the op model's MFU and the summaries).

A rank's iteration N is where the GPU runs it: from the later of its
``ProfilerStep#N`` start and the end of the GPU work launched before it (earlier steps',
or work the trace shows running without its launch: launched before the trace began),
but no later than the first start of its own work, to the later of the step's end and
the end of the last GPU activity it launched, cut at the next window's start (windows
never overlap); synced clock. Where the CPU runs ahead of the GPU (no synchronisation
between steps, as in most training loops) the GPU runs a step long after the CPU's
span: the window follows the GPU, as a CUDA event recorded at the step's start and end
would; where the GPU keeps up it is the CPU's span stretched to the step's last kernel.
The CPU's own span is kept beside it (``cpu_start_ns``, ``cpu_span_ns``). A trace
without ProfilerSteps is one window from its first activity start to its last end
(iteration -1).

Times are int64 ns on the activities' clock (synced where they are).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activities import RankActivities

# what the windows read of a rank's table (with its metadata's ProfilerSteps)
COLUMNS = ("ts", "dur", "iteration", "launch_ts", "launch_dur")


@dataclass
class Windows:
    """One rank's iteration windows (ns, synced clock), in time order, and the CPU spans
    of their ProfilerSteps (``cpu_start`` / ``cpu_end``; -1 where none: a trace without
    steps)."""

    iteration: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cpu_start: np.ndarray
    cpu_end: np.ndarray


def windows(acts: RankActivities) -> Windows:
    """The rank's iteration windows (see the module doc)."""
    steps = sorted((s for s in acts.meta.get("steps") or []
                    if isinstance(s, dict) and "ts" in s), key=lambda s: s["ts"])
    if not steps:
        none = np.zeros(0, np.int64)
        if not len(acts):
            return Windows(none, none, none, none, none)
        one = np.array([-1])
        return Windows(one, np.array([acts.ts.min()]), np.array([acts.end.max()]), one, one)
    its = np.array([int(s.get("iteration", -1)) for s in steps], np.int64)
    cpu_start = np.array([int(s["ts"]) for s in steps], np.int64) - acts.offset_ns
    cpu_end = cpu_start + np.array([max(int(s.get("dur", 0)), 0) for s in steps], np.int64)
    # the steps' own GPU work: what they launched (every activity of a trace that states
    # no launch at all, by its own start)
    launched = acts.launch_end >= 0
    own = launched if launched.any() else np.ones(len(acts), bool)
    first = np.full(its.size, np.iinfo(np.int64).max)
    last = np.full(its.size, np.iinfo(np.int64).min)
    at = np.searchsorted(its, acts.iteration) if np.all(its[1:] > its[:-1]) else None
    if at is not None and len(acts):
        hit = own & (at < its.size) & (its[np.minimum(at, its.size - 1)] == acts.iteration)
        np.minimum.at(first, at[hit], acts.ts[hit])
        np.maximum.at(last, at[hit], acts.end[hit])
    # the end of the GPU work before each step: earlier steps', and before the first
    # step's, work launched before it or running without a launch in the trace
    earlier = np.flatnonzero(
        (launched & (acts.launch_ts - acts.offset_ns < cpu_start[0]))
        | (~own & (acts.ts < first[0])))
    before = acts.end[earlier].max(initial=np.iinfo(np.int64).min)
    prior = np.maximum.accumulate(np.r_[before, last[:-1]])
    start = np.minimum(np.maximum(cpu_start, prior), first)
    end = np.maximum(cpu_end, last)
    end[:-1] = np.minimum(end[:-1], start[1:])
    return Windows(its, start, np.maximum(end, start), cpu_start, cpu_end)
