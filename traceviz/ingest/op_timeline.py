"""Op timelines read from files (:mod:`traceviz.table.timeline_schema`): parquet, CSV or
JSON lines (each optionally gzipped), a Chrome trace of timer events (``name`` = op,
``pid`` = rank, ``ts`` / ``dur`` in us, ``args`` with ``step`` and the optional columns;
complete events, or begin / end pairs: an end closes its thread's last begin),
or PP-Schedule-Visualization's timer dumps (:mod:`.timer_dump`: the forward / backward
compute of every micro-batch, step 0); one file, or a folder of them split any way (per
rank, per step; its subfolders too).

Every value is checked: a bad one stops the read with one line naming the file, the row
(1 = the first data row; a CSV file's header is line 1, so row r is line r + 1) and the
column. A Chrome trace is held in memory to be read, so one larger than
:data:`MAX_JSON_BYTES` (uncompressed) is refused; the other formats stream.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.timeline.data import OpTimeline, TimelineBuilder
from ..errors import TraceVizError
from ..table.inputs import note_input
from ..table.schema import is_activity_table, parquet_columns
from ..table.timeline_schema import COLUMNS, OP_TIMELINE_SCHEMA, REQUIRED
from . import timer_dump

MAX_JSON_BYTES = 1 << 30     # a Chrome trace of timer events, uncompressed
MAX_OP_NAMES = 1 << 15       # distinct op names (op codes are int16)
MAX_NAME = 256               # characters of an op name
MAX_LINE = 1 << 20           # characters of a JSON lines row
CLOCK = 1 << 62              # times and durations are within +-CLOCK ns
SUFFIXES = (".parquet", ".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".ndjson",
            ".ndjson.gz", ".json", ".json.gz")
SKIPPED_FOLDERS = ("traceviz-out",)
_KINETO_MARKS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"',
                 b'"traceName"', b"ProfilerStep#")


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(SUFFIXES, key=len, reverse=True) if name.endswith(s)),
                None)


def _head(path: Path, n: int = 1 << 16) -> bytes:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read(n)
        with open(path, "rb") as f:
            return f.read(n)
    except (OSError, EOFError, gzip.BadGzipFile):
        return b""


def _is_timeline_file(path: Path) -> bool:
    """Whether one file holds an op timeline, by its columns (JSON: by its first
    64 KiB: timer events with a ``step`` and none of a profiler trace's marks)."""
    suffix = _suffix(path)
    if suffix is None or not path.is_file():
        return False
    if suffix == ".parquet":
        try:
            names = set(parquet_columns(path))  # its footer read once, for every look
        except (OSError, pa.ArrowException):
            return False
        return set(REQUIRED) <= names
    head = _head(path)
    line = head.split(b"\n", 1)[0]
    if suffix.startswith(".csv"):
        header = line.decode("utf-8", "replace")
        return set(REQUIRED) <= {c.strip().strip('"') for c in header.split(",")}
    if suffix.startswith((".jsonl", ".ndjson")):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        return isinstance(row, dict) and set(REQUIRED) <= set(row)
    return (b'"traceEvents"' in head or head.lstrip().startswith(b"[")) and \
        b'"step"' in head and not any(m in head for m in _KINETO_MARKS)


def timeline_files(path: str | os.PathLike) -> list[Path]:
    """The op timeline files of ``path`` (itself, or a folder's, its subfolders' too,
    sorted; a folder's timer dumps as one entry, the folder); empty when it holds none.
    A CSV or JSON lines file named on its own counts whatever its columns (reading it
    names the missing ones); in a folder, only files with the required columns."""
    path = Path(path)
    if path.is_file():  # a CSV or JSON lines file named is read as one (and checked)
        named = _suffix(path) or ""
        return [path] if _is_timeline_file(path) or named.startswith(
            (".csv", ".jsonl", ".ndjson")) else []
    if not path.is_dir():
        return []
    if timer_dump.find_dumps(path):
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and d not in SKIPPED_FOLDERS)
        for name in sorted(files):
            p = Path(root) / name
            if not name.startswith(".") and _is_timeline_file(p):
                found.append(p)
    return found


