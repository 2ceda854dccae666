"""Append-only column stores that stay under a memory budget by spilling to disk.

The scanner writes rows into a store's *active block*, an ``int64`` array of shape
``(fields, rows)`` (a slice of the scanner's ``blocks`` array). When the block is full the driver *seals* it: each field is
cast to its narrow dtype (:data:`.layout.FIELDS`) and kept as a sealed block. A
:class:`SpillBudget` shared by all stores of one trace counts the bytes of sealed blocks
held in memory; past its limit blocks are written (one file per block) to a private
temporary folder and dropped from memory, the least needed stores first (flow events,
then python frames, CPU ops, launches, and GPU activities last).

Later stages read a store block by block (:meth:`ColumnStore.blocks`) or one whole
field at a time (:meth:`ColumnStore.column`), so they never need every field at once.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .layout import FIELDS

# stores spilled first come first; GPU activities stay in memory longest
SPILL_ORDER = ("flow", "python", "ops", "comm", "launch", "gpu")


@dataclass
class Block:
    """One sealed block: ``rows`` rows starting at global row ``start``."""

    start: int
    rows: int
    store: str
    ts_min: int = 0
    ts_max: int = 0
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    path: str | None = None  # the spill file: every column, one after the other
    layout: dict[str, tuple[int, np.dtype]] = field(default_factory=dict)  # name -> (offset, dtype)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values())

    def get(self, name: str) -> np.ndarray:
        if self.path is None:
            return self.columns[name]
        offset, dtype = self.layout[name]
        return np.fromfile(self.path, dtype=dtype, count=self.rows, offset=offset)


class SpillBudget:
    """Bytes of sealed blocks held in memory by all stores of one trace.

    ``folder()`` is the private temporary folder (created on first use) shared with
    other spill users of the same trace; :meth:`close` deletes it.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget = max(int(budget_bytes), 0)
        self.held = 0
        self.spilled_bytes = 0
        self._held: dict[str, list[Block]] = {name: [] for name in SPILL_ORDER}
        self._dir: str | None = None
        self._count = 0

    def folder(self) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="traceviz-spill-")
        return self._dir

    def new_path(self, prefix: str) -> str:
        self._count += 1
        return os.path.join(self.folder(), f"{prefix}{self._count}")

    def add(self, block: Block) -> None:
        self.held += block.nbytes()
        self._held[block.store].append(block)
        for name in SPILL_ORDER:
            while self.held > self.budget and self._held[name]:
                self._spill(self._held[name].pop(0))

    def spill_all(self) -> None:
        """Spill every block still held in memory."""
        for name in SPILL_ORDER:
            while self._held[name]:
                self._spill(self._held[name].pop(0))

    def _spill(self, block: Block) -> None:
        path = self.new_path("b")
        size = block.nbytes()
        offset = 0
        with open(path, "wb") as fh:
            for name, arr in block.columns.items():
                arr.tofile(fh)
                block.layout[name] = (offset, arr.dtype)
                offset += arr.nbytes
        block.columns = {}
        block.path = path
        self.held -= size
        self.spilled_bytes += size

    def close(self) -> None:
        """Delete the spill folder (idempotent)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class ColumnStore:
    """Rows of one event class, built block by block by the scanner."""

    def __init__(self, store: str, block: np.ndarray, budget: SpillBudget) -> None:
        """``block`` is this store's active block: ``(>= fields, rows)`` int64."""
        self.name = store
        self.fields = FIELDS[store]
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
            block.columns[name] = self.block[k, :fill].astype(dtype)
        if self._ts is not None:
            block.ts_min = int(self.block[self._ts, :fill].min())
            block.ts_max = int(self.block[self._ts, :fill].max())
        self.sealed.append(block)
        self.rows += fill
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

        It keeps ``rows`` and one int32/int64 array of the same length (the positions of
        the valid rows, grouped by block).
        """
        valid = np.flatnonzero(rows >= 0)
        starts = np.array([b.start for b in self.sealed], dtype=np.int64)
        which = np.searchsorted(starts, rows[valid], side="right") - 1
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(self.sealed) + 1))
        pos_type = np.int32 if rows.shape[0] < 2**31 else np.int64
        positions = valid[order].astype(pos_type)  # valid positions, grouped by block
        del valid, which, order
        n = rows.shape[0]

        def get(name: str) -> np.ndarray:
            out = np.full(n, -1, dtype=self.dtypes[name])
            for k, block in enumerate(self.sealed):
                lo, hi = bounds[k], bounds[k + 1]
                if lo < hi:
                    sel = positions[lo:hi]
                    out[sel] = block.get(name)[rows[sel] - block.start]
            return out

        return get

    def ts_range(self) -> tuple[int, int]:
        if not self.sealed:
            return 0, 0
        return (min(b.ts_min for b in self.sealed), max(b.ts_max for b in self.sealed))

    def __len__(self) -> int:
        return self.rows
