"""The aggregation of one folder of rank tables: every rank's micro-batch steps and
Megatron-TraceViz category spans on one clock, the clock offsets that put them there, and
the diagnosis that picks which ranks a figure shows.

Clock alignment (``alignment``): ``synced`` puts every rank on one clock from collective
end times (:mod:`.clocks`); ranks no collective links keep their own clock, and when none
is linked the aggregation falls back to ``global`` (each rank's own clock), saying so in
``notes``. Communication is split into wait / transfer on synced clocks whatever the
alignment (:mod:`.diagnose.waits`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ..errors import TraceVizError
from .calls import COLUMNS as CALL_COLUMNS
from .clocks import ClockSync, sync_note
from .diagnose.diagnosis import Diagnosis, diagnosis_of
from .diagnose.ledger import Pipelines
from .diagnose.waits import SPLIT_COLUMNS, CommPart, job_comm_of, own_clock
from .microbatches import COLUMNS, RankCategories, categorized, category_spans, microbatch_table

# the columns the aggregation reads of a parsed table
READ_COLUMNS = tuple(dict.fromkeys(COLUMNS + CALL_COLUMNS + SPLIT_COLUMNS))
ALIGNMENTS = ("synced", "global")


@dataclass
class Aggregation:
    """One folder's aggregation (see the module doc). ``microbatches``: per rank,
    iteration, phase and micro-batch step (ns); ``category_spans``: per rank, iteration
    and category; ``clock_offsets``: per rank, its offset and residuals (ns);
    ``alignment``: the clock the tables use (``synced`` or ``global``); ``ranks``: each
    rank's categorized activities (ascending); ``notes``: what a reader must know (cut
    traces, ranks whose clocks are not synced)."""

    microbatches: pa.Table
    category_spans: pa.Table
    sync: ClockSync
    alignment: str
    ranks: list[RankCategories]
    diagnosis: Diagnosis
    notes: list[str] = field(default_factory=list)

    @property
    def clock_offsets(self) -> pa.Table:
        return self.sync.table()

    @property
    def clocks(self) -> str:
        """How the tables' times were put on one clock: :attr:`ClockSync.method`
        ("shifted", "own clocks"), "none" where each rank keeps its own."""
        return (self.sync.method if self.alignment == "synced" and self.sync.linked().any()
                else "none")


def aggregation_of(parts: list[CommPart], alignment: str = "synced",
                   pipeline_groups: list[list[int]] | None = None,
                   diag: Diagnosis | None = None) -> Aggregation:
    """The aggregation of the ranks' ``parts`` (:func:`~.diagnose.waits.comm_part` of
    each rank's table of :data:`READ_COLUMNS`, made in any process; the list is
    consumed), ``pipeline_groups``: the job's PP groups when known (the diagnosis and
    the categories use them); ``diag``: the job's diagnosis where it is known (else
    computed here)."""
    if alignment not in ALIGNMENTS:
        raise TraceVizError(f"alignment {alignment!r}: use one of {', '.join(ALIGNMENTS)}")
    if not parts:
        raise TraceVizError("no rank tables to aggregate")
    # every call's members and wait / transfer on synced clocks, whatever the figures use
    jc = job_comm_of(parts)
    notes = [f"rank {a.rank}: its trace is cut at byte {cut}; what it ran after the cut "
             "is missing" for a in jc.acts
             if (cut := (a.meta.get("stats") or {}).get("truncated_at")) is not None]
    assert jc.sync is not None  # solved here: no offsets were given
    sync = jc.sync
    linked = sync.linked()
    several = len(jc.acts) > 1
    if alignment == "synced" and several and not linked.all():
        unlinked = sync.ranks[~linked].tolist()
        if not linked.any():
            alignment = "global"
            notes.append("clocks not synced: no collective of a known process group "
                         "links the ranks; tables and figures use each rank's own clock")
        else:
            notes.append(f"clocks of ranks {unlinked} not synced (no collective links "
                         "them to another rank): they keep their own clock")
    if several and linked.any():
        notes.append(sync_note(sync))
    diag = diag if diag is not None else diagnosis_of(jc, pipeline_groups)
    pipelines = Pipelines.of(pipeline_groups or [], 0)
    ranks = jc.acts if alignment == "synced" else [own_clock(a) for a in jc.acts]
    del jc
    cats = [categorized(a, pipelines) for a in ranks]
    return Aggregation(microbatches=microbatch_table(ranks), category_spans=category_spans(cats),
                       sync=sync, alignment=alignment, ranks=cats, diagnosis=diag,
                       notes=notes)
