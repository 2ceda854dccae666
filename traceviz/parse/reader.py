"""Drive the scanner over a byte source: one streaming pass, bounded memory.

:func:`scan_trace` owns the chunk buffer. It calls :func:`.scanner.scan`, and between
calls it decodes new strings, top-level values and metadata events, seals full column
blocks, grows tables, and refills the buffer keeping the unfinished tail (an event that
straddles two chunks is re-read whole from the start of the next buffer).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from ..errors import TraceError
from . import layout as L
from .columns import ColumnStore, SpillBudget
from .header import Header
from .scanner import scan
from .source import ByteSource
from .strings import StringTable

DEFAULT_CHUNK = 8 << 20
DEFAULT_BUDGET = 512 << 20
_BLOCK_ROWS = {"gpu": 1 << 15, "launch": 1 << 15, "ops": 1 << 15, "python": 1 << 15,
               "comm": 1 << 12, "flow": 1 << 15}
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


class _Threads:
    def __init__(self, capacity: int = 1024) -> None:
        self.keys = np.zeros(capacity, dtype=np.int64)
        self.vals = np.zeros(capacity, dtype=np.int32)
        self.meta = np.zeros(1, dtype=np.int64)
        self.info = np.full((4, capacity), -1, dtype=np.int64)

    def grow(self) -> None:
        """Double the table; existing thread indexes are kept."""
        from .strings import _rehash

        size = self.keys.shape[0] * 2
        keys = np.zeros(size, dtype=np.int64)
        vals = np.zeros(size, dtype=np.int32)
        _rehash(self.keys, self.vals, keys, vals)
        info = np.full((4, size), -1, dtype=np.int64)
        info[:, :self.info.shape[1]] = self.info
        self.keys, self.vals, self.info = keys, vals, info


def scan_trace(src: str | os.PathLike | BinaryIO, *, memory_budget: int = DEFAULT_BUDGET,
               chunk_size: int = DEFAULT_CHUNK) -> ScannedTrace:
    """Read one trace in a single streaming pass into column stores.

    Raises :class:`~traceviz.errors.TraceError` for input that is not a readable Kineto
    trace. A trace cut short (a profiler killed while writing) is not an error: every
    complete event before the cut is kept and ``truncated_at`` holds the byte offset.
    """
    source = ByteSource(src)
    budget = SpillBudget(memory_budget)
    try:
        return _scan(source, budget, chunk_size)
    except BaseException:
        budget.close()
        raise
    finally:
        source.close()


def _scan(source: ByteSource, budget: SpillBudget, chunk_size: int) -> ScannedTrace:
    stores = {name: ColumnStore(name, _BLOCK_ROWS[name], budget) for name in L.STORE_NAMES}
    blocks = [stores[name].block for name in L.STORE_NAMES]
    fill = np.zeros(len(L.STORE_NAMES), dtype=np.int64)
    base = np.zeros(len(L.STORE_NAMES), dtype=np.int64)
    cap = np.array([b.shape[1] for b in blocks], dtype=np.int64)
    strings = StringTable()
    threads = _Threads()
    catclass = np.full(strings.keys.shape[0], -1, dtype=np.int64)
    catcount = np.zeros(strings.keys.shape[0], dtype=np.int64)
    stats = np.zeros(L.N_STATS, dtype=np.int64)
    st = np.zeros(L.ST_SIZE, dtype=np.int64)
    top = np.zeros((4, 64), dtype=np.int64)
    raw = np.zeros((2, 4096), dtype=np.int64)
    header = Header()
    evk, evv = L.EVENT_KEY_TABLE
    argk, argv = L.ARG_KEY_TABLE
    catk, catv = L.CATEGORY_TABLE

    buf = np.empty(chunk_size, dtype=np.uint8)
    n = 0
    offset = 0  # absolute offset of buf[0] in the decompressed stream
    eof = False
    truncated_at = None
    warnings: list[str] = []

    def fill_buffer() -> None:
        nonlocal n, eof
        while n < buf.shape[0] and not eof:
            got = source.readinto(memoryview(buf)[n:])
            if got == 0:
                eof = True
            n += got

    def drain() -> None:
        strings.take_pending(buf)
        mem = buf.data
        for t in range(int(st[L.ST_NTOP])):
            k0, k1, v0, v1 = (int(x) for x in top[:, t])
            key = bytes(mem[k0:k1]).decode("utf-8", errors="replace")
            header.add_value(key, bytes(mem[v0:v1]))
        st[L.ST_NTOP] = 0
        for r in range(int(st[L.ST_NRAW])):
            if header.metadata_events < _MAX_METADATA:
                header.add_metadata_event(bytes(mem[int(raw[0, r]):int(raw[1, r])]))
            else:
                stats[L.S_META_NOT_KEPT] += 1
        st[L.ST_NRAW] = 0

    fill_buffer()
    if n == 0:
        raise TraceError(source.name, "is empty", offset=0,
                         hint="the profiler wrote nothing; re-run it or pick another file")
    while True:
        status = scan(buf, n, eof, st, stats, catcount, catclass,
                      strings.keys, strings.vals, strings.meta, strings.pending,
                      threads.keys, threads.vals, threads.meta, threads.info,
                      evk, evv, argk, argv, catk, catv,
                      fill, base, cap, *blocks, top, raw)
        drain()
        if status == L.R_FLUSH:
            for s, name in enumerate(L.STORE_NAMES):
                if fill[s] >= cap[s]:
                    stores[name].seal(int(fill[s]))
                    base[s] += fill[s]
                    fill[s] = 0
        elif status == L.R_GROW_STRINGS:
            strings.ensure_room(1024)
            size = strings.keys.shape[0]
            if catclass.shape[0] < size:
                catclass = np.concatenate([catclass, np.full(size - catclass.shape[0], -1)])
                catcount = np.concatenate([catcount, np.zeros(size - catcount.shape[0],
                                                              dtype=np.int64)])
        elif status == L.R_GROW_THREADS:
            threads.grow()
        elif status == L.R_DRAIN:
            pass
        elif status == L.R_DONE:
            break
        elif status == L.R_ERROR:
            code = int(st[L.ST_ERRCODE])
            where = offset + int(st[L.ST_ERRPOS])
            if code == L.E_NOT_JSON and int(st[L.ST_EVENT_INDEX]) == 0:
                raise TraceError(source.name, "is not JSON (expected '{' or '[')",
                                 offset=where, hint=_not_json_hint(buf[:n]))
            raise TraceError(source.name, L.ERROR_TEXT.get(code, "malformed JSON"),
                             offset=where,
                             hint=f"after {int(st[L.ST_EVENT_INDEX])} events; the file is "
                                  "corrupt: re-export the trace")
        elif status == L.R_NEED_MORE:
            pos = int(st[L.ST_POS])
            if eof:
                truncated_at = offset + pos
                break
            if pos == 0 and n == buf.shape[0]:  # one item larger than the buffer
                bigger = np.empty(buf.shape[0] * 2, dtype=np.uint8)
                bigger[:n] = buf[:n]
                buf = bigger
            else:
                rest = n - pos
                buf[:rest] = buf[pos:n]
                n = rest
                offset += pos
                st[L.ST_POS] = 0
            fill_buffer()
    for s, name in enumerate(L.STORE_NAMES):
        stores[name].seal(int(fill[s]))
        fill[s] = 0
    if not st[L.ST_SAW_EVENTS] and truncated_at is not None:
        raise TraceError(source.name, "ends before any trace event", offset=truncated_at,
                         hint="the file is cut short or empty; re-export the trace")
    if not st[L.ST_SAW_EVENTS]:
        raise TraceError(source.name, "is JSON but not a Kineto trace (no 'traceEvents')",
                         offset=None,
                         hint="pass a PyTorch profiler trace (export_chrome_trace output)")
    if truncated_at is not None:
        warnings.append(
            f"{source.name}: trace is truncated at byte {truncated_at} "
            f"(kept the {int(stats[L.S_EVENTS])} complete events before it)")
    if source.stream_truncated:
        warnings.append(f"{source.name}: {source.compression} stream ends early "
                        f"(decompressed {source.bytes_out} bytes)")
        if truncated_at is None:
            truncated_at = offset + n
    stat_dict = _stats_dict(stats, catcount, strings, header)
    return ScannedTrace(
        source=source.name, compression=source.compression, stores=stores, strings=strings,
        threads=threads.info[:, :int(threads.meta[0])].copy(), header=header,
        stats=stat_dict, truncated_at=truncated_at, budget=budget,
        bytes_read=source.bytes_out, compressed_bytes=source.compressed_bytes,
        warnings=warnings)


def _stats_dict(stats: np.ndarray, catcount: np.ndarray, strings: StringTable,
                header: Header) -> dict:
    by_cat: dict[str, int] = {}
    for sid in np.flatnonzero(catcount[:len(strings)]).tolist():
        text = strings.texts[sid]
        by_cat[text] = by_cat.get(text, 0) + int(catcount[sid])
    out = {L.STAT_NAMES[k]: int(stats[k]) for k in L.STAT_NAMES}
    out["events_by_cat"] = dict(sorted(by_cat.items()))
    out["skipped"] = {L.SKIP_NAMES[k]: int(stats[k]) for k in L.SKIP_NAMES if stats[k]}
    out["notes"] = {L.NOTE_NAMES[k]: int(stats[k]) for k in L.NOTE_NAMES if stats[k]}
    if header.dropped:
        out["notes"]["top-level keys not kept (large, unused)"] = len(header.dropped)
    return out


def _not_json_hint(head: np.ndarray) -> str:
    data = bytes(head[:64])
    if data.startswith(b"SQLite format"):
        return "this looks like an Nsight Systems SQLite export; export a PyTorch profiler trace"
    if data[:4] in (b"PK\x03\x04",):
        return "this is a zip archive; unpack it first"
    if b"nsys" in data or data.startswith(b"\x00"):
        return "this looks like a binary (e.g. Nsight .nsys-rep) file, not a Kineto JSON trace"
    return "pass a PyTorch profiler trace (.json, .json.gz or .json.zst)"