def is_op_timeline(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an op timeline (a file, or a folder holding them). A folder
    whose first table is a parsed rank table is a job's tables, said from that one
    footer (a job's thousands of footers each state its groups: O(ranks) bytes)."""
    path = Path(path)
    if path.is_dir():
        first = min((p for p in path.glob("*.parquet")
                     if not p.name.endswith((".cpu.parquet", ".memory.parquet"))),
                    default=None)
        if first is not None and _is_rank_table(first):
            return False
    return bool(timeline_files(path))


def _is_rank_table(path: Path) -> bool:
    """Whether ``path`` is a readable GPU activity table ``traceviz parse`` wrote."""
    try:
        parquet_columns(path)
    except (OSError, pa.ArrowException):
        return False
    return is_activity_table(path)


def read_op_timeline(path: str | os.PathLike) -> OpTimeline:
    """The op timeline at ``path`` in memory (:class:`~traceviz.analysis.timeline.data.
    OpTimeline`), read a batch at a time (each checked, then kept as compact columns),
    with notes on what was read (files, what was left out)."""
    files = timeline_files(path)
    if not files:
        raise TraceVizError(f"{path}: no op timeline (parquet, CSV, JSON lines or a Chrome "
                            f"trace with the columns {', '.join(REQUIRED)})")
    builder = TimelineBuilder(MAX_OP_NAMES, _rows_known(files))
    notes = []
    for f in files:
        note_input(f)
        if f.is_dir():
            builder.add(_checked(_from_timer_dumps(f), f), f)
            notes.append(f"{f}: PP-Schedule-Visualization timer dumps read as step 0 "
                         "(forward / backward compute only)")
            continue
        row = 0
        for batch, skipped in _batches(f):
            builder.add(_checked(batch, f, row), f)
            row += batch.num_rows
            if skipped:
                notes.append(f"{f}: {skipped}")
    tl = builder.build(notes)
    if len(files) > 1:
        tl.notes.insert(0, f"{path}: {len(files)} op timeline files, {len(tl):,} ops")
    return tl


def _rows_known(files: list[Path]) -> int | None:
    """The rows of parquet files, from their footers (None: other files among them)."""
    if not all(_suffix(f) == ".parquet" for f in files):
        return None
    import pyarrow.parquet as pq
    try:
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except (OSError, pa.ArrowException):
        return None


@dataclass(frozen=True)
class RowGroup:
    """One row group of a parquet op timeline: its file (its place among the timeline's
    files, its size and modification time when first looked at), its number, its first
    row's place in the file (0: the first), its rows, and its lowest and highest step
    where its statistics state them (None: not stated)."""

    path: str
    file: int
    stamp: tuple[int, int]
    group: int
    first_row: int
    rows: int
    steps: tuple[int, int] | None


def row_groups(path: str | os.PathLike) -> tuple[list[Path], list[RowGroup]] | None:
    """The files of the op timeline at ``path`` and their row groups (from the
    footers), None where its files are not parquet alone (they are read whole,
    :func:`read_op_timeline`)."""
    import pyarrow.parquet as pq

    files = timeline_files(path)
    if not files or not all(_suffix(f) == ".parquet" for f in files):
        return None
    out = []
    for k, f in enumerate(files):
        note_input(f)
        try:
            st = f.stat()
            md = pq.ParquetFile(f).metadata
            # the step column's place among the leaves (a nested column before it has
            # several)
            at = next((i for i in range(md.num_columns)
                       if md.schema.column(i).path == "step"), -1)
            first = 0
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                stats = rg.column(at).statistics if at >= 0 else None
                steps = ((int(stats.min), int(stats.max)) if stats is not None
                         and stats.has_min_max and isinstance(stats.min, int) else None)
                out.append(RowGroup(str(f), k, (st.st_size, st.st_mtime_ns), g, first,
                                    rg.num_rows, steps))
                first += rg.num_rows
        except (OSError, pa.ArrowException) as exc:
            raise TraceVizError(f"{f}: not readable as .parquet: "
                                f"{str(exc).splitlines()[0] if str(exc) else exc}") from None
    return files, out


def read_steps(groups: list[RowGroup], lo: int | None, hi: int | None,
               names: tuple[str, ...] | None = None, only: frozenset[int] | None = None,
               first: bool = False) -> tuple[OpTimeline | None, dict[str, tuple[int, int]]]:
    """The rows of steps ``lo`` to ``hi`` (both included; None: every step; ``only``:
    of these steps alone) of an op timeline's row groups (:func:`row_groups`), each
    row group read whose steps overlap them, every row of it checked as
    :func:`read_op_timeline` checks it; ``names``: the whole timeline's op names (no
    other may come). None where no row is of those steps. With ``first`` (the first
    read of the timeline), each row group's steps are checked against its statistics
    and where each op name first appears (file, row) is given too. A file that changed
    since :func:`row_groups` looked at it is an error."""
    builder = TimelineBuilder(MAX_OP_NAMES, names=names)
    seen: dict[str, tuple[int, int]] = {}
    current: str | None = None
    with contextlib.ExitStack() as stack:  # one file open at a time (thousands of them)
        for g in _wanted(groups, lo, hi, only):
            if g.path != current:
                stack.close()  # the file before
                current, pf = g.path, _open(Path(g.path), g.stamp, stack)
            _read_group(pf, g, lo, hi, only, first, builder, seen)
    if not builder.rows:
        return None, seen
    return builder.build([]), seen


def _wanted(groups: list[RowGroup], lo: int | None, hi: int | None,
            only: frozenset[int] | None) -> Iterator[RowGroup]:
    """The row groups that may hold rows of those steps (see :func:`read_steps`)."""
    for g in groups:
        if g.steps is not None and (
                (lo is not None and hi is not None and (g.steps[1] < lo or g.steps[0] > hi))
                or (only is not None and not any(g.steps[0] <= s <= g.steps[1]
                                                 for s in only))):
            continue  # none of its rows is of those steps
        yield g


def _open(path: Path, stamp: tuple[int, int], opened: contextlib.ExitStack) -> Any:
    """``path`` opened as parquet (closed with ``opened``), where it is as it was when
    its row groups were listed (its size and modification time)."""
    import pyarrow.parquet as pq

    try:
        st = path.stat()
        if (st.st_size, st.st_mtime_ns) != stamp:
            raise TraceVizError(f"{path}: changed while it was being read; run again")
        fh = opened.enter_context(open(path, "rb"))
        return pq.ParquetFile(fh, read_dictionary=["op"], pre_buffer=False)
    except pa.ArrowInvalid as exc:
        raise TraceVizError(f"{path}: not readable as .parquet: "
                            f"{str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read: {exc}") from None


def _read_group(pf: Any, g: RowGroup, lo: int | None, hi: int | None,
                only: frozenset[int] | None, first: bool, builder: TimelineBuilder,
                seen: dict[str, tuple[int, int]]) -> None:
    """The rows of those steps of row group ``g`` (checked) into ``builder``; with
    ``first``, its steps checked against its statistics and where each name is first
    used kept in ``seen`` (see :func:`read_steps`)."""
    path = Path(g.path)
    try:
        have = pf.schema_arrow.names
        row = g.first_row
        for b in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g.group],
                                 use_threads=False,
                                 columns=[c for c in COLUMNS if c in have]):
            t = _checked(pa.Table.from_batches([b]), path, row)
            step = t["step"]
            if first and g.steps is not None and len(t):
                low, high = pc.min_max(step).values()
                if low.as_py() < g.steps[0] or high.as_py() > g.steps[1]:
                    raise TraceVizError(
                        f"{path}: row group {g.group} holds steps {low.as_py()} to "
                        f"{high.as_py()}, its statistics say {g.steps[0]} to "
                        f"{g.steps[1]}: the footer is wrong; write the file again")
            keep = pa.array(np.ones(len(t), dtype=bool))
            if lo is not None and hi is not None:
                keep = pc.and_(pc.greater_equal(step, lo), pc.less_equal(step, hi))
            if only is not None:
                keep = pc.and_(keep, pc.is_in(step, pa.array(sorted(only), pa.int32())))
            at = np.flatnonzero(np.asarray(keep))
            part = t.take(pa.array(at)) if len(at) < len(t) else t
            uses = builder.add(part, path)
            if first and uses is not None:  # where each name is first used
                local, index, used = uses
                rows_of = np.full(len(local), len(index), dtype=np.int64)
                np.minimum.at(rows_of, index, np.arange(len(index)))
                for c in used.tolist():
                    pos = (g.file, row + int(at[rows_of[c]]))
                    seen[local[c]] = min(seen.get(local[c], pos), pos)
            row += b.num_rows
    except pa.ArrowInvalid as exc:
        raise TraceVizError(f"{path}: not readable as .parquet: "
                            f"{str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read: {exc}") from None


