"""Append-only column stores that stay under a memory budget by spilling to disk.

The scanner writes rows into a store's *active block*, an ``int64`` array of shape
``(fields, rows)`` (a slice of the scanner's ``blocks`` array). When the block is full
the driver *seals* it: each field is cast to its narrow dtype (:data:`.layout.FIELDS`)
and kept as a sealed block. A
:class:`SpillBudget` shared by all stores of one trace counts the bytes of sealed blocks
held in memory; past its limit blocks are appended (one file per store, opened once)
to a private temporary folder and dropped from memory, the least needed stores first
(flow events, then python frames, CPU ops, launches, and GPU activities last).

Later stages read a store block by block (:meth:`ColumnStore.blocks`) or one whole
field at a time (:meth:`ColumnStore.column`), so they never need every field at once.
"""
from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..table.arrays import group_positions, take_into
from ..table.scratch import release, spill_folder
from .budget import MAX_STRINGS
from .fields import FIELDS

# stores spilled first come first; GPU activities stay in memory longest
SPILL_ORDER = ("memory", "flow", "python", "xargs", "ops", "comm", "launch", "gpu")


@dataclass
class Block:
    """One sealed block: ``rows`` rows starting at global row ``start``."""

    start: int
    rows: int
    store: str
    ts_min: int = 0
    ts_max: int = 0
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    spill: SpillFile | None = None  # where the columns went, once spilled
    layout: dict[str, tuple[int, np.dtype]] = field(default_factory=dict)  # name -> (offset, dtype)
    # per field, ``fix(values, block)`` applied on every read: a block of a later part
    # of a split trace, spilled before it was merged, holds that part's string ids,
    # thread indexes, rows (see SpillBudget.fix)
    fixes: dict = field(default_factory=dict)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values())

    def get(self, name: str) -> np.ndarray:
        if self.spill is None:
            values = self.columns[name]
        else:
            offset, dtype = self.layout[name]
            values = self.spill.read(offset, np.dtype(dtype), self.rows)
        fix = self.fixes.get(name)
        return values if fix is None else fix(values, self)


