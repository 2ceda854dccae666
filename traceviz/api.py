"""The Python API: parse a trace, load a parsed table, read its metadata."""
from __future__ import annotations

import json
import os
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from .classify.patterns import Patterns, load_patterns
from .errors import TraceError
from .parse.reader import DEFAULT_BUDGET, DEFAULT_CHUNK, scan_trace
from .parse.table import METADATA_KEY, ParsedTrace, build


def parse_trace(src: str | os.PathLike | BinaryIO, *, cpu: bool = False,
                patterns: Patterns | str | os.PathLike | None = None,
                memory_budget: int = DEFAULT_BUDGET,
                chunk_size: int = DEFAULT_CHUNK) -> ParsedTrace:
    """Parse one rank's Kineto trace (path, ``"-"`` for stdin, or a binary file object).

    ``memory_budget`` (bytes) bounds the column buffers held in memory; past it they
    spill to a temporary folder; ``chunk_size`` (bytes) is the read buffer (it grows to
    hold any single event larger than it). Raises :class:`~traceviz.errors.TraceError` on input that
    is not a readable Kineto trace; a truncated trace is parsed up to the cut and
    reported in ``ParsedTrace.warnings`` and ``meta["stats"]["truncated_at"]``.
    """
    if not isinstance(patterns, Patterns):
        patterns = load_patterns(patterns)
    scanned = scan_trace(src, memory_budget=memory_budget, chunk_size=chunk_size)
    try:
        return build(scanned, patterns, cpu=cpu)
    finally:
        scanned.close()


def parse(src: str | os.PathLike | BinaryIO, **kwargs) -> pa.Table:
    """The GPU activity table of one rank's trace (see :func:`parse_trace`)."""
    return parse_trace(src, **kwargs).activities


def load(path: str | os.PathLike) -> pa.Table:
    """Read a table written by ``traceviz parse`` (schema metadata included)."""
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(os.fspath(path), f"cannot read parquet: {exc}",
                         hint="pass a file written by 'traceviz parse'") from None


def metadata(table: pa.Table) -> dict:
    """The rank-level facts (``traceviz`` schema metadata) of a parsed table."""
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}