BATCH_ROWS = 1 << 18  # rows checked and converted at a time (~100 MB of Arrow memory)


def _batches(path: Path) -> Iterator[tuple[pa.Table, str]]:
    """One file's rows a batch at a time, with the columns it has (and why some rows were
    left out)."""
    suffix = _suffix(path) or ""
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq
            # no read-ahead, one thread: a batch's memory at a time (pre-buffering holds
            # whole row groups: ~0.7 GB on a 50 M-op file)
            pf = pq.ParquetFile(path, read_dictionary=["op"], pre_buffer=False)
            names = pf.schema_arrow.names
            for b in pf.iter_batches(batch_size=BATCH_ROWS, use_threads=False,
                                     columns=[c for c in COLUMNS if c in names]):
                yield pa.Table.from_batches([b]), ""
        elif suffix.startswith(".csv"):
            from pyarrow import csv
            header = _head(path).split(b"\n", 1)[0].decode("utf-8", "replace")
            have = [c.strip().strip('"') for c in header.split(",")]
            types = {c: pa.string() for c in COLUMNS if c in have}
            with pa.input_stream(path, compression="detect") as f:
                reader = csv.open_csv(f, read_options=csv.ReadOptions(
                    block_size=64 << 20), convert_options=csv.ConvertOptions(
                    column_types=types, include_columns=list(types),
                    strings_can_be_null=True))
                for b in reader:
                    yield pa.Table.from_batches([b]), ""
        elif suffix.startswith((".jsonl", ".ndjson")):
            yield from _json_lines(path)
        else:
            yield _from_chrome(path)
    except pa.ArrowInvalid as exc:
        raise TraceVizError(f"{path}: not readable as {suffix}: {str(exc).splitlines()[0]}"
                            ) from None
    except (OSError, EOFError) as exc:
        raise TraceVizError(f"{path}: cannot read: {exc}") from None


