"""Megatron-Core's pipeline schedules as structure: which forward / backward step a stage
runs when (``megatron/core/pipeline_parallel/schedules.py`` as it runs today).

A step is ``(phase, micro-batch, chunk)`` with phase ``"F"`` or ``"B"``. Under the
interleaved schedule stage ``p`` holds model chunks ``0..vpp-1``; chunk ``c`` of stage
``p`` is virtual stage ``c * pp + p``. The k-th forward step runs entry k of the
schedule table (micro-batches in groups of ``pp`` — Megatron's default
``microbatch_group_size_per_vp_stage`` — every chunk per group, the last group taking the
rest); the k-th backward step runs entry k with its chunk mirrored. Warm-up is
``pp - p - 1`` forward steps under 1F1B and ``2 (pp - p - 1) + (vpp - 1) pp`` under the
interleaved schedule, at most all of them (Megatron's older releases also ran everything
as warm-up when the micro-batches equal the stages); then one forward and one backward in
turn, then the remaining backwards. The interleaved schedule needs at least ``pp``
micro-batches.
"""
from __future__ import annotations


def schedule_table(microbatches: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch (the k-th forward step)."""
    table: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table += [(mb, c) for c in range(vpp) for mb in range(first, last)]
    return table


def warmup(pp: int, stage: int, vpp: int, forwards: int) -> int:
    """The warm-up forward steps of ``stage`` out of ``forwards`` (see the module doc)."""
    warm = pp - stage - 1 if vpp == 1 else (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(warm, forwards)


def stage_order(pp: int, microbatches: int, stage: int, vpp: int = 1
                ) -> list[tuple[str, int, int]]:
    """The steps of ``stage`` in the order Megatron runs them (1F1B when ``vpp`` is 1,
    interleaved 1F1B otherwise)."""
    table = schedule_table(microbatches, vpp, pp) if vpp > 1 else [
        (m, 0) for m in range(microbatches)]
    forwards = [("F", m, c) for m, c in table]
    backwards = [("B", m, vpp - 1 - c) for m, c in table]
    warm = warmup(pp, stage, vpp, len(table))
    order = forwards[:warm]
    for k in range(len(table) - warm):
        order += [forwards[warm + k], backwards[k]]
    return order + backwards[len(table) - warm:]
