"""breakdown's per-step rows (the ledger's iteration windows, activities cut at their
edges) against a plain-Python computation: each activity clipped to each window, unions
per kind, the time outside every window; on real traces whose steps overlap on the GPU
(single_gpt: early memsets) and on a synthesized job of several iterations."""
from __future__ import annotations

import pytest
from helpers import shared, union_length

import traceviz
from traceviz.analysis.activities import activities
from traceviz.analysis.iterations import windows
from traceviz.analysis.temporal import sweep, temporal_breakdown
from traceviz.synth import SynthConfig, synthesize
from traceviz.table.schema import COMM, COMP


def _clip(spans, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def _outside(spans, wins):
    """The parts of ``spans`` outside every window (plain Python, one cut at a time)."""
    out = list(spans)
    for lo, hi in wins:
        nxt = []
        for s, e in out:
            if e <= lo or s >= hi:
                nxt.append((s, e))
                continue
            if s < lo:
                nxt.append((s, lo))
            if e > hi:
                nxt.append((hi, e))
        out = nxt
    return out


def _check(table):
    acts = activities(table)
    rows = {r["iteration"]: r for r in temporal_breakdown([sweep(acts, by_window=True)])
            .to_pylist()}
    win = windows(acts)
    have = set(acts.iteration.tolist())
    wins = [(int(s), int(e), int(i)) for i, s, e in zip(win.iteration, win.start, win.end)
            if i >= 0 and i in have]
    kinds = acts.kind.tolist()
    spans = list(zip(acts.ts.tolist(), acts.end.tolist()))
    comp = [x for x, k in zip(spans, kinds) if k == COMP]
    comm = [x for x, k in zip(spans, kinds) if k == COMM]
    for lo, hi, it in wins:
        r = rows[it]
        assert r["kernel_time_ns"] == hi - lo
        assert r["compute_ns"] == union_length(_clip(comp, lo, hi))
        assert r["comm_ns"] == union_length(_clip(comm, lo, hi))
        assert r["idle_ns"] == (hi - lo) - union_length(_clip(spans, lo, hi))
    whole = rows[None]
    first = min(min(s for s, _ in spans), min(lo for lo, _, _ in wins))
    last = max(max(e for _, e in spans), max(hi for _, hi, _ in wins))
    assert whole["kernel_time_ns"] == last - first
    rest = _outside(spans, [(lo, hi) for lo, hi, _ in wins])
    if -1 in rows:
        assert rows[-1]["compute_ns"] == union_length(
            _outside(comp, [(lo, hi) for lo, hi, _ in wins]))
        assert rows[-1]["idle_ns"] == (last - first - sum(hi - lo for lo, hi, _ in wins)
                                       - union_length(rest))
    else:
        assert not rest
    for col in ("kernel_time_ns", "compute_ns", "comm_ns", "idle_ns", "non_compute_ns"):
        assert sum(r[col] for k, r in rows.items() if k is not None) == whole[col]


def test_real_steps_that_overlap_on_the_gpu():
    _check(traceviz.parse_table(shared("gpu/single_gpt/single_gpt.json.gz")))


@pytest.mark.parametrize("rank", [0, 3])
def test_a_synthesized_job_of_three_iterations(tmp_path, rank):
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=4, layers=4, iterations=3,
                           with_stack=False, seed=rank), tmp_path)
    (trace,) = sorted(tmp_path.rglob(f"rank_{rank:04d}_*.json"))
    _check(traceviz.parse_table(trace))