def _json_lines(path: Path) -> Iterator[tuple[pa.Table, str]]:
    """JSON lines, one object per line (blank lines skipped), a batch at a time."""
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    n = 0
    with pa.input_stream(path, compression="detect") as raw, \
            io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:  # type: ignore[arg-type]
        while True:
            line = f.readline(MAX_LINE + 1)
            if not line:
                break
            n += 1
            if len(line) > MAX_LINE:
                raise TraceVizError(f"{path}: line {n} is longer than {MAX_LINE:,} "
                                    "characters: not a row of an op timeline")
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise TraceVizError(f"{path}: line {n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise TraceVizError(f"{path}: line {n}: not a JSON object")
            for c in COLUMNS:
                cols[c].append(row.get(c))
            if len(cols["rank"]) >= BATCH_ROWS:
                yield _columns(cols, path), ""
                cols = {c: [] for c in COLUMNS}
    if cols["rank"] or n == 0:
        yield _columns(cols, path), ""


def _columns(cols: dict[str, list], path: Path) -> pa.Table:
    out = {}
    for c, v in cols.items():
        if all(x is None for x in v):
            continue
        try:
            out[c] = pa.array(v)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # checked as text
            out[c] = pa.array([None if x is None else str(x) for x in v], pa.string())
    return pa.table(out) if out else pa.table({c: pa.array([], pa.int64()) for c in REQUIRED})


def _from_chrome(path: Path) -> tuple[pa.Table, str]:
    """A Chrome trace of timer events as rows (complete events, begin / end pairs)."""
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as packed:
                raw = packed.read(MAX_JSON_BYTES + 1)
        else:
            with open(path, "rb") as plain:
                raw = plain.read(MAX_JSON_BYTES + 1)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceVizError(f"{path}: cannot read: {exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise TraceVizError(f"{path}: a Chrome trace over {MAX_JSON_BYTES >> 20:,} MiB "
                            "uncompressed is not read: write the timeline as parquet, CSV "
                            "or JSON lines (they stream)")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceVizError(f"{path}: not JSON at byte {exc.pos}: {exc.msg}") from None
    del raw
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceVizError(f"{path}: no traceEvents list")
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    other = unmatched = 0
    open_: dict[tuple, list[tuple[int, dict]]] = {}  # (pid, tid, name) -> begun events

    def add(i: int, ev: dict, dur_us) -> None:
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
        where = f"{path}: event {i}"
        cols["rank"].append(ev.get("pid"))
        cols["op"].append(ev.get("name"))
        cols["start_ns"].append(_us_to_ns(ev.get("ts"), where, "ts"))
        cols["duration_ns"].append(_us_to_ns(dur_us, where, "dur"))
        for c in ("step",) + tuple(c for c in COLUMNS if c not in REQUIRED):
            cols[c].append(args.get(c))

    for i, ev in enumerate(events):
        ph = ev.get("ph") if isinstance(ev, dict) else None
        if ph == "X":
            add(i, ev, ev.get("dur"))
        elif ph in ("B", "E"):  # a begin / end pair: the end closes its thread's last begin
            key = (ev.get("pid"), ev.get("tid"), ev.get("name") if ph == "B" else None)
            if ph == "B":
                open_.setdefault(key[:2], []).append((i, ev))
                continue
            begun = open_.get(key[:2])
            if not begun:
                unmatched += 1
                continue
            j, b = begun.pop()
            ts, te = b.get("ts"), ev.get("ts")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                       for x in (ts, te)):
                bad, at = (ts, j) if not isinstance(ts, (int, float)) or isinstance(
                    ts, bool) else (te, i)
                raise TraceVizError(f"{path}: event {at}: ts is {bad!r}, expected "
                                    "microseconds (a number)")
            add(j, b, te - ts)
        else:
            other += 1
    unmatched += sum(len(v) for v in open_.values())
    said = [f"{other:,} events that are not timer events (ph X, or B / E pairs)"
            if other else "", f"{unmatched:,} begin / end events without their pair"
            if unmatched else ""]
    skipped = "; ".join(x for x in said if x) + (" left out" if any(said) else "")
    return _columns(cols, path), skipped


