"""Drive the scanner over a byte source: one streaming pass, bounded memory.

:func:`scan_trace` owns the chunk buffer. It calls :func:`.scanner.scan`, and between
calls it decodes new strings, top-level values and metadata events, seals full column
blocks, grows tables, and refills the buffer keeping the unfinished tail (an event that
straddles two chunks is re-read whole from the start of the next buffer).
"""
from __future__ import annotations

import functools
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from ..errors import TraceError
from ..table.cores import usable_cores
from ..table.parked import release_free_memory
from . import fields as L
from .budget import MAX_STRINGS, SEGMENT_OVERHEAD
from .columns import ColumnStore, SpillBudget
from .header import Header
from .long_strings import C_CUTS, C_FIRST, MAX_EVENT, MAX_STRING, compact, position
from .long_strings import new_state as new_cut_state
from .scanner import _thread, rehash_threads, scan
from .segments import EVENT_BOUNDARY, HEAD_BYTES, Segment, Splitter
from .source import GZIP_MAGIC, ZSTD_MAGIC, ByteSource, FileRange
from .strings import BadString, StringTable, decode_raw, fold_marker

DEFAULT_CHUNK = 8 << 20
DEFAULT_BUDGET = 512 << 20
PARALLEL_MIN = 64 << 20  # plain traces from this size on are scanned in parts at once
MAX_PARTS = 8  # scanners of one trace at most
_SPLIT_WINDOW = 1 << 20  # bytes searched for an event boundary where a trace is split
STREAM_MIN = 2 << 20  # compressed traces from this size on are scanned in segments
# decompressed bytes per segment of a compressed trace (measured: larger ones are no
# faster on a 0.5 GB trace, and cost memory)
SEGMENT_BYTES = 8 << 20
BLOCK_ROWS = 1 << 14
_MAX_METADATA = 65536


@dataclass
class ScannedTrace:
    """Everything one pass over a trace produced. Call :meth:`close` when done."""

    source: str
    compression: str
    stores: dict[str, ColumnStore]
    strings: StringTable
    threads: np.ndarray  # (4, n): pid number, pid string id, tid number, tid string id
    header: Header
    stats: dict
    truncated_at: int | None
    budget: SpillBudget
    bytes_read: int
    compressed_bytes: int
    warnings: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.budget.close()


def jit_loaded() -> bool:
    """Whether the compiled scanner is already in this process (or needs no loading: numba's
    functions run as Python, see ``startup``)."""
    return bool(getattr(scan, "signatures", True))


def _grow_threads(thr: np.ndarray, count: int) -> np.ndarray:
    """The thread table with twice the capacity; thread indexes are kept."""
    new = np.full((6, thr.shape[1] * 2), -1, dtype=np.int64)
    new[L.TR_KEY] = 0
    rehash_threads(thr, new)
    info = slice(L.TR_PIDN, L.TR_TIDS + 1)
    new[info, :count] = thr[info, :count]
    return new


def scan_trace(src: str | os.PathLike | BinaryIO, *, memory_budget: int = DEFAULT_BUDGET,
               chunk_size: int = DEFAULT_CHUNK,
               drop: dict[str, tuple[str, ...]] | None = None,
               segments: bool = True, max_strings: int = MAX_STRINGS) -> ScannedTrace:
    """Read one trace in a single streaming pass into column stores.

    ``memory_budget`` bounds the bytes of sealed column blocks held in memory (more are
    spilled to disk); ``max_strings`` the distinct strings kept (past it new strings
    fold into one marker, with a warning: :func:`.strings.intern`). ``drop`` names, per
    store, fields not to keep (those only an output that is not wanted reads). Raises
    :class:`~traceviz.errors.TraceError` for input that is not a readable Kineto trace.
    A trace cut short (a profiler killed while writing) is not an error: every complete
    event before the cut is kept and ``truncated_at`` holds the byte offset.

    On a machine with two cores or more, a plain trace file of :data:`PARALLEL_MIN` bytes
    or more is scanned as one part per core at once (:func:`_scan_parts`), and a
    compressed one of :data:`STREAM_MIN` bytes or more, unless ``segments`` is False (no
    memory for their read ahead), as segments cut while it is inflated, one scanner per
    core (:func:`_scan_segments`); the result is the same as one pass's.
    """
    drop = drop or {}
    in_parts = _parts_plan(src, segments)
    if in_parts is not None:
        budget = SpillBudget(memory_budget, max_strings)
        try:
            merged = in_parts(budget, chunk_size, drop)
        except BaseException:
            budget.close()
            raise
        if merged is not None:
            return merged
        budget.close()  # not split, or a split was not between two events: one pass
    source = ByteSource(src)
    budget = SpillBudget(memory_budget, max_strings)
    try:
        return _finish(_scan(source, budget, chunk_size, drop), budget)
    except BaseException:
        budget.close()
        raise
    finally:
        source.close()


