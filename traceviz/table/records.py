"""Rows of an Arrow table as typed records: a frozen dataclass whose fields are the
table's columns, one instance per row (null cells are None)."""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import pyarrow as pa

T = TypeVar("T")


def records(cls: type[T], table: pa.Table) -> tuple[T, ...]:
    """One ``cls`` per row of ``table``, in order; ValueError when the table's columns
    are not exactly ``cls``'s fields (a schema and its record drifted apart)."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if sorted(names) != sorted(table.column_names):
        raise ValueError(f"{cls.__name__} has the fields {names}, the table the columns "
                         f"{table.column_names}")
    rows: list[dict[str, Any]] = table.to_pylist()
    return tuple(cls(**row) for row in rows)