def _us_to_ns(us, where: str, key: str) -> int | None:
    if us is None:
        return None
    if not isinstance(us, (int, float)) or isinstance(us, bool) or not np.isfinite(us) \
            or abs(us) > 9.2e15:
        raise TraceVizError(f"{where}: {key} is {us!r}, expected microseconds (a number)")
    return int(round(us * 1000))


def _from_timer_dumps(folder: Path) -> pa.Table:
    """Every PP group's timer dumps as rows of step 0 (``dp_rank``: the dump's
    TPxCPxDP rank)."""
    names = [m for p in timer_dump.find_dumps(folder) if (m := timer_dump.NAME.match(p.name))]
    rows = []
    for group in sorted({int(m.group(3)) for m in names}):
        g = timer_dump.read_group(folder, group)
        stage = {r: s for s, r in enumerate(g.ranks)}
        for r in g.rows:
            rows.append({"rank": r["rank"], "step": 0,
                         "op": "forward-compute" if r["phase"] == "Forward"
                         else "backward-compute",
                         "start_ns": r["start_ns"], "duration_ns": r["wall_clock_ns"],
                         "stage": stage[r["rank"]], "dp_rank": group,
                         "microbatch": r["microbatch"], "chunk": r["chunk"]})
    return pa.Table.from_pylist(rows, schema=OP_TIMELINE_SCHEMA)


def _checked(table: pa.Table, path: Path, first_row: int = 0) -> pa.Table:
    """``table`` as :data:`OP_TIMELINE_SCHEMA`, every value checked (see the module
    doc); its rows are the file's from ``first_row`` (0: the first) on."""
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise TraceVizError(f"{path}: no column {', '.join(missing)} (an op timeline has "
                            f"{', '.join(REQUIRED)})")
    n = table.num_rows
    out = {}
    for field in OP_TIMELINE_SCHEMA:
        name = field.name
        if name not in table.column_names:
            out[name] = pa.nulls(n, field.type)
            continue
        col = table[name]
        if name == "op":
            out[name] = _names(col, path, first_row)
            continue
        out[name] = _integers(col, field.type, path, name, first_row)
    schema = OP_TIMELINE_SCHEMA.set(OP_TIMELINE_SCHEMA.get_field_index("op"),
                                    pa.field("op", out["op"].type))
    t = pa.table(out, schema=schema)
    for name in REQUIRED:
        _first(t[name].is_null(), path, name, "is empty", first_row)
    _first(pc.less(t["duration_ns"], 0), path, "duration_ns", "is negative", first_row)
    for name in ("rank", "stage", "dp_rank", "tp_rank", "chunk"):
        _first(pc.less(t[name], 0), path, name, "is negative", first_row)
    _first(pc.less(t["microbatch"], -1), path, "microbatch", "is below -1", first_row)
    _first(pc.or_(pc.less(t["transfer_ns"], 0),
                  pc.greater(t["transfer_ns"], t["duration_ns"])),
           path, "transfer_ns", "is not within [0, duration_ns]", first_row)
    # times within +-2^62 ns (146 years): every sum and difference the analysis makes
    # of them stays inside int64
    _first(pc.less(t["start_ns"], -CLOCK), path, "start_ns", "is before -2^62 ns",
           first_row)
    _first(pc.greater(t["start_ns"], pc.subtract(pa.scalar(CLOCK, pa.int64()),
                                                 t["duration_ns"])),
           path, "duration_ns", "ends past 2^62 ns", first_row)
    return t


