"""The order in which one pipeline stage runs its forward and backward steps, as
Megatron-Core's schedules run it (``megatron/core/pipeline_parallel/schedules.py``),
written here from Megatron's own loop structure for the synthesizer alone: the analyses
have their own schedule code, and a synthesizer that shared it would prove nothing.

1F1B (``forward_backward_pipelining_without_interleaving``): ``pp - stage - 1`` warm-up
forwards (at most all), then one forward and one backward in turn, then the remaining
backwards.

Interleaved (``forward_backward_pipelining_with_interleaving``): Megatron's schedule
table (``get_schedule_table``) walks micro-batches in groups of
``microbatch_group_size_per_vp_stage`` (default ``pp``), every model chunk per group; the
k-th forward step runs table entry k, the k-th backward step entry k with its chunk
mirrored (``vpp - 1 - chunk``). Warm-up is ``(pp - stage - 1) * 2 + (vpp - 1) * group``
forward steps, at most all of them (``get_pp_rank_microbatches``).
"""
from __future__ import annotations


def schedule_table(microbatches: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch id, as ``get_schedule_table``."""
    table = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table += [(mb, chunk) for chunk in range(vpp) for mb in range(first, last)]
    return table


def stage_order(pp: int, microbatches: int, stage: int, vpp: int = 1,
                group: int | None = None) -> list[tuple[str, int, int]]:
    """The steps ``("F" | "B", micro-batch, chunk)`` of ``stage``, in run order."""
    if vpp == 1:
        forwards = [("F", mb, 0) for mb in range(microbatches)]
        backwards = [("B", mb, 0) for mb in range(microbatches)]
        warmup = min(pp - stage - 1, microbatches)
    else:
        table = schedule_table(microbatches, vpp, group or pp)
        forwards = [("F", mb, chunk) for mb, chunk in table]
        backwards = [("B", mb, vpp - 1 - chunk) for mb, chunk in table]
        warmup = min((pp - stage - 1) * 2 + (vpp - 1) * (group or pp), len(table))
    order = forwards[:warmup]
    for k in range(len(forwards) - warmup):  # steady state: 1F1B
        order += [forwards[warmup + k], backwards[k]]
    return order + backwards[len(forwards) - warmup:]
