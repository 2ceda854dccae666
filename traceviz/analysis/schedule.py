"""Pipeline-parallel schedules: the order each stage runs its forward / backward steps
(Megatron's 1F1B and interleaved 1F1B, as Megatron-Core runs them today: its older
releases ran every step of an interleaved schedule as warm-up when the micro-batches
equal the stages), and an ideal simulation of that order.

A step is ``(phase, micro-batch, chunk)`` with phase ``"F"`` or ``"B"``. Under the
interleaved schedule stage ``p`` holds model chunks ``0..vpp-1``; chunk ``c`` of stage
``p`` is virtual stage ``c * pp + p``. Times are int64 ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TraceVizError


def stage_order(pp: int, microbatches: int, stage: int, vpp: int = 1
                ) -> list[tuple[str, int, int]]:
    """The steps of ``stage`` in the order Megatron runs them (1F1B when ``vpp`` is 1,
    interleaved 1F1B otherwise; then ``microbatches`` must be a multiple of ``pp``)."""
    P, M, v, p = pp, microbatches, vpp, stage
    if v == 1:
        warm = min(P - p - 1, M)
        order = [("F", m, 0) for m in range(warm)]
        for i in range(M - warm):
            order += [("F", warm + i, 0), ("B", i, 0)]
        return order + [("B", M - warm + i, 0) for i in range(warm)]
    if M % P:
        raise TraceVizError(f"the interleaved schedule needs micro-batches ({M}) divisible "
                            f"by pp ({P})")
    total = M * v

    def fwd(k: int) -> tuple[str, int, int]:
        return "F", (k // (P * v)) * P + k % P, (k // P) % v

    def bwd(k: int) -> tuple[str, int, int]:
        return "B", (k // (P * v)) * P + k % P, v - 1 - (k // P) % v

    warm = min((P - p - 1) * 2 + (v - 1) * P, total)  # current Megatron: no M == P case
    order = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        order += [fwd(warm + k), bwd(k)]
    return order + [bwd(total - warm + k) for k in range(warm)]


@dataclass
class Step:
    """One simulated step of one stage."""

    stage: int
    phase: str
    microbatch: int
    chunk: int
    start: int
    end: int
    recompute: bool = False  # a measured backward that re-ran its forward


def simulate(pp: int, microbatches: int, fwd_ns: np.ndarray, bwd_ns: np.ndarray,
             p2p_ns: int = 0, vpp: int = 1) -> list[Step]:
    """Run every stage's :func:`stage_order` as fast as its dependencies allow.

    ``fwd_ns[p]`` / ``bwd_ns[p]``: duration of one forward / backward step (one chunk)
    on stage ``p``. A forward step of virtual stage ``s`` waits for the same
    micro-batch's forward on ``s - 1`` plus ``p2p_ns``; a backward step waits for the
    backward on ``s + 1`` plus ``p2p_ns``, or, on the last virtual stage, for its own
    forward. A stage runs one step at a time, in order; a step that sends (a forward
    below the last virtual stage, a backward above the first) holds its stage until the
    send completes, ``p2p_ns`` after it, as Megatron's blocking P2P calls do.
    """
    orders = [stage_order(pp, microbatches, p, vpp) for p in range(pp)]
    last = pp * vpp - 1
    done: dict[tuple[str, int, int], int] = {}  # (phase, mb, virtual stage) -> end
    nxt = [0] * pp
    free = [0] * pp
    steps: list[Step] = []
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for p in range(pp):
            while nxt[p] < len(orders[p]):
                phase, mb, chunk = orders[p][nxt[p]]
                vs = chunk * pp + p
                if phase == "F":
                    dep = ("F", mb, vs - 1) if vs > 0 else None
                    lag = p2p_ns
                else:
                    dep = ("B", mb, vs + 1) if vs < last else ("F", mb, vs)
                    lag = p2p_ns if vs < last else 0
                if dep is not None and dep not in done:
                    break
                ready = done[dep] + lag if dep is not None else 0
                start = max(free[p], ready)
                end = start + int(fwd_ns[p] if phase == "F" else bwd_ns[p])
                done[(phase, mb, vs)] = end
                sends = vs < last if phase == "F" else vs > 0
                free[p] = end + (p2p_ns if sends else 0)
                steps.append(Step(p, phase, mb, chunk, start, end))
                nxt[p] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise TraceVizError("the pipeline schedule deadlocks (inconsistent order)")
    return steps