def _first(mask, path: Path, column: str, what: str, base: int = 0) -> None:
    """One line naming the first row where ``mask`` holds."""
    if isinstance(mask, np.ndarray):
        arr = mask
    else:
        arr = np.asarray(pc.fill_null(mask, False).combine_chunks()
                         if isinstance(mask, pa.ChunkedArray) else pc.fill_null(mask, False))
    bad = np.flatnonzero(arr)
    if bad.size:
        raise TraceVizError(f"{path}: row {base + int(bad[0]) + 1}, column {column}: {what} "
                            f"({bad.size:,} row{'s' if bad.size > 1 else ''}; row 1 is the "
                            "first data row)")


def _names(col, path: Path, base: int = 0) -> pa.Array:
    """The op names as strings (a dictionary of strings kept as it is, its values
    checked)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type) and pa.types.is_string(col.type.value_type):
        lengths = np.asarray(pc.utf8_length(col.dictionary))
        for bad, what in ((lengths == 0, "is empty"),
                          (lengths > MAX_NAME, f"is longer than {MAX_NAME} characters")):
            if bad.any():
                _first(np.isin(np.asarray(col.indices.fill_null(0)), np.flatnonzero(bad)),
                       path, "op", what, base)
        return col
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = _integers(col, pa.int64(), path, "op", base).cast(pa.string())
    col = col.cast(pa.string())
    _first(pc.equal(pc.utf8_length(col), 0), path, "op", "is empty", base)
    _first(pc.greater(pc.utf8_length(col), MAX_NAME), path, "op",
           f"is longer than {MAX_NAME} characters", base)
    return col


def _integers(col, typ: pa.DataType, path: Path, name: str, base: int = 0) -> pa.Array:
    """``col`` as integers of ``typ``: integer-valued numbers or numerals; the first
    value that is not, or does not fit, named."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), typ)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        stripped = pc.utf8_trim_whitespace(col)
        col = pc.if_else(pc.equal(stripped, ""), pa.scalar(None, pa.string()), stripped)
        try:
            col = col.cast(pa.int64())
        except pa.ArrowInvalid:
            try:
                col = col.cast(pa.float64())
            except pa.ArrowInvalid:
                values = col.to_pylist()
                i = next(i for i, v in enumerate(values) if v is not None
                         and not _numeral(v))
                raise TraceVizError(f"{path}: row {base + i + 1}, column {name}: "
                                    f"{str(values[i])[:40]!r} is not a number") from None
    if pa.types.is_boolean(col.type) or not (pa.types.is_integer(col.type)
                                             or pa.types.is_floating(col.type)):
        raise TraceVizError(f"{path}: column {name} holds {col.type}, expected integers")
    if pa.types.is_unsigned_integer(col.type):  # beyond int64 before anything else
        big = pc.greater(col.cast(pa.uint64()), pa.scalar((1 << 63) - 1, pa.uint64()))
        _first(big, path, name, "does not fit int64", base)
        col = col.cast(pa.int64())
    if pa.types.is_floating(col.type):
        values = np.asarray(pc.fill_null(col, 0.0), dtype=np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > 9.2e18)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceVizError(f"{path}: row {base + i + 1}, column {name}: "
                                f"{float(values[i])!r} is not an integer")
        col = col.cast(pa.int64(), safe=False)
    try:
        return col.cast(typ)
    except pa.ArrowInvalid:
        info = np.iinfo(typ.to_pandas_dtype())
        values = np.asarray(pc.fill_null(col, 0), dtype=np.int64)
        i = int(np.flatnonzero((values < info.min) | (values > info.max))[0])
        raise TraceVizError(f"{path}: row {base + i + 1}, column {name}: {int(values[i])} "
                            f"does not fit {typ}") from None


def _numeral(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True
