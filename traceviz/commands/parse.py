"""``traceviz parse``: one rank's trace into its GPU activity table (and CPU table).

The tables are written from their spillable columns (:mod:`traceviz.parse.output_columns`)
without ever being whole in memory: the result's one export writes them (the table and,
with ``cpu``, the CPU table next to it, both or neither)."""
from __future__ import annotations

import os

from ..errors import TraceVizError, UsageError
from ..ingest.build import ParsedTrace, parse_trace
from ..ingest.discover import is_trace_name
from ..ingest.outputs import default_path, trace_stem
from ..ingest.topology import from_file
from ..parse.header import rank_in_name
from ..table.result import Result


def default_output(trace: str) -> str:
    """``traceviz-out/<name>/<name>.parquet`` for ``TRACE`` (its name without extension;
    see :mod:`traceviz.ingest.outputs`): the table ``traceviz batch TRACE`` (and every
    command given the trace) writes and reuses."""
    return str(default_path(trace, f"{trace_stem(os.path.basename(trace))}.parquet"))


def check_output(output: str) -> None:
    """Refuse, before any work, an output named like a trace (``-o b.json.gz``): the
    table is parquet, and a trace of that name would be written over."""
    if output != "-" and is_trace_name(os.path.basename(output)):
        raise UsageError(f"-o {output}: names a trace file; traceviz parse writes a parquet "
                         "table: name a .parquet file")


def run(trace: str, output: str, *, cpu: bool = False, patterns: str | None = None,
        memory_budget: int = 512 << 20, topology_file: str | None = None,
        vpp: int | None = None, warn_floor: bool = False, strict: bool = False) -> Result:
    """Parse ``trace``; the result exports its table as ``output`` (``-``: stdout, which
    :func:`write_stdout` writes). ``notes``: the parse's warnings; ``value``: the
    :class:`~traceviz.ingest.build.ParsedTrace` (close it when done). ``strict`` rejects
    a truncated trace; ``warn_floor``: see :func:`~traceviz.ingest.build.parse_trace`."""
    if cpu and output == "-":
        raise UsageError("--cpu writes a second file: give -o FILE, not '-'")
    topology = from_file(topology_file) if topology_file else None
    parsed = parse_trace(trace, cpu=cpu, patterns=patterns, memory_budget=memory_budget,
                         topology=topology, vpp=vpp, warn_floor=warn_floor)
    if strict and parsed.meta["stats"]["truncated_at"] is not None:
        parsed.close()
        raise TraceVizError(f"{parsed.meta['source']}: truncated trace rejected (--strict); "
                            "nothing written")
    return Result(exports={output: lambda dest: parsed.write(os.fspath(dest))},
                  notes=list(parsed.warnings), value=parsed)


def write_stdout(result: Result) -> list[str]:
    """Write the table of a ``-o -`` parse to stdout."""
    return result.value.write("-")


def summary_lines(result: Result, seconds: float, written: list) -> list[str]:
    """What was parsed, how fast, where it went, and what was skipped."""
    parsed: ParsedTrace = result.value
    meta = parsed.meta
    stats = meta["stats"]
    kind_text = ", ".join(f"{v} {k}" for k, v in stats["kinds"].items()) or "none"
    steps = sorted({s["iteration"] for s in meta["steps"]})
    mb = stats["bytes_read"] / 1e6
    # the rank every command gives this trace: its own, else its file name's, else 0
    rank = (meta["rank"] if meta["rank"] >= 0 else
            rank_in_name(os.fspath(meta.get("source") or "")))
    label = (f"rank {rank}" if rank is not None and rank >= 0 else
             "rank 0 (the trace states none)")
    lines = [f"{label}: {parsed.columns.n_rows} GPU activities ({kind_text}); "
             f"{len(steps)} iteration(s); {stats['events']} events, {mb:.1f} MB in "
             f"{seconds:.2f} s ({mb / max(seconds, 1e-9):.0f} MB/s) -> "
             f"{', '.join(map(str, written))}"]
    skipped = sum(stats["skipped"].values())
    if skipped:
        lines.append(f"  skipped {skipped} events: " + "; ".join(
            f"{v} {k}" for k, v in stats["skipped"].items()))
    return lines
