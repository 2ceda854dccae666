"""Every HTA-style analysis of a set of ranks, as tables: temporal breakdown, kernel-type
breakdown, top kernels, idle time by cause (HTA's per stream, and the GPU's time without
compute by the ledger's causes: :func:`.diagnose.ledger.idle_causes`), launch statistics,
queue length and memcpy bandwidth summaries (each module documents its definitions)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .activities import RankActivities
from .diagnose.diagnosis import pipelines_of
from .diagnose.ledger import Pipelines, idle_causes, rank_ledger
from .idle import idle_breakdown
from .kernels import top_kernels
from .launch import launch_stats_summary
from .queue import memory_bw_summary, queue_length_summary
from .temporal import kernel_type_breakdown, sweep, temporal_breakdown

# the columns the breakdown reads of a parsed table
COLUMNS = ("device", "ts", "dur", "launch_ts", "launch_dur", "iteration", "stream", "name",
           "cat", "kind", "launch_name", "bytes", "memory_bw_gbps", "correlation")
OPTIONAL_COLUMNS = ("memory_bw_gbps",)  # tables parsed before it existed lack it


@dataclass(frozen=True)
class Params:
    """The analyses' thresholds (ns) and sizes; HTA's defaults."""

    kernel_wait_ns: int = 30_000
    runtime_cutoff_ns: int = 50_000
    launch_delay_cutoff_ns: int = 100_000
    num_kernels: int = 10
    duration_ratio: float = 0.8


def breakdown_tables(ranks: list[RankActivities], params: Params = Params(),
                     hta_compat: bool = False) -> dict[str, pa.Table]:
    """Every table of the breakdown by name, from ranks sorted by rank."""
    sweeps = [sweep(a) for a in ranks]  # one sweep per rank feeds both tables
    pipelines = Pipelines.of(pipelines_of(a.meta for a in ranks), 0)
    return {
        "idle_causes": idle_causes([rank_ledger(a, pipelines) for a in ranks]),
        "temporal_breakdown": temporal_breakdown(sweeps),
        "kernel_type_breakdown": kernel_type_breakdown(sweeps),
        "top_kernels": top_kernels(ranks, params.num_kernels, params.duration_ratio,
                                   hta_compat),
        "idle_time_breakdown": idle_breakdown(ranks, params.kernel_wait_ns, hta_compat),
        "launch_stats": launch_stats_summary(ranks, params.runtime_cutoff_ns,
                                             params.launch_delay_cutoff_ns, hta_compat),
        "queue_length_summary": queue_length_summary(ranks),
        "memory_bw_summary": memory_bw_summary(ranks, hta_compat),
    }
