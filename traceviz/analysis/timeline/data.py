"""An op timeline in memory: one row per timed op as compact numpy columns, sorted by
step, rank and start, and the job's layout per rank (stage, DP rank, TP rank; -1
unknown). ~26 bytes per op (34 with transfers given)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import TraceVizError
from .ops import op_class, side

# an op column's names (see first_uses): its dictionary, each row's index, used in order
Uses = tuple[list[str], np.ndarray, np.ndarray]


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
    microbatch: np.ndarray  # int16
    chunk: np.ndarray      # int16
    transfer: np.ndarray | None  # int64 ns, -1 not given (None: none given)
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

    @property
    def chunks(self) -> int:
        """Model chunks per stage (the largest chunk + 1; 1 without rows)."""
        return int(self.chunk.max()) + 1 if len(self) else 1

    @property
    def microbatch_slots(self) -> int:
        """The largest micro-batch + 1 (0: no row has one)."""
        return int(self.microbatch.max()) + 1 if len(self) and self.microbatch.max() >= 0 \
            else 0

    def __len__(self) -> int:
        return len(self.rank)

    @classmethod
    def without_rows(cls, names: tuple[str, ...], ranks: np.ndarray, stage: np.ndarray,
                     dp: np.ndarray, tp: np.ndarray, layout_from: dict[str, str],
                     notes: list[str]) -> OpTimeline:
        """An op timeline of these ranks' layout and op names, holding no op."""
        z = (lambda dtype: np.zeros(0, dtype))  # noqa: E731
        return cls(names, z(np.int32), z(np.int32), z(np.int16), z(np.int64),
                   z(np.int64), z(np.int16), z(np.int16), None, ranks, stage, dp, tp,
                   dict(layout_from), list(notes))

    @classmethod
    def of(cls, table: pa.Table, notes: list[str] | None = None) -> OpTimeline:
        """From rows of :data:`~traceviz.table.timeline_schema.OP_TIMELINE_SCHEMA`
        (checked values; optional columns may be left out); a rank whose rows give two
        stages (DP, TP ranks) is an error."""
        builder = TimelineBuilder()
        builder.add(table)
        return builder.build(list(notes or []))


MAX_STEPS = 100_000   # steps one diagnosis takes (each is re-simulated on its own)
MAX_CHUNKS = 1024     # model chunks per stage (keys and schedules stay small)
# the largest stage, DP and TP rank + 1 (far above any job's; tables are sized by them)
LIMITS = {"stage": 1 << 16, "dp_rank": 1 << 20, "tp_rank": 1 << 12}


