"""An op timeline in memory: one row per timed op as compact numpy columns, sorted by
step, rank and start, and the job's layout per rank (stage, DP rank, TP rank; -1
unknown). ~30 bytes per op."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import TraceVizError
from .ops import op_class, side


@dataclass
class OpTimeline:
    """Rows (ns; ``transfer`` -1: not given; ``microbatch`` -1: none) and per rank
    (index of :attr:`ranks`) its ``stage``, ``dp``, ``tp`` (-1: unknown), with where each
    came from (``layout_from``: "column", "inferred: ..." or "unknown")."""

    names: tuple[str, ...]
    rank: np.ndarray       # int32, global rank
    step: np.ndarray       # int32
    op: np.ndarray         # int16, index of names
    start: np.ndarray      # int64 ns
    dur: np.ndarray        # int64 ns
    microbatch: np.ndarray  # int32
    chunk: np.ndarray      # int16
    transfer: np.ndarray   # int64 ns, -1 not given
    ranks: np.ndarray      # int32, sorted
    stage: np.ndarray      # int32 per rank
    dp: np.ndarray
    tp: np.ndarray
    layout_from: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def classes(self) -> np.ndarray:
        """Per op name its class (:mod:`.ops`)."""
        return np.array([op_class(n) for n in self.names], dtype=np.int8)

    @property
    def sides(self) -> np.ndarray:
        """Per op name the pipeline neighbours it talks to (:mod:`.ops`)."""
        return np.array([side(n) for n in self.names], dtype=np.int8)

    @property
    def rank_index(self) -> np.ndarray:
        """Per row the index of its rank in :attr:`ranks`."""
        return np.searchsorted(self.ranks, self.rank).astype(np.int32)

    @property
    def steps(self) -> np.ndarray:
        return np.unique(self.step)

    def __len__(self) -> int:
        return len(self.rank)

    def take(self, keep: np.ndarray) -> OpTimeline:
        """The rows where ``keep`` (a mask or indices), same layout."""
        return OpTimeline(self.names, self.rank[keep], self.step[keep], self.op[keep],
                          self.start[keep], self.dur[keep], self.microbatch[keep],
                          self.chunk[keep], self.transfer[keep], self.ranks, self.stage,
                          self.dp, self.tp, dict(self.layout_from), list(self.notes))

    @classmethod
    def of(cls, table: pa.Table, notes: list[str] | None = None) -> OpTimeline:
        """From rows of :data:`~traceviz.table.timeline_schema.OP_TIMELINE_SCHEMA`
        (checked values; optional columns may be left out); a rank whose rows give two stages (DP, TP ranks) is an error."""
        if table.num_rows == 0:
            raise TraceVizError("the op timeline has no rows")
        codes = pc.dictionary_encode(table["op"]).combine_chunks()
        names = tuple(codes.dictionary.to_pylist())

        def col(name: str, dtype, fill: int) -> np.ndarray:
            if name not in table.column_names:  # an optional column left out
                return np.full(table.num_rows, fill, dtype=dtype)
            return np.asarray(pc.fill_null(table[name], fill).combine_chunks()
                              .to_numpy(zero_copy_only=False), dtype=dtype)

        rank = col("rank", np.int32, 0)
        step = col("step", np.int32, 0)
        start = col("start_ns", np.int64, 0)
        dur = col("duration_ns", np.int64, 0)
        order = np.lexsort((-dur, start, rank, step))
        ranks = np.unique(rank)
        ri = np.searchsorted(ranks, rank)
        layout, found = {}, {}
        for name, key in (("stage", "stage"), ("dp_rank", "dp"), ("tp_rank", "tp")):
            v = col(name, np.int64, -1)
            per = np.full(len(ranks), -1, dtype=np.int64)
            given = v >= 0
            if given.any():
                lo = np.full(len(ranks), np.iinfo(np.int64).max)
                hi = np.full(len(ranks), -1, dtype=np.int64)
                np.minimum.at(lo, ri[given], v[given])
                np.maximum.at(hi, ri[given], v[given])
                bad = np.flatnonzero((hi >= 0) & (lo != hi))
                if bad.size:
                    r = int(ranks[bad[0]])
                    raise TraceVizError(f"rank {r}: its rows give {name} {int(lo[bad[0]])} "
                                        f"and {int(hi[bad[0]])}: one per rank")
                per = np.where(hi >= 0, hi, -1)
            layout[key] = per.astype(np.int32)
            found[key] = ("column" if (per >= 0).all() else
                          "unknown" if not (per >= 0).any() else "column (some ranks)")
        return cls(names, rank[order], step[order],
                   np.asarray(codes.indices.to_numpy(zero_copy_only=False),
                              dtype=np.int16)[order],
                   start[order], dur[order], col("microbatch", np.int32, -1)[order],
                   col("chunk", np.int16, 0)[order], col("transfer_ns", np.int64, -1)[order],
                   ranks.astype(np.int32), layout["stage"], layout["dp"], layout["tp"],
                   found, list(notes or []))