@dataclass
class _Part:
    """What scanning one byte range of a trace produced (before it is checked)."""

    source: ByteSource | FileRange | Segment
    w: np.ndarray
    strings: StringTable
    thr: np.ndarray
    header: Header
    stores: dict[str, ColumnStore]
    truncated_at: int | None = None
    crash_tail: bool = False
    split_end: bool = False  # read to its stop with nothing unfinished (see its mode)


def _scan(source: ByteSource | FileRange | Segment, budget: SpillBudget, chunk_size: int,
          drop: dict[str, tuple[str, ...]], start: int = 0, mode: int | None = None,
          block_rows: int = BLOCK_ROWS) -> _Part:
    """Scan ``source``, whose first byte is byte ``start`` of the trace. ``mode``: the
    scanner's mode there (None: the trace's start); ``source.stop``: the source ends
    there on purpose (a part of a split trace: ending between two events is no
    truncation); ``block_rows``: rows of a store's active block."""
    blocks = np.empty((L.N_STORES, L.MAX_FIELDS, block_rows), dtype=np.int64)
    stores = {name: ColumnStore(name, blocks[s], budget, drop.get(name, ()))
              for s, name in enumerate(L.STORE_NAMES)}
    w = L.new_state()
    if mode is not None:
        w[L.ST_MODE] = mode
        w[L.ST_SAW_EVENTS] = 1
    # texts past the blocks' share go to the trace's spill folder
    strings = StringTable(text_limit=budget.budget // 4, new_path=lambda: budget.new_path("t"),
                          max_strings=budget.max_strings)
    w[L.W_MAXSTR] = strings.max_strings
    thr = np.full((6, 1024), -1, dtype=np.int64)
    thr[L.TR_KEY] = 0
    spans = np.zeros((6, 4096), dtype=np.int64)
    header = Header()

    buf = np.empty(chunk_size, dtype=np.uint8)
    n = 0
    offset = start  # absolute offset of buf[0] in the decompressed stream
    eof = False
    truncated_at = None
    crash_tail = False
    split_end = False
    cutting = None  # the long strings of an event larger than the buffer being cut

    def at(pos: int) -> int:
        """The trace's byte offset of ``buf[pos]``."""
        return offset + (pos if cutting is None else position(cutting, pos))

    def fill_buffer() -> None:
        nonlocal n, eof
        while n < buf.shape[0] and not eof:
            got = source.readinto(buf.data[n:])
            if got == 0:
                eof = True
            n += got

    def drain() -> None:
        try:
            strings.take_pending(buf, w, at)
        except BadString as exc:
            raise TraceError(source.name, str(exc), offset=at(exc.offset or 0),
                             hint="the file is not valid JSON there; re-export the trace"
                             ) from None
        mem = buf.data
        for k0, k1, v0, v1 in spans[L.SP_KEY0:L.SP_VAL1 + 1, :int(w[L.ST_NTOP])].T.tolist():
            try:
                key = decode_raw(bytes(mem[k0:k1]))
            except BadString:  # an unreadable key names no value traceviz reads
                continue
            header.add_value(key, bytes(mem[v0:v1]))
        w[L.ST_NTOP] = 0
        for r0, r1 in spans[L.SP_RAW0:L.SP_RAW1 + 1, :int(w[L.ST_NRAW])].T.tolist():
            if header.metadata_events < _MAX_METADATA:
                header.add_metadata_event(bytes(mem[r0:r1]))
            else:
                w[L.S_META_NOT_KEPT] += 1
        w[L.ST_NRAW] = 0

    def cut_long() -> None:
        """Cut the long strings of the event being read since the last call."""
        nonlocal n
        assert cutting is not None
        cuts = int(cutting[C_CUTS])
        n = compact(buf, n, cutting, MAX_STRING)
        if cutting[C_CUTS] > cuts:
            strings.count_cuts(int(cutting[C_CUTS]) - cuts, offset + int(cutting[C_FIRST]))

    fill_buffer()
    if n == 0 and source.stream_truncated:
        raise TraceError(source.name, f"{source.compression} stream is cut before its first "
                         "byte", offset=source.compressed_bytes,
                         hint="the file is cut short; re-export or copy it again")
    if n == 0 and start == 0:
        raise TraceError(source.name, "is empty", offset=0,
                         hint="the profiler wrote nothing; re-run it or pick another file")
    if start == 0 and n >= 3 and buf[0] == 0xEF and buf[1] == 0xBB and buf[2] == 0xBF:
        w[L.ST_POS] = 3  # a UTF-8 byte-order mark: not part of the JSON text
    while True:
        status = scan(buf, n, eof, w, strings.strs, strings.sinfo, strings.pend, thr, blocks,
                      spans)
        drain()
        if status == L.R_FLUSH:
            for s, name in enumerate(L.STORE_NAMES):
                if w[L.W_FILL + s] >= block_rows:
                    stores[name].seal(int(w[L.W_FILL + s]))
                    w[L.W_BASE + s] += w[L.W_FILL + s]
                    w[L.W_FILL + s] = 0
        elif status == L.R_GROW_STRINGS:
            strings.grow(int(w[L.W_NSTR]), 1024)
        elif status == L.R_GROW_THREADS:
            thr = _grow_threads(thr, int(w[L.W_NTHR]))
        elif status == L.R_DRAIN:
            pass
        elif status == L.R_DONE:
            break
        elif status == L.R_ERROR:
            code = int(w[L.ST_ERRCODE])
            where = at(int(w[L.ST_ERRPOS]))
            if (w[L.S_EVENTS] and code != L.E_TWO_EVENTS
                    and _crash_tail(buf[int(w[L.ST_ERRPOS]):n], source, eof)):
                truncated_at = where  # what a node that died mid-write leaves: a cut
                crash_tail = True
                break
            if code == L.E_NOT_JSON and int(w[L.ST_EVENT_INDEX]) == 0:
                raise TraceError(source.name, "is not JSON (expected '{' or '[')",
                                 offset=where, hint=_not_json_hint(buf[:n], source.name))
            raise _corrupt(source.name, code, where, int(w[L.ST_EVENT_INDEX]))
        elif status == L.R_NEED_MORE:
            pos = int(w[L.ST_POS])
            if eof:
                split_end = at(pos) == source.stop
                truncated_at = None if split_end else at(pos)
                break
            if pos == 0 and n == buf.shape[0]:  # one item larger than the buffer
                if cutting is None:  # cut its long strings, now and as it arrives
                    cutting = new_cut_state()
                    cut_long()
                if n > buf.shape[0] * 3 // 4:  # cutting made little room: grow
                    if buf.shape[0] >= MAX_EVENT:
                        raise TraceError(
                            source.name, f"an event or value larger than "
                            f"{MAX_EVENT / 2**20:g} MB (after cutting its strings to "
                            f"{MAX_STRING >> 10} KiB) starts here", offset=offset,
                            hint="no profiler writes one: the file is damaged or not a "
                                 "trace; remove that event or re-export the trace")
                    bigger = np.empty(buf.shape[0] * 2, dtype=np.uint8)
                    bigger[:n] = buf[:n]
                    buf = bigger
            else:
                rest = n - pos
                buf[:rest] = buf[pos:n]
                n = rest
                if pos and cutting is not None:  # past the event that was cut
                    offset, cutting = at(pos), None
                else:
                    offset += pos
                w[L.ST_POS] = 0
            fill_buffer()
            if cutting is not None:
                cut_long()
    for s, name in enumerate(L.STORE_NAMES):
        stores[name].seal(int(w[L.W_FILL + s]))
        stores[name].block = None  # type: ignore[assignment]  # the active blocks are done
        w[L.W_FILL + s] = 0
    strings.end_scan()
    return _Part(source, w, strings, thr, header, stores, truncated_at, crash_tail, split_end)