class TimelineBuilder:
    """An op timeline gathered a batch of rows at a time (each kept as compact columns,
    the batch's Arrow memory released), sorted once at :meth:`build`."""

    def __init__(self, max_names: int = 1 << 15, capacity: int | None = None,
                 names: tuple[str, ...] | None = None) -> None:
        """``capacity``: the rows to come, where known (the columns are then filled in
        place, never held twice); ``names``: the op names (their codes: their places)
        when the whole timeline's are known, a block of it being read (no other may
        come)."""
        self.max_names = max_names
        self.capacity = capacity
        self.filled: dict[str, np.ndarray] = {}
        self.names: dict[str, int] = {x: i for i, x in enumerate(names or ())}
        self.fixed = names is not None
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "rank", "step", "op", "start", "dur", "microbatch", "chunk", "transfer")}
        self.layout: dict[str, dict[int, tuple[int, int]]] = {
            "stage": {}, "dp_rank": {}, "tp_rank": {}}
        self.rows = 0
        self.given_transfer = False

    def add(self, table: pa.Table, where: object = "") -> Uses | None:
        """A batch of checked rows (optional columns may be left out or null); its op
        names' first uses (see :func:`first_uses`), None for no rows."""
        n = table.num_rows
        if not n:
            return None

        def col(name: str, dtype, fill: int) -> np.ndarray:
            if name not in table.column_names:
                return np.full(n, fill, dtype=dtype)
            return np.asarray(pc.fill_null(table[name], fill).combine_chunks()
                              .to_numpy(zero_copy_only=False), dtype=dtype)

        uses = first_uses(table["op"])
        local, index, used = uses
        new = [local[c] for c in used if local[c] not in self.names]
        if new and self.fixed:
            raise TraceVizError(f"{where}: op {new[0]!r} was not there when the "
                                "timeline was first read: it changed meanwhile; run again")
        check_names(len(self.names) + len(new), where, self.max_names)
        mapping = np.zeros(len(local), dtype=np.int16)
        for c in used.tolist():  # named in the order they are first used: codes alike
            mapping[c] = self.names.setdefault(local[c], len(self.names))  # however read
        self._put("op", mapping[index] if len(local) else np.zeros(n, np.int16))
        rank = col("rank", np.int32, 0)
        self._put("rank", rank)
        self._put("step", col("step", np.int32, 0))
        self._put("start", col("start_ns", np.int64, 0))
        self._put("dur", col("duration_ns", np.int64, 0))
        mb = col("microbatch", np.int64, -1)
        if mb.max() >= 1 << 15:
            raise TraceVizError(f"{where}: micro-batch {int(mb.max())}: at most 32,767")
        self._put("microbatch", mb.astype(np.int16))
        chunk = col("chunk", np.int64, 0)
        if chunk.max() >= MAX_CHUNKS:
            raise TraceVizError(f"{where}: chunk {int(chunk.max())}: model chunks per "
                                f"stage are fewer than {MAX_CHUNKS}")
        self._put("chunk", chunk.astype(np.int16))
        tr = col("transfer_ns", np.int64, -1)
        if (tr >= 0).any() and not self.given_transfer:  # the rows before: none given
            self.given_transfer = True
            self._put("transfer", np.full(self.rows, -1, dtype=np.int64), at=0)
        if self.given_transfer:
            self._put("transfer", tr)
        for name, seen in self.layout.items():
            v = col(name, np.int64, -1)
            given = v >= 0
            if not given.any():
                continue
            if v.max() >= LIMITS[name]:  # tables are sized by them
                i = int(np.argmax(v))
                raise TraceVizError(f"{where}: rank {int(rank[i])}: {name} {int(v[i])}: "
                                    f"at most {LIMITS[name] - 1:,}")
            order = np.lexsort((v[given], rank[given]))
            r, x = rank[given][order], v[given][order]
            cut = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
            lo = x[cut]
            hi = x[np.r_[cut[1:] - 1, len(x) - 1]]
            see_layout(seen, r[cut], lo, hi, name, where)
        self.rows += n
        return uses

    def _put(self, name: str, values: np.ndarray, at: int | None = None) -> None:
        """A batch's column: copied into place (capacity known) or kept as a part (a copy,
        never a view of the batch's Arrow memory)."""
        at = self.rows if at is None else at
        if self.capacity is not None and at + len(values) <= self.capacity:
            if name not in self.filled:
                try:
                    self.filled[name] = np.empty(self.capacity, dtype=values.dtype)
                except MemoryError:  # a footer claiming more rows than memory holds
                    self.capacity = None
                    self._put(name, values, at)
                    return
            self.filled[name][at:at + len(values)] = values
        else:
            if name in self.filled:  # more rows than announced: the rest as parts
                self.parts[name].append(self.filled.pop(name)[:at])
            self.parts[name].append(np.array(values, copy=True))

    def build(self, notes: list[str]) -> OpTimeline:
        """The timeline, sorted by step, rank, start and longest first."""
        if not self.rows:
            raise TraceVizError("the op timeline has no rows")
        steps = self.filled.get("step")
        steps = steps[:self.rows] if steps is not None else np.concatenate(
            self.parts["step"])
        lo, hi = int(steps.min()), int(steps.max())
        check_steps(int(np.count_nonzero(np.bincount(steps - lo))) if hi - lo < 1 << 24
                    else len(np.unique(steps)))
        del steps
        cat = {}
        for k in list(self.parts):  # one column at a time: its parts freed as it is made
            parts = self.parts.pop(k)
            if k in self.filled:
                cat[k] = self.filled.pop(k)[:self.rows]
            elif parts:
                cat[k] = np.concatenate(parts) if len(parts) > 1 else parts[0]
            else:
                cat[k] = np.zeros(0)
            del parts
        rank, step, start, dur = cat["rank"], cat["step"], cat["start"], cat["dur"]
        top = int(rank.max())
        ranks = (np.flatnonzero(np.bincount(rank, minlength=top + 1)) if top < 1 << 22
                 else np.unique(rank))  # (no sorted copy of the column)
        if not _is_sorted(step, rank, start, dur):
            order = _order(step, rank, start, dur)
            del rank, step, start, dur  # each old column freed once reordered
            for k in cat:  # one column at a time
                if len(cat[k]) == self.rows:
                    cat[k] = cat[k][order]
            del order
        layout, found = rank_layout(self.layout, ranks)
        names = [""] * len(self.names)
        for x, i in self.names.items():
            names[i] = x
        return OpTimeline(tuple(names), cat["rank"], cat["step"], cat["op"], cat["start"],
                          cat["dur"], cat["microbatch"], cat["chunk"],
                          cat["transfer"] if self.given_transfer else None,
                          ranks.astype(np.int32), layout["stage"], layout["dp"],
                          layout["tp"], found, notes)


