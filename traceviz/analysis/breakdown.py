"""Every HTA-style analysis of a set of ranks, as tables: temporal breakdown, kernel-type
breakdown, top kernels, idle time by cause (HTA's per stream, and the GPU's time without
compute by the ledger's causes: :func:`.diagnose.ledger.idle_causes`), launch statistics,
queue length and memcpy bandwidth summaries (each module documents its definitions)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa

from ..errors import TraceVizError
from .activities import Options, RankActivities, activities
from .diagnose.diagnosis import Diagnosis, pipelines_of, split_of
from .diagnose.ledger import Pipelines, idle_causes, rank_ledger
from .diagnose.waits import SPLIT_COLUMNS, CommRows, attach, comm_rows, job_split
from .idle import idle_breakdown
from .kernels import top_kernels
from .launch import launch_stats_summary
from .queue import memory_bw_summary, queue_length_summary
from .temporal import kernel_type_breakdown, sweep, temporal_breakdown

# the columns the breakdown reads of a parsed table
COLUMNS = ("device", "ts", "dur", "launch_ts", "launch_dur", "iteration", "stream", "name",
           "cat", "kind", "launch_name", "bytes", "memory_bw_gbps", "correlation")
OPTIONAL_COLUMNS = ("memory_bw_gbps",)  # tables parsed before it existed lack it
# what :func:`breakdown_of` reads (the split of communication into wait / transfer too)
READ_COLUMNS = tuple(dict.fromkeys(COLUMNS + SPLIT_COLUMNS))
READ_OPTIONAL = OPTIONAL_COLUMNS + SPLIT_COLUMNS


@dataclass(frozen=True)
class Params:
    """The analyses' thresholds (ns) and sizes; HTA's defaults."""

    kernel_wait_ns: int = 30_000
    runtime_cutoff_ns: int = 50_000
    launch_delay_cutoff_ns: int = 100_000
    num_kernels: int = 10
    duration_ratio: float = 0.8

    @classmethod
    def from_us(cls, kernel_wait_us: float, runtime_cutoff_us: float,
                launch_delay_cutoff_us: float, **sizes) -> Params:
        """The thresholds as users give them (µs, HTA's unit), in ns."""
        return cls(kernel_wait_ns=round(kernel_wait_us * 1000),
                   runtime_cutoff_ns=round(runtime_cutoff_us * 1000),
                   launch_delay_cutoff_ns=round(launch_delay_cutoff_us * 1000), **sizes)


@dataclass(frozen=True)
class Breakdown:
    """Every table of the breakdown of a set of ranks (each with its declared schema where
    the module making it declares one), and the ranks it covers (ascending)."""

    idle_causes: pa.Table
    temporal_breakdown: pa.Table
    kernel_type_breakdown: pa.Table
    top_kernels: pa.Table
    idle_time_breakdown: pa.Table
    launch_stats: pa.Table
    queue_length_summary: pa.Table
    memory_bw_summary: pa.Table
    ranks: tuple[int, ...]

    def tables(self) -> dict[str, pa.Table]:
        """The tables by name (the names of their files)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "ranks"}


@dataclass
class BreakdownPart:
    """One rank's share of the breakdown, made where its table is read
    (:func:`breakdown_part`): its communication rows (what splitting its communication
    into wait and transfer needs of its table) and, where the rank is analysed, its
    activities (None: a rank only matched, not among those chosen)."""

    rank: int
    acts: RankActivities | None
    comm: CommRows


def breakdown_part(table: pa.Table, options: Options, rank: int,
                   chosen: Sequence[int] | None = None) -> BreakdownPart:
    """The :class:`BreakdownPart` of ``rank``'s table (of :data:`READ_COLUMNS`); its
    activities where ``rank`` is among ``chosen`` (None: every rank)."""
    acts = activities(table, options, rank=rank) if chosen is None or rank in chosen \
        else None
    return BreakdownPart(rank, acts, comm_rows(table))


def breakdown_of(parts: Iterable[BreakdownPart], options: Options = Options(),
                 ranks: Sequence[int] | None = None, params: Params = Params(),
                 failed: Sequence[str] = (), diag: Diagnosis | None = None) -> Breakdown:
    """The breakdown of the ranks' ``parts`` (:func:`breakdown_part` of each), or of
    those among them in ``ranks``. With more than one rank, communication is split into
    wait and transfer on synced clocks (every rank's calls are matched, selected or not;
    or the split of ``diag``, the job's diagnosis, taken where it covers the tables).
    ``failed``: why other ranks could not be loaded (named when none is left)."""
    selected: list[RankActivities] = []
    comm: dict[int, CommRows] = {}
    given: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for part in parts:
        found = split_of(diag, part.rank, part.comm) if diag is not None else None
        if found is not None:
            given[part.rank] = found
        comm[part.rank] = part.comm
        if part.acts is not None and (ranks is None or part.rank in ranks):
            selected.append(part.acts)
    if not selected:
        raise TraceVizError("no rank could be analysed" + (
            ": " + "; ".join(failed) if failed else " (check --ranks)"))
    selected.sort(key=lambda a: a.rank)
    if len(comm) > 1:  # wait / transfer: every member of a call on synced clocks
        split = (given if diag is not None and set(given) == set(comm) == set(diag.ranks)
                 else job_split(comm)[0])
        for acts in selected:
            attach(acts, *split[acts.rank])
    del comm
    return Breakdown(**breakdown_tables(selected, params, options.hta_compat),
                     ranks=tuple(a.rank for a in selected))


def breakdown_tables(ranks: list[RankActivities], params: Params = Params(),
                     hta_compat: bool = False) -> dict[str, pa.Table]:
    """Every table of the breakdown by name, from ranks sorted by rank."""
    # one sweep per rank feeds both tables; its iterations the ledger's windows (HTA's
    # launch-grouped spans with hta_compat)
    sweeps = [sweep(a, by_window=not hta_compat) for a in ranks]
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