def _corrupt(name: str, code: int, where: int, events: int) -> TraceError:
    """The error for malformed JSON at byte ``where`` after ``events`` events; it keeps
    what it was made from (a split trace's second half counts its events from 0)."""
    err = TraceError(name, L.ERROR_TEXT.get(code, "malformed JSON"), offset=where,
                     hint=f"after {events} events; the file is corrupt: re-export the trace")
    err.made_from = (name, code, where, events)
    return err


def _finish(part: _Part, budget: SpillBudget, bytes_read: int | None = None,
            compressed_bytes: int | None = None) -> ScannedTrace:
    """Check a whole trace's scan (no events: an error) and wrap it up with its
    warnings."""
    source, w, truncated_at = part.source, part.w, part.truncated_at
    bytes_read = source.bytes_out if bytes_read is None else bytes_read
    warnings: list[str] = []
    if not w[L.ST_SAW_EVENTS] and truncated_at is not None:
        raise TraceError(source.name, "ends before any trace event", offset=truncated_at,
                         hint="the file is cut short or empty; re-export the trace")
    if not w[L.ST_SAW_EVENTS]:
        raise TraceError(source.name, "is JSON but not a Kineto trace (no 'traceEvents')",
                         offset=None,
                         hint="pass a PyTorch profiler trace (export_chrome_trace output)")
    if truncated_at is not None and not w[L.S_EVENTS]:  # nothing to keep: no table
        raise TraceError(source.name, "is cut before its first complete event",
                         offset=truncated_at, hint="the file is cut short; re-export or copy "
                         "it again")
    if truncated_at is not None:
        warnings.append(
            f"{source.name}: trace is truncated at byte {truncated_at} "
            + ("(zero bytes or garbage from there to the end, as a node that died while "
               "writing leaves) " if part.crash_tail else "")
            + f"(kept the {int(w[L.S_EVENTS])} complete events before it)")
    if part.strings.cuts:
        warnings.append(
            f"{source.name}: {part.strings.cuts} string(s) longer than "
            f"{MAX_STRING >> 10} KiB (first at byte {part.strings.first_cut}) cut to their "
            f"first {MAX_STRING >> 10} KiB, ending in '…(+N bytes cut)'; no profiler writes "
            "such names: check what wrote the trace")
    if part.strings.fold_at is not None:
        where = f" (the first at byte {part.strings.fold_at})" if part.strings.fold_at >= 0 \
            else ""
        warnings.append(
            f"{source.name}: more than {part.strings.max_strings:,} distinct strings, the "
            f"most the memory budget holds: those first seen after them{where} all read "
            f"'{fold_marker(part.strings.max_strings)}' (a kernel so named is COMP); raise "
            "--memory-budget to keep them")
    if source.stream_truncated:
        warnings.append(f"{source.name}: {source.compression} stream ends early "
                        f"(decompressed {bytes_read} bytes)")
        if truncated_at is None:
            truncated_at = bytes_read
    n_threads = int(w[L.W_NTHR])
    stats = _stats_dict(w, part.strings, part.header)
    part.strings.seal()
    return ScannedTrace(
        source=source.name, compression=source.compression, stores=part.stores,
        strings=part.strings, threads=part.thr[L.TR_PIDN:L.TR_TIDS + 1, :n_threads].copy(),
        header=part.header, stats=stats, truncated_at=truncated_at, budget=budget,
        bytes_read=bytes_read,
        compressed_bytes=(source.compressed_bytes if compressed_bytes is None
                          else compressed_bytes),
        warnings=warnings)


