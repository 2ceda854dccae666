"""Helpers shared by the tests: where the real traces are (a skip when they are absent),
small independent references (plain-Python interval unions), small synthetic traces."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"
REFERENCE = SHARED / "reference"
# the phases of a micro-batch step (a backward step holds its recompute)
STEP_PHASES = ("FWD", "BWD", "RECOMPUTE")


def shared_traces() -> list[Path]:
    """Every trace file under ../shared/traces (empty when the folder is absent)."""
    if not TRACES.is_dir():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and ".json" in p.name)


def trace_id(path: Path) -> str:
    return str(path.relative_to(TRACES))


needs_shared = pytest.mark.skipif(
    not TRACES.is_dir(),
    reason="../shared/traces is absent (real traces are only in the development checkout; "
           "CI always has them)")


def shared(path: str) -> Path:
    """A file under ../shared/traces; skips the test when the folder is absent."""
    p = TRACES / path
    if not TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    return p


def out_dir(job: Path, cwd: Path | None = None) -> Path:
    """Where the commands write for the job (or trace) ``job`` by default, written out
    here as the README states it: ``./traceviz-out/<job folder name>`` under the current
    folder ``cwd`` (default: this one; every test runs in its own ``tmp_path``, a module's
    shared fixtures in ``module_folder``)."""
    return (cwd or Path.cwd()) / "traceviz-out" / job.name


def union_length(spans: list[tuple[int, int]]) -> int:
    """Length of the union of ``[s, e)`` spans, in plain Python (touching spans merge)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def launch_events(n: int, tricky: str = "x") -> list[dict]:
    """``n`` launches, their kernels and ``n`` user annotations named ``tricky`` (Kineto
    events)."""
    events = []
    for k in range(n):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 1, "tid": 2, "ts": 10 * k, "dur": 2,
                       "args": {"correlation": k}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{k % 7}", "pid": 0, "tid": 7,
                       "ts": 10 * k + 3, "dur": 5, "args": {"correlation": k, "stream": 7}})
        events.append({"ph": "X", "cat": "user_annotation", "name": tricky, "pid": 1,
                       "tid": 2, "ts": 10 * k, "dur": 9})
    return events


def trace_text(events: list[dict], array: bool = False) -> bytes:
    """``events`` as a Kineto trace's JSON text (a bare array with ``array``)."""
    if array:
        return json.dumps(events, indent=1).encode()
    return json.dumps({"schemaVersion": 1, "traceEvents": events,
                       "traceName": "after the events"}, indent=1).encode()


@contextlib.contextmanager
def parking_everything(slice_rows: int = 997):
    """Park every per-activity array, however small, and work on parked arrays
    ``slice_rows`` activities at a time (traceviz.table.parked), inside the block."""
    from traceviz.table import parked

    saved = parked.PARK_MIN_BYTES, parked.SLICE_ROWS
    parked.PARK_MIN_BYTES, parked.SLICE_ROWS = 0, slice_rows
    try:
        yield
    finally:
        parked.PARK_MIN_BYTES, parked.SLICE_ROWS = saved


def true_iteration(cfg, root) -> int:
    """The iteration the synthesizer simulated for ``cfg`` (written to ``root``): first
    ProfilerStep start to last end over the ranks, on the true clock (ns): the truth a
    what-if's prediction for the job re-run with one thing changed must meet."""
    from traceviz.synth import synthesize

    job = synthesize(cfg, root)
    truth = json.loads((job / "ground_truth" / "ground_truth.json").read_text())
    spans = [(a - truth["skew_ns"][int(r)], b - truth["skew_ns"][int(r)])
             for r, v in truth["ranks"].items() for a, b in v["steps"]]
    return max(b for _, b in spans) - min(a for a, _ in spans)


def write_timer_dumps(folder: Path, fwd_ms: list[float], microbatches: int,
                      groups: int = 2) -> Path:
    """PP-Schedule-Visualization's timer dumps of a 1F1B pipeline written by hand (ms
    since each rank's start event): stage p runs micro-batch m's forward after stage
    p - 1's, its backward (twice the forward) after stage p + 1's; ``groups`` pipelines
    (TPxCPxDP ranks), rank = stage * groups + group."""
    pp = len(fwd_ms)
    folder.mkdir(parents=True, exist_ok=True)
    ends: dict[tuple, float] = {}
    for r in range(groups):
        for p in range(pp):
            events: dict[str, float] = {}
            clock = 0.0
            warm = min(pp - p - 1, microbatches)
            order = [("forward", m) for m in range(warm)]
            for i, m in enumerate(range(warm, microbatches)):
                order += [("forward", m), ("backward", i)]
            order += [("backward", m) for m in range(microbatches - warm, microbatches)]
            for phase, m in order:
                dep = (ends.get((r, p - 1, phase, m), 0.0) if phase == "forward"
                       else ends.get((r, p + 1, phase, m), 0.0))
                start = max(clock, dep) + 0.01
                end = start + fwd_ms[p] * (1 if phase == "forward" else 2)
                events[f"{phase}-{m}-start"], events[f"{phase}-{m}-end"] = start, end
                ends[(r, p, phase, m)] = end
                clock = end
            (folder / f"event_times_PP{pp}_VPP1_TPxCPxDP_rank_{r}_pp_rank_{p}_rank_"
             f"{p * groups + r}.json").write_text(json.dumps(events))
    return folder
