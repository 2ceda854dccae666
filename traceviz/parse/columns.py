"""Append-only column stores that stay under a memory budget by spilling to disk.

The scanner writes rows into a store's *active block*, an ``int64`` array of shape
``(fields, block_rows)``. When the block is full the driver *seals* it: each field is
cast to its narrow dtype (:data:`.layout.FIELDS`) and kept as a sealed block. A
:class:`SpillBudget` shared by all stores of one trace counts the bytes of sealed blocks
held in memory; past the budget the oldest sealed blocks are written to ``.npy`` files
in a private temporary folder and dropped from memory. :meth:`ColumnStore.column` reads
one field back across all blocks, so later stages can work column by column.

Memory held while scanning = active blocks (a few MB per store) + sealed blocks in
memory (<= budget).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .layout import FIELDS


@dataclass
class _Block:
    rows: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    path: str | None = None  # folder of the spilled .npy files

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values())


class SpillBudget:
    """Bytes of sealed blocks held in memory by all stores of one trace."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = max(int(budget_bytes), 0)
        self.held = 0
        self.spilled_bytes = 0
        self._queue: deque[_Block] = deque()
        self._dir: str | None = None
        self._count = 0

    def add(self, block: _Block) -> None:
        self.held += block.nbytes()
        self._queue.append(block)
        while self.held > self.budget and self._queue:
            self._spill(self._queue.popleft())

    def _spill(self, block: _Block) -> None:
        if block.path is not None or not block.columns:
            return
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="traceviz-spill-")
        path = os.path.join(self._dir, f"b{self._count}")
        self._count += 1
        os.mkdir(path)
        size = block.nbytes()
        for name, arr in block.columns.items():
            np.save(os.path.join(path, name + ".npy"), arr, allow_pickle=False)
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

    def __init__(self, store: str, block_rows: int, budget: SpillBudget) -> None:
        self.name = store
        self.fields = FIELDS[store]
        self.block = np.empty((len(self.fields), block_rows), dtype=np.int64)
        self.budget = budget
        self.blocks: list[_Block] = []
        self.rows = 0  # rows in sealed blocks

    def seal(self, fill: int) -> None:
        """Move the first ``fill`` rows of the active block into a sealed block."""
        if fill <= 0:
            return
        block = _Block(rows=fill)
        for k, (name, dtype) in enumerate(self.fields):
            block.columns[name] = self.block[k, :fill].astype(dtype)
        self.blocks.append(block)
        self.rows += fill
        self.budget.add(block)

    def column(self, name: str) -> np.ndarray:
        """One field over all sealed rows, in insertion order."""
        dtype = dict(self.fields)[name]
        parts = []
        for block in self.blocks:
            if block.path is None:
                parts.append(block.columns[name])
            else:
                parts.append(np.load(os.path.join(block.path, name + ".npy")))
        if not parts:
            return np.empty(0, dtype=dtype)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def __len__(self) -> int:
        return self.rows
