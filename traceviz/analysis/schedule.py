"""An ideal simulation of a pipeline schedule: every stage runs Megatron's order
(:mod:`traceviz.topology.schedule`) as fast as its dependencies allow. Times are int64
ns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TraceVizError
from ..topology.schedule import stage_order


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
    # measured steps: the data-parallel communication in the step's window not hidden
    # behind its compute (a forward's parameter all-gathers, a backward's gradient
    # reduce-scatter), and the
    # time its collectives waited for other ranks (-1 unknown); ns
    exposed_dp: int = 0
    waited: int = -1


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