class SpillFile:
    """One store's spill file: arrays appended, read back by byte offset. One open file
    for the whole parse (opening a file per block cost more than the writes)."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "w+b", buffering=0)
        self.size = 0

    def append(self, arr: np.ndarray) -> int:
        """Write ``arr`` at the end; returns its byte offset."""
        offset = self.size
        view = np.ascontiguousarray(arr).data.cast("B")
        self._fh.seek(offset)
        while view:
            view = view[self._fh.write(view):]
        self.size += arr.nbytes
        return offset

    def read(self, offset: int, dtype: np.dtype, count: int) -> np.ndarray:
        """``count`` items of ``dtype`` written at ``offset`` (positional reads: threads
        may read one file at once)."""
        out = np.empty(count, dtype=dtype)
        view = out.data.cast("B")
        while view:
            got = os.preadv(self._fh.fileno(), [view], offset)
            if not got:
                raise OSError(f"spill file {self._fh.name} ends early")
            view, offset = view[got:], offset + got
        return out

    def close(self) -> None:
        self._fh.close()


class SpillBudget:
    """Bytes of sealed blocks held in memory by all stores of one trace.

    ``folder()`` is the private temporary folder (created on first use) shared with
    other spill users of the same trace; :meth:`close` deletes it.
    """

    def __init__(self, budget_bytes: int, max_strings: int = MAX_STRINGS) -> None:
        self.budget = max(int(budget_bytes), 0)
        self.max_strings = max_strings  # the distinct strings the trace's scan keeps
        self._lock = threading.RLock()  # the two scanners of a split trace share it
        self.held = 0
        self.spilled_bytes = 0
        self._held: dict[str, list[Block]] = {name: [] for name in SPILL_ORDER}
        self._files: dict[str, SpillFile] = {}
        self._dir: str | None = None
        self._count = 0

    def folder(self) -> str:
        with self._lock:
            if self._dir is None:
                self._dir = spill_folder()
            return self._dir

    def new_path(self, prefix: str) -> str:
        with self._lock:
            self._count += 1
            return os.path.join(self.folder(), f"{prefix}{self._count}")

    def add(self, block: Block) -> None:
        with self._lock:
            self.held += block.nbytes()
            self._held[block.store].append(block)
            for name in SPILL_ORDER:
                while self.held > self.budget and self._held[name]:
                    self._spill(self._held[name].pop(0))

    def fix(self, block: Block, fixes: dict) -> None:
        """Apply ``fixes`` (per field, ``fix(values, block)``) to ``block``: once, to its
        columns, while it is in memory; on every read once it is spilled."""
        with self._lock:  # not spilled meanwhile by a scanner of a later part
            if block.spill is None:
                for name, fix in fixes.items():
                    if name in block.columns:
                        block.columns[name] = fix(block.columns[name], block)
            else:
                block.fixes = fixes

    def coalesce(self, blocks: list[Block], rows: int) -> None:
        """Join neighbours of ``blocks`` (one store's, in row order) that are both in
        memory and both fixed into blocks of up to ``rows`` rows, in place: a store
        scanned in many parts ends in many small blocks, and every pass over a store
        costs per block."""
        with self._lock:
            out: list[Block] = []
            for block in blocks:
                prev = out[-1] if out else None
                if (prev is None or prev.spill is not None or block.spill is not None
                        or prev.fixes or block.fixes or prev.rows + block.rows > rows):
                    out.append(block)
                    continue
                joined = Block(start=prev.start, rows=prev.rows + block.rows,
                               store=block.store, ts_min=min(prev.ts_min, block.ts_min),
                               ts_max=max(prev.ts_max, block.ts_max),
                               columns={k: np.concatenate([v, block.columns[k]])
                                        for k, v in prev.columns.items()})
                held = self._held[block.store]  # by identity: blocks compare by value
                held[next(k for k, b in enumerate(held) if b is prev)] = joined
                del held[next(k for k, b in enumerate(held) if b is block)]
                out[-1] = joined
            blocks[:] = out

    def spill_all(self) -> None:
        """Spill every block still held in memory."""
        with self._lock:
            for name in SPILL_ORDER:
                while self._held[name]:
                    self._spill(self._held[name].pop(0))

    def _spill(self, block: Block) -> None:
        if block.store not in self._files:
            self._files[block.store] = SpillFile(self.new_path(block.store))
        file = self._files[block.store]
        size = block.nbytes()
        for name, arr in block.columns.items():
            block.layout[name] = (file.append(arr), arr.dtype)
        block.columns = {}
        block.spill = file
        self.held -= size
        self.spilled_bytes += size

    def close(self) -> None:
        """Delete the spill folder (idempotent)."""
        for file in self._files.values():
            file.close()
        self._files.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            release(self._dir)
            self._dir = None


class ColumnStore:
    """Rows of one event class, built block by block by the scanner."""

    def __init__(self, store: str, block: np.ndarray, budget: SpillBudget,
                 drop: tuple[str, ...] = ()) -> None:
        """``block`` is this store's active block: ``(>= fields, rows)`` int64. Fields
        in ``drop`` are not kept when a block is sealed (reading them fails)."""
        self.name = store
        self.fields = FIELDS[store]
        self.drop = frozenset(drop)
        self.dtypes = dict(self.fields)
        self.block = block
        self.budget = budget
        self.sealed: list[Block] = []
        self.rows = 0  # rows in sealed blocks
        self._ts = next((k for k, (f, _) in enumerate(self.fields) if f == "ts"), None)

    def seal(self, fill: int) -> None:
        """Move the first ``fill`` rows of the active block into a sealed block."""
        if fill <= 0:
            return
        block = Block(start=self.rows, rows=fill, store=self.name)
        for k, (name, dtype) in enumerate(self.fields):
            if name not in self.drop:
                block.columns[name] = self.block[k, :fill].astype(dtype)
        if self._ts is not None:
            block.ts_min = int(self.block[self._ts, :fill].min())
            block.ts_max = int(self.block[self._ts, :fill].max())
        self.sealed.append(block)
        self.rows += fill
        self.budget.add(block)

    def append(self, columns: dict[str, np.ndarray]) -> None:
        """Add rows after the scan as one sealed block (fields not given are -1)."""
        n = len(next(iter(columns.values())))
        if n == 0:
            return
        block = Block(start=self.rows, rows=n, store=self.name)
        for name, dtype in self.fields:
            if name not in self.drop:
                block.columns[name] = np.asarray(columns.get(name, np.full(n, -1)), dtype)
        if self._ts is not None:
            block.ts_min = int(columns["ts"].min())
            block.ts_max = int(columns["ts"].max())
        self.sealed.append(block)
        self.rows += n
        self.budget.add(block)

    def blocks(self, *names: str) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``(first global row, {field: array})`` per sealed block, in row order."""
        for block in self.sealed:
            yield block.start, {name: block.get(name) for name in names}

    def column(self, name: str) -> np.ndarray:
        """One field over all rows."""
        parts = [block.get(name) for block in self.sealed]
        if not parts:
            return np.empty(0, dtype=self.dtypes[name])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def gather(self, name: str, rows: np.ndarray) -> np.ndarray:
        """``field[rows]`` (rows < 0 give -1), loading one block at a time."""
        return self.gatherer(rows)(name)

    def gatherer(self, rows: np.ndarray):
        """A function ``name -> field[rows]`` that groups ``rows`` by block only once.

        It keeps ``rows`` and one int32 (int64 past 2**31 rows) array of the positions
        of the valid rows, grouped by block; nothing else of their length is made.
        """
        positions, bounds = group_positions(rows, np.array([b.start for b in self.sealed],
                                                           dtype=np.int64))
        n = rows.shape[0]

        def get(name: str) -> np.ndarray:
            out = np.full(n, -1, dtype=self.dtypes[name])
            for k, block in enumerate(self.sealed):
                lo, hi = bounds[k], bounds[k + 1]
                if lo < hi:
                    take_into(out, positions[lo:hi], rows, block.get(name), block.start)
            return out

        return get

    def ts_range(self) -> tuple[int, int]:
        if not self.sealed:
            return 0, 0
        return (min(b.ts_min for b in self.sealed), max(b.ts_max for b in self.sealed))

    def __len__(self) -> int:
        return self.rows

