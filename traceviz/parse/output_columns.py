"""The columns of an output table, built one at a time under a memory bound.

Columns stay in memory while they fit in ``spill_bytes``; a column that does not fit is
written to an Arrow IPC file as row-group-sized batches and dropped from memory. Writing
parquet then reads one row group of every spilled column at a time. So a table larger
than memory is never held whole (unless :meth:`OutputColumns.table` is asked for it),
and only the columns past the bound pay for the round trip through the disk.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..table.io import parquet_sink, writer_options
from .columns import SpillBudget
from .text_store import TextDictionary

ROW_GROUP = 1 << 17
MIN_ROW_GROUP = 1 << 12
# bytes of texts the dictionaries of one written piece of a row group hold at most (and
# one text): a row group whose every row has its own name (2 M distinct kernel names of
# ~210 bytes) would hold 27 MB of them, and writing one takes ~3x that
GROUP_TEXT_BYTES = 8 << 20


def row_group_for(rows: int, text_bytes: int) -> int:
    """Rows per row group of a table of ``rows`` rows over a trace with ``text_bytes``
    bytes of distinct texts: :data:`ROW_GROUP`, fewer (down to :data:`MIN_ROW_GROUP`)
    where the texts per row, on average, would fill a row group past
    :data:`GROUP_TEXT_BYTES`. (Where they are not spread evenly, a group is written in
    pieces: :meth:`OutputColumns._pieces`; sized by the average, the group's columns read
    at once stay small too: without it 2 M distinct names peaked at 464 MB, not 409.)"""
    if text_bytes * ROW_GROUP <= GROUP_TEXT_BYTES * rows:
        return ROW_GROUP
    return max(MIN_ROW_GROUP, GROUP_TEXT_BYTES * rows // text_bytes)


class OutputColumns:
    """Named columns of ``n_rows`` rows plus the table's schema metadata."""

    def __init__(self, n_rows: int, budget: SpillBudget, spill_bytes: int,
                 row_group: int = ROW_GROUP, names: tuple[str, ...] | None = None,
                 release=None) -> None:
        """``names``: the schema's column order (default: the order columns are added).
        ``release()`` is called after each row group of a spilled column is written (the
        build's parked arrays hand their pages back: :mod:`traceviz.table.parked`)."""
        self.n_rows = n_rows
        self.names = names
        self.budget = budget
        self.spill_bytes = spill_bytes
        self.row_group = row_group
        self.metadata: dict[bytes, bytes] = {}
        self._fields: list[pa.Field] = []
        self._memory: dict[str, pa.Array] = {}
        self._files: dict[str, str] = {}
        self._texts: dict[str, TextDictionary] = {}  # dictionaries kept in a text store
        self._held = 0  # bytes of the columns kept in memory
        self._release = release or (lambda: None)
        self._adding = threading.Lock()  # columns may be added from two threads

    def add(self, name: str, array: pa.Array | TextDictionary) -> None:
        """Add a column (a :class:`TextDictionary`: its indices are held or spilled, its
        texts made per row group)."""
        if len(array) != self.n_rows:
            raise ValueError(f"column {name} has {len(array)} rows, expected {self.n_rows}")
        with self._adding:
            self._fields.append(pa.field(name, array.type))
            if isinstance(array, TextDictionary):
                self._texts[name] = array
                array = array.indices
            if self._held + array.nbytes > self.spill_bytes:
                self._spill(name, array)
            else:
                self._memory[name] = array
                self._held += array.nbytes

    def _spill(self, name: str, array: pa.Array) -> None:
        path = self.budget.new_path("c") + ".arrow"
        schema = pa.schema([pa.field(name, array.type)])
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for lo in range(0, max(self.n_rows, 1), self.row_group):
                writer.write_batch(pa.record_batch([array.slice(lo, self.row_group)],
                                                   schema=schema))
                self._release()
        self._files[name] = path

    @property
    def schema(self) -> pa.Schema:
        fields = self._fields
        if self.names is not None:
            rank = {name: k for k, name in enumerate(self.names)}
            fields = sorted(fields, key=lambda f: rank.get(f.name, len(rank)))
        return pa.schema(fields, metadata=self.metadata)

    def _pieces(self, k: int, schema: pa.Schema) -> Iterator[pa.Table]:
        """Row group ``k`` of the columns of ``schema``, as tables: one, or as many as
        keep their text dictionaries within :data:`GROUP_TEXT_BYTES` (cut where the
        texts each row is the first to use add up to it: a trace's distinct names may
        be in every row, or all in the rows before a fold of strings, or in a burst)."""
        raw = []
        for f in schema:
            if f.name in self._memory:
                raw.append(self._memory[f.name].slice(k * self.row_group, self.row_group))
            else:
                with pa.OSFile(self._files[f.name], "rb") as src:
                    raw.append(pa.ipc.open_file(src).get_batch(k).column(0))
        texts = [self._texts.get(f.name) for f in schema]
        rows = len(raw[0]) if raw else 0
        new = np.zeros(rows, dtype=np.int64)  # dictionary bytes each row brings
        for t, part in zip(texts, raw):
            if t is not None:
                new += t.new_bytes(part)
        held = np.cumsum(new)
        cuts = np.searchsorted(held, np.arange(GROUP_TEXT_BYTES, held[-1] if rows else 0,
                                               GROUP_TEXT_BYTES))
        edges = np.unique(np.concatenate([[0], cuts, [rows]])).tolist()
        for lo, hi in zip(edges, edges[1:] or [0]):
            yield pa.Table.from_arrays([part.slice(lo, hi - lo) if t is None
                                        else t.part(part.slice(lo, hi - lo))
                                        for t, part in zip(texts, raw)], schema=schema)

    def n_groups(self) -> int:
        return max(1, -(-self.n_rows // self.row_group))

    def table(self, columns: tuple[str, ...] | None = None) -> pa.Table:
        """The table in memory: every column, or those of ``columns`` it has."""
        schema = self.schema
        if columns is not None:
            schema = pa.schema([f for f in schema if f.name in columns],
                               metadata=schema.metadata)
        if not self._files:
            return pa.Table.from_arrays([self._texts[f.name].whole() if f.name in self._texts
                                         else self._memory[f.name] for f in schema],
                                        schema=schema)
        return pa.concat_tables(piece for k in range(self.n_groups())
                                for piece in self._pieces(k, schema))

    def write_parquet(self, dest: str) -> None:
        """Write to ``dest`` (a path written atomically, or ``-`` for stdout)."""
        schema = self.schema
        with parquet_sink(dest) as sink, pq.ParquetWriter(sink, schema,
                                                          **writer_options(schema)) as writer:
            for k in range(self.n_groups()):
                for piece in self._pieces(k, schema):
                    writer.write_table(piece, row_group_size=self.row_group)

    def close(self) -> None:
        for path in self._files.values():
            if os.path.exists(path):
                os.unlink(path)
        self._files.clear()
        self._memory.clear()
        self._texts.clear()
