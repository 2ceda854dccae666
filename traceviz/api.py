"""The Python API: parse a trace, load a parsed table, read its metadata."""
from __future__ import annotations

from collections.abc import Sequence

import json
import os
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from .classify.patterns import Patterns, load_patterns
from .errors import TraceError
from .parse.budget import MemoryPlan
from .parse.reader import DEFAULT_BUDGET, DEFAULT_CHUNK, jit_loaded, scan_trace
from .parse.table import CPU_ONLY_FIELDS, METADATA_KEY, ParsedTrace, build, keep_alive
from .topology.layout import Layout


def parse_trace(src: str | os.PathLike | BinaryIO, *, cpu: bool = False,
                patterns: Patterns | str | os.PathLike | None = None,
                memory_budget: int = DEFAULT_BUDGET,
                chunk_size: int = DEFAULT_CHUNK, plan: MemoryPlan | None = None,
                topology: Layout | None = None, vpp: int = 1) -> ParsedTrace:
    """Parse one rank's Kineto trace (path, ``"-"`` for stdin, or a binary file object).

    ``memory_budget`` (bytes) bounds the memory of the process during the parse; see
    :mod:`traceviz.parse.budget` for how it is shared (past its shares, column buffers
    spill to a temporary folder and the joins run on parts); ``plan`` gives the shares
    explicitly instead. ``topology`` (the job's layout) resolves process groups the trace
    does not describe; ``vpp`` is the number of model chunks per pipeline stage
    (interleaved schedule). ``chunk_size`` (bytes)
    is the read buffer (it grows to hold any single event larger than it). Raises
    :class:`~traceviz.errors.TraceError` on input that is not a readable Kineto trace; a
    truncated trace is parsed up to the cut and reported in ``ParsedTrace.warnings`` and
    ``meta["stats"]["truncated_at"]``.
    """
    if not isinstance(patterns, Patterns):
        patterns = load_patterns(patterns)
    plan = plan or MemoryPlan.measure(memory_budget, jit_loaded())
    scanned = scan_trace(src, memory_budget=plan.scan_blocks, chunk_size=chunk_size,
                         drop=None if cpu else CPU_ONLY_FIELDS)
    try:
        parsed = build(scanned, patterns, plan, cpu=cpu, topology=topology, vpp=vpp)
    except BaseException:
        scanned.close()
        raise
    return keep_alive(parsed, scanned)


def parse(src: str | os.PathLike | BinaryIO, **kwargs) -> pa.Table:
    """The GPU activity table of one rank's trace (see :func:`parse_trace`)."""
    return parse_trace(src, **kwargs).activities


def load(path: str | os.PathLike, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a table written by ``traceviz parse`` (schema metadata included); only
    ``columns`` when given."""
    try:
        return pq.read_table(path, columns=list(columns) if columns else None)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(os.fspath(path), f"cannot read parquet: {exc}",
                         hint="pass a file written by 'traceviz parse'") from None


def metadata(table: pa.Table) -> dict:
    """The rank-level facts (``traceviz`` schema metadata) of a parsed table."""
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}