def check_steps(count: int) -> None:
    """An error where a timeline holds more than :data:`MAX_STEPS` steps."""
    if count > MAX_STEPS:
        raise TraceVizError(f"{count:,} steps, more than {MAX_STEPS:,}: diagnose a "
                            "range of them (a folder split per step: name part of it)")


def check_names(count: int, where: object, most: int) -> None:
    """An error where a timeline holds more than ``most`` distinct op names."""
    if count > most:
        raise TraceVizError(f"{where}: more than {most:,} distinct op names: "
                            "not an op timeline of timers")


def first_uses(ops: pa.ChunkedArray | pa.Array) -> Uses:
    """The op names of a column as (its dictionary's names, each row's index into them,
    the indexes used, in the order of the row that first uses each): a dictionary may
    hold names no row of this batch uses (a parquet row group's, read a batch at a
    time)."""
    codes = pc.dictionary_encode(ops).combine_chunks()
    index = np.asarray(codes.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    used, first = np.unique(index, return_index=True)
    return (codes.dictionary.to_pylist(), index,
            used[np.argsort(first, kind="stable")])


def see_layout(seen: dict[int, tuple[int, int]], ranks: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, name: str, where: object) -> None:
    """Each of ``ranks``' lowest and highest ``name`` (stage, DP or TP rank) added to
    what ``seen`` holds of it; two values for one rank are an error naming ``where``."""
    for rr, a, b in zip(ranks.tolist(), lo.tolist(), hi.tolist()):
        a0, b0 = seen.get(rr, (a, b))
        a, b = min(a, a0), max(b, b0)
        if a != b:
            raise TraceVizError(f"{where}: rank {rr}: its rows give {name} {a} and "
                                f"{b}: one per rank")
        seen[rr] = (a, b)


def rank_layout(layout: dict[str, dict[int, tuple[int, int]]], ranks: np.ndarray
                ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Per rank of ``ranks`` its stage, DP and TP rank (-1: unknown) from what the rows
    gave (``layout``: :func:`see_layout`'s, by column), and where each came from."""
    out, found = {}, {}
    for name, key in (("stage", "stage"), ("dp_rank", "dp"), ("tp_rank", "tp")):
        seen = layout[name]
        per = np.array([seen.get(int(r), (-1, -1))[0] for r in ranks], dtype=np.int32)
        out[key] = per
        found[key] = ("column" if (per >= 0).all() else
                      "unknown" if not (per >= 0).any() else "column (some ranks)")
    return out, found


@nb.njit(cache=True)
def _is_sorted(step, rank, start, dur):  # pragma: no cover (compiled)
    """Whether the rows are in (step, rank, start, longest first) order already."""
    for i in range(1, len(step)):
        if step[i] != step[i - 1]:
            if step[i] < step[i - 1]:
                return False
            continue
        if rank[i] != rank[i - 1]:
            if rank[i] < rank[i - 1]:
                return False
            continue
        if start[i] < start[i - 1] or (start[i] == start[i - 1] and dur[i] > dur[i - 1]):
            return False
    return True


def _order(step, rank, start, dur) -> np.ndarray:
    """The rows' order by (step, rank, start, longest first), as int32 (rows < 2^31): a
    counting sort by step, then each step's rows sorted on their own (a step's memory)."""
    lo, hi = int(step.min()), int(step.max())
    if hi - lo < 1 << 24:  # steps as offsets (no copy of the column sorted)
        order, counts = _by_key(step, lo, hi - lo + 1)
    else:
        steps, inverse = np.unique(step, return_inverse=True)
        order, counts = _by_key(inverse.astype(np.int64), 0, len(steps))
        del inverse
    at = 0
    for c in counts.tolist():
        part = order[at:at + c]
        local = np.lexsort((-dur[part], start[part], rank[part]))
        order[at:at + c] = part[local]
        at += c
    return order


@nb.njit(cache=True)
def _by_key(key, lo, n):  # pragma: no cover (compiled)
    """A stable counting sort of ``key`` (lo..lo+n-1): the rows' order (int32) and the
    rows per key."""
    counts = np.zeros(n + 1, dtype=np.int64)
    for k in key:
        counts[k - lo + 1] += 1
    per = counts[1:].copy()
    for i in range(n):
        counts[i + 1] += counts[i]
    order = np.empty(len(key), dtype=np.int32)
    for i in range(len(key)):
        j = key[i] - lo
        order[counts[j]] = i
        counts[j] += 1
    return order, per