_EVENT_MARK = b'"ph"'


def _crash_tail(rest: np.ndarray, source: ByteSource | FileRange | Segment,
                eof: bool) -> bool:
    """Whether the bytes from a JSON error to the end of the stream (``rest``, then what
    ``source`` still has) hold no further event: zero bytes or garbage, not a corrupt
    spot in a trace that goes on. Reads the rest of the stream."""
    tail = bytes(rest)
    if _EVENT_MARK in tail:
        return False
    if eof:
        return True
    chunk = bytearray(1 << 20)
    keep = tail[-(len(_EVENT_MARK) - 1):]
    while True:
        try:
            got = source.readinto(memoryview(chunk))
        except TraceError:  # the stream itself is cut or corrupt there: still a tail
            return True
        if not got:
            return True
        window = keep + bytes(chunk[:got])
        if _EVENT_MARK in window:
            return False
        keep = window[-(len(_EVENT_MARK) - 1):]


def _stats_dict(w: np.ndarray, strings: StringTable, header: Header) -> dict:
    by_cat: dict[str, int] = {}
    for sid, count in zip(*(a.tolist() for a in strings.category_counts())):
        text = strings.texts[sid]
        by_cat[text] = by_cat.get(text, 0) + count
    out: dict[str, Any] = {L.STAT_NAMES[k]: int(w[k]) for k in L.STAT_NAMES}
    out["events_by_cat"] = dict(sorted(by_cat.items()))
    out["first_event_ts"] = int(w[L.S_FIRST_TS]) if w[L.S_FIRST_SEEN] else None
    out["skipped"] = {L.SKIP_NAMES[k]: int(w[k]) for k in L.SKIP_NAMES if w[k]}
    out["notes"] = {L.NOTE_NAMES[k]: int(w[k]) for k in L.NOTE_NAMES if w[k]}
    if strings.cuts:
        out["notes"][f"strings longer than {MAX_STRING >> 10} KiB (cut)"] = strings.cuts
    if header.dropped:
        out["notes"]["top-level keys not kept (large, unused)"] = len(header.dropped)
    return out


