"""Pipeline schedules: the ideal simulation reproduces the analytic 1F1B / interleaved
makespans, and the orders are those the synthesizer runs."""
from __future__ import annotations

import numpy as np
import pytest

from traceviz.analysis.schedule import simulate
from traceviz.topology.schedule import stage_order


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 4), (8, 32), (3, 1)])
def test_1f1b_makespan_is_analytic(pp, m):
    F, B = 1000, 2000
    steps = simulate(pp, m, np.full(pp, F), np.full(pp, B))
    assert max(s.end for s in steps) == (m + pp - 1) * (F + B)
    for p in range(pp):  # each stage is busy m (F + B); the rest is bubble
        assert sum(s.end - s.start for s in steps if s.stage == p) == m * (F + B)
    assert len(steps) == 2 * pp * m


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4)])
def test_interleaved_makespan_is_analytic(pp, m, v):
    F, B = 1000, 2000  # per chunk
    steps = simulate(pp, m, np.full(pp, F), np.full(pp, B), vpp=v)
    # Megatron's interleaved 1F1B: bubble (p - 1)(F + B) per stage with chunk steps
    assert max(s.end for s in steps) == (m * v + pp - 1) * (F + B)


def test_p2p_latency_adds_to_the_critical_path():
    steps = simulate(2, 1, np.array([10, 10]), np.array([20, 20]), p2p_ns=5)
    # F0 on stage 0, +5, F0 on stage 1, B0 on stage 1, +5, B0 on stage 0
    assert max(s.end for s in steps) == 10 + 5 + 10 + 20 + 5 + 20


def test_orders_cover_every_step_once():
    for pp, m, v in ((4, 8, 1), (4, 8, 2), (2, 6, 3)):
        for p in range(pp):
            order = stage_order(pp, m, p, v)
            assert sorted(order) == sorted((ph, mb, c) for ph in "FB" for mb in range(m)
                                           for c in range(v))