def _not_json_hint(head: np.ndarray, name: str = "") -> str:
    data = bytes(head[:64])
    if name.endswith((".nsys-rep", ".qdrep", ".ncu-rep")):
        return ("this is an Nsight report, not a PyTorch profiler trace: record with "
                "torch.profiler and export_chrome_trace (Megatron-LM: --profile "
                "--use-pytorch-profiler)")
    if data.startswith(b"SQLite format"):
        return "this looks like an Nsight Systems SQLite export; export a PyTorch profiler trace"
    if data[:4] in (b"PK\x03\x04",):
        return "this is a zip archive; unpack it first"
    if b"nsys" in data or data.startswith(b"\x00"):
        return "this looks like a binary (e.g. Nsight .nsys-rep) file, not a Kineto JSON trace"
    return "pass a PyTorch profiler trace (.json, .json.gz or .json.zst)"


_PROCESSES = 1  # processes parsing at once on this machine (see share_cores)


def share_cores(processes: int) -> None:
    """Tell this process's scans that ``processes`` processes parse at once on this
    machine (``traceviz batch -j N``'s workers): each scan then runs as many scanners as
    its share of the cores (one pass where the share is one core)."""
    global _PROCESSES
    _PROCESSES = max(1, processes)


def _cores() -> int:
    """Scanners a trace may use: this process's share of the cores it may run on."""
    return max(1, usable_cores() // _PROCESSES)


def _parts_plan(src, segments: bool = True):
    """How ``src`` is scanned in parts: a function ``(budget, chunk_size, drop) ->
    ScannedTrace | None`` (None: one pass after all), or None to scan it in one pass (one
    core, a stream, a small file; a compressed one without ``segments``)."""
    if not isinstance(src, (str, os.PathLike)) or os.fspath(src) == "-":
        return None
    try:
        with open(src, "rb") as fh:
            compressed = fh.read(4).startswith((GZIP_MAGIC, ZSTD_MAGIC))
        size = os.path.getsize(src)
    except OSError:
        return None  # the one pass says what is wrong
    if compressed:
        return (functools.partial(_scan_segments, src)
                if segments and size >= STREAM_MIN and _cores() > 1 else None)
    splits = _split_points(src)
    return functools.partial(_scan_parts, src, splits) if splits else None


def _split_points(src) -> list[int]:
    """Where to split the plain file ``src`` for one scanner per core: the commas
    between two events nearest the 1/k marks of a large trace (k parts of at least
    ``PARALLEL_MIN / 2`` bytes, at most :data:`MAX_PARTS`); none for a small one."""
    size = os.path.getsize(src)
    if size < PARALLEL_MIN:
        return []
    parts = min(_cores(), MAX_PARTS, size // (PARALLEL_MIN // 2))
    points = [_candidate(src, size * k // parts) for k in range(1, parts)]
    return sorted({p for p in points if p is not None})


def _candidate(src, at: int) -> int | None:
    """Offset of the first comma that looks like it separates two events at or after
    byte ``at`` of the plain file ``src`` (within :data:`_SPLIT_WINDOW`), else None."""
    try:
        with open(src, "rb") as fh:
            fh.seek(at)
            window = fh.read(_SPLIT_WINDOW)
    except OSError:
        return None
    m = EVENT_BOUNDARY.search(window)
    return None if m is None else at + m.start(1)


def _file_head(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES)


def _event_modes(head: bytes) -> tuple[int, int]:
    """The scanner's modes before and after an event in a trace whose JSON text starts
    with ``head``: a Kineto trace's events are in its "traceEvents", a bare array is the
    events."""
    if head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] == b"[":
        return L.M_ARRAY_ITEM, L.M_ARRAY_AFTER
    return L.M_EVENTS_ITEM, L.M_EVENTS_AFTER


def _scan_parts(path, splits: list[int], budget: SpillBudget, chunk_size: int,
                drop: dict[str, tuple[str, ...]]) -> ScannedTrace | None:
    """Scan ``path`` as the byte ranges between the commas at ``splits``, one thread
    each, from the scanner state just after a comma between events, into one budget
    (:func:`_scan_in_order`; None: scan in one pass)."""
    head = _file_head(path)
    starts, stops = [0] + [p + 1 for p in splits], [*splits, None]
    # each part is read in its scanner's thread
    sources = [FileRange(path, k, lo, hi) for k, (lo, hi) in enumerate(zip(starts, stops))]
    todo: queue.Queue = queue.Queue()
    for source in sources:
        todo.put(source)
    def stop() -> None:
        for s in sources:
            s.stop_reading()

    try:
        # a part of a plain file is long: its blocks are whole ones, with nothing to join
        # when the parts merge (~40 MB copied on 0.5 GB), for one more active block
        whole = _scan_in_order(todo, len(sources), lambda: head, stop, budget, chunk_size,
                               drop, block_rows=BLOCK_ROWS)
    finally:
        for source in sources:
            source.close()
    if whole is None:
        return None
    return _finish(whole, budget, sum(s.bytes_out for s in sources) + len(splits),
                   sum(s.compressed_bytes for s in sources) + len(splits))


def _read_ahead(threads: int) -> int:
    """Inflated bytes that may wait for ``threads`` scanners: a segment for each scanner
    but one (each has a segment to read while the next is inflated)."""
    return max(threads - 1, 1) * SEGMENT_BYTES


def segment_work() -> int:
    """Bytes that scanning a compressed trace in segments takes here above one pass."""
    return SEGMENT_OVERHEAD + _read_ahead(min(_cores(), MAX_PARTS))


def _scan_segments(path, budget: SpillBudget, chunk_size: int,
                   drop: dict[str, tuple[str, ...]]) -> ScannedTrace | None:
    """Scan the compressed trace file ``path`` as segments cut while it is inflated
    (:class:`~.segments.Splitter`), one scanner thread per core, into one budget
    (:func:`_scan_in_order`; None: scan in one pass)."""
    threads = min(_cores(), MAX_PARTS)
    todo: queue.Queue = queue.Queue()
    splitter = Splitter(ByteSource(path), SEGMENT_BYTES, _read_ahead(threads), todo.put)
    try:
        splitter.start()
    except BaseException:
        splitter.stop()  # closes the source
        raise
    whole = _scan_in_order(todo, threads, lambda: splitter.head, splitter.stop, budget,
                           chunk_size, drop)
    if whole is None:
        return None
    source = splitter.source
    return _finish(whole, budget, source.bytes_out, source.compressed_bytes)


def _scan_in_order(todo: queue.Queue, threads: int, head, stop, budget: SpillBudget,
                   chunk_size: int, drop: dict[str, tuple[str, ...]],
                   block_rows: int | None = None) -> _Part | None:
    """Scan the parts of one trace that ``todo`` gives, in order (byte sources with
    ``index``, ``start`` and ``stop``; the last one's ``stop`` None), on ``threads``
    threads that each take the next part, and merge them in order as they are done
    (:class:`_InOrder`): the whole trace's part, or None to scan in one pass.
    ``head()`` is the trace's first bytes (known once the first part has bytes);
    ``stop()`` makes the parts' reads give up (called first when done, or on the way out
    of an error). ``block_rows``: rows of a part's active blocks (default: the threads'
    share of :data:`BLOCK_ROWS`, for many short parts whose blocks the merge joins)."""
    size = {"chunk_size": max(chunk_size // threads, 1 << 16),
            "block_rows": block_rows or BLOCK_ROWS // threads}
    results: dict[int, dict] = {}
    done = threading.Condition()
    # parts scanned or being scanned but not yet merged: where merging is the slower
    # side (millions of distinct strings), finished parts would otherwise pile up
    # (measured: 11 parts waiting, ~150 MB, on 2 M distinct names)
    unmerged = threading.Semaphore(threads + 1)
    closing = threading.Event()

    def work() -> None:
        while unmerged.acquire() and not closing.is_set() \
                and (source := todo.get()) is not None:
            got: dict = {}
            try:
                mode = _event_modes(head())[0] if source.index else None
                got["part"] = _scan(source, budget, drop=drop, start=source.start,
                                    mode=mode, **size)
            except BaseException as exc:  # noqa: BLE001 - handed to the merging thread
                got["error"] = exc
            with done:
                results[source.index] = got
                done.notify_all()

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    merged = None
    try:
        for w in workers:
            w.start()
        i = -1
        while True:
            i += 1
            with done:
                while i not in results:
                    done.wait()
                got = results.pop(i)
            if merged is None:
                merged = _InOrder(_event_modes(head())[1])
            last = "part" in got and got["part"].source.stop is None
            if not merged.take(got, last):
                return None
            unmerged.release()
            if last:
                return merged.whole
    finally:
        stop()
        closing.set()  # each worker acquires once more at most, and stops
        for _ in workers:
            unmerged.release()
            todo.put(None)
        for w in workers:
            if w.ident is not None:  # started
                w.join()
        # the scanners' buffers were freed in their threads' heaps, which the main
        # thread's allocations do not reuse: give them back to the OS
        release_free_memory()


class _InOrder:
    """The parts of a trace taken in order, each merged onto the trace before it
    (:func:`_merge`). A part's error is raised only when every part before it ended well
    (a single pass would have met it at the same offset); an error of the first part,
    and a part other than the last that does not end exactly between two events at its
    cut (a cut inside a string), mean: scan in one pass (:meth:`take` is False)."""

    def __init__(self, after: int) -> None:
        self.after = after  # the scanner's mode just after an event
        self.events = 0
        self.whole: _Part | None = None  # the trace up to the last part taken

    def take(self, got: dict, last: bool) -> bool:
        err = got.get("error")
        if err is not None:
            if self.whole is None and isinstance(err, TraceError):
                return False  # the one pass says it, with the whole trace in view
            made_from = getattr(err, "made_from", None)
            if made_from is None:
                raise err
            name, code, where, count = made_from
            raise _corrupt(name, code, where, count + self.events)
        part = got["part"]
        if not last and not (part.split_end and part.w[L.ST_MODE] == self.after):
            return False
        self.events += int(part.w[L.ST_EVENT_INDEX])
        if self.whole is not None:
            _merge(self.whole, part)  # ``part`` becomes the trace up to its end
        self.whole = part
        return True


def _merge(a: _Part, b: _Part) -> None:
    """Make ``b`` (the part after ``a``) the trace up to its end: ``a``'s stores,
    strings, threads, header and counts first, then ``b``'s with its string ids, thread
    indexes, row numbers and event indexes moved onto ``a``'s (:meth:`SpillBudget.fix`)."""
    smap = _merge_strings(a.strings, b.strings)
    tmap = _merge_threads(a, b, smap)
    events = int(a.w[L.ST_EVENT_INDEX])
    row_base = np.array([a.stores[name].rows for name in L.STORE_NAMES], dtype=np.int64)
    for name in L.STORE_NAMES:
        store, tail = a.stores[name], b.stores[name]
        fixes = {}
        for field_name, dtype in store.fields:
            if field_name == "thread":
                fixes[field_name] = _lookup(tmap)
            elif dtype == "i4":
                fixes[field_name] = _lookup(smap)
            elif field_name == "index":
                fixes[field_name] = _shift(events)
            elif field_name == "row":
                fixes[field_name] = _shift_rows(row_base)
        for block in tail.sealed:
            block.start += store.rows
            store.budget.fix(block, fixes)
        store.sealed.extend(tail.sealed)
        store.budget.coalesce(store.sealed, BLOCK_ROWS)
        store.rows += tail.rows
        tail.sealed, tail.rows = store.sealed, store.rows
    b.stores = a.stores
    for k in (*L.STAT_NAMES, *L.SKIP_NAMES, *L.NOTE_NAMES, L.ST_EVENT_INDEX):
        b.w[k] += a.w[k]
    if a.w[L.S_FIRST_SEEN]:  # the earlier part's first event comes first
        b.w[L.S_FIRST_SEEN], b.w[L.S_FIRST_TS] = 1, a.w[L.S_FIRST_TS]
    b.w[L.W_NTHR] = a.w[L.W_NTHR]
    b.w[L.ST_SAW_EVENTS] = 1
    b.strings, b.thr = a.strings, a.thr
    a.header.merge(b.header)
    b.header = a.header


def _lookup(table: np.ndarray):
    """A block fix: ids looked up in ``table`` (whose last entry, -1, is id -1's)."""
    return lambda values, block: table[values]


def _shift(base: int):
    """A block fix: numbers >= 0 moved by ``base``."""
    return lambda values, block: np.where(values >= 0, values + base, values)


def _shift_rows(row_base: np.ndarray):
    """A block fix: row numbers >= 0 moved by the first half's rows of their store."""
    return lambda values, block: np.where(values >= 0, values + row_base[block.get("store")],
                                          values)


def _merge_strings(a: StringTable, b: StringTable) -> np.ndarray:
    """``b``'s string ids as ``a``'s (the first id of the same text; texts new to ``a``
    are added, past ``a``'s room for strings folded, but never a category traceviz
    reads), with a last entry -1 for id -1; ``b``'s category counts are added to
    ``a``'s."""
    nb = len(b)
    smap = np.full(nb + 1, -1, dtype=np.int32)
    ids, counts = b.category_counts()
    known = [i for i in np.unique(ids).tolist() if b.texts[i] in L.CATEGORY_CLASS]
    smap[:nb], folded = a.texts.merge(b.texts, a.max_strings, fold_marker(a.max_strings),
                                      np.asarray(known, dtype=np.int64))
    if a.fold_at is None and (folded or b.fold_at is not None):
        # the first fold is in b: where b's scan folded first, unless the merge folded
        # strings of b (where those begin is not known)
        a.fold_at = -1 if folded else b.fold_at
    a.add_category_counts(smap[ids], counts)
    a.count_cuts(b.cuts, b.first_cut)
    return smap


def _merge_threads(a: _Part, b: _Part, smap: np.ndarray) -> np.ndarray:
    """``b``'s thread indexes as ``a``'s (same pid and tid; new ones are added to ``a``),
    with a last entry -1."""
    nb = int(b.w[L.W_NTHR])
    tmap = np.full(nb + 1, -1, dtype=np.int32)
    for t in range(nb):
        pidn, pids, tidn, tids = (int(v) for v in b.thr[L.TR_PIDN:L.TR_TIDS + 1, t])
        if a.w[L.W_NTHR] * 2 + 4 > a.thr.shape[1]:
            a.thr = _grow_threads(a.thr, int(a.w[L.W_NTHR]))
        tmap[t] = _thread(a.thr, a.w, np.int64(pidn),
                          np.int64(smap[pids] if pids >= 0 else -1), np.int64(tidn),
                          np.int64(smap[tids] if tids >= 0 else -1))
    return tmap
