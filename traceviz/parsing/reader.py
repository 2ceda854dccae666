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
from . import fields as L
from .columns import ColumnStore, SpillBudget
from .header import Header
from .scanner import scan
from .source import ByteSource
from .strings import BadString, StringTable, decode_raw, rehash

DEFAULT_CHUNK = 8 << 20
DEFAULT_BUDGET = 512 << 20
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
    """Whether the compiled scanner is already in this process."""
    return bool(scan.signatures)


def _grow_threads(thr: np.ndarray, count: int) -> np.ndarray:
    """The thread table with twice the capacity; thread indexes are kept."""
    new = np.full((6, thr.shape[1] * 2), -1, dtype=np.int64)
    new[L.TR_KEY] = 0
    rehash(thr, new, L.TR_KEY, L.TR_ID)
    info = slice(L.TR_PIDN, L.TR_TIDS + 1)
    new[info, :count] = thr[info, :count]
    return new


def scan_trace(src: str | os.PathLike | BinaryIO, *, memory_budget: int = DEFAULT_BUDGET,
               chunk_size: int = DEFAULT_CHUNK,
               drop: dict[str, tuple[str, ...]] | None = None) -> ScannedTrace:
    """Read one trace in a single streaming pass into column stores.

    ``memory_budget`` bounds the bytes of sealed column blocks held in memory (more are
    spilled to disk). ``drop`` names, per store, fields not to keep (those only an
    output that is not wanted reads). Raises :class:`~traceviz.errors.TraceError` for
    input that is not a readable Kineto trace. A trace cut short (a profiler killed while
    writing) is not an error: every complete event before the cut is kept and
    ``truncated_at`` holds the byte offset.
    """
    source = ByteSource(src)
    budget = SpillBudget(memory_budget)
    try:
        return _scan(source, budget, chunk_size, drop or {})
    except BaseException:
        budget.close()
        raise
    finally:
        source.close()


def _scan(source: ByteSource, budget: SpillBudget, chunk_size: int,
          drop: dict[str, tuple[str, ...]]) -> ScannedTrace:
    blocks = np.empty((L.N_STORES, L.MAX_FIELDS, BLOCK_ROWS), dtype=np.int64)
    stores = {name: ColumnStore(name, blocks[s], budget, drop.get(name, ()))
              for s, name in enumerate(L.STORE_NAMES)}
    w = L.new_state()
    strings = StringTable()
    thr = np.full((6, 1024), -1, dtype=np.int64)
    thr[L.TR_KEY] = 0
    spans = np.zeros((6, 4096), dtype=np.int64)
    header = Header()

    buf = np.empty(chunk_size, dtype=np.uint8)
    n = 0
    offset = 0  # absolute offset of buf[0] in the decompressed stream
    eof = False
    truncated_at = None
    crash_tail = False
    warnings: list[str] = []

    def fill_buffer() -> None:
        nonlocal n, eof
        while n < buf.shape[0] and not eof:
            got = source.readinto(memoryview(buf)[n:])
            if got == 0:
                eof = True
            n += got

    def drain() -> None:
        try:
            strings.take_pending(buf, w)
        except BadString as exc:
            raise TraceError(source.name, str(exc), offset=offset + exc.offset,
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

    fill_buffer()
    if n == 0 and source.stream_truncated:
        raise TraceError(source.name, f"{source.compression} stream is cut before its first "
                         "byte", offset=source.compressed_bytes,
                         hint="the file is cut short; re-export or copy it again")
    if n == 0:
        raise TraceError(source.name, "is empty", offset=0,
                         hint="the profiler wrote nothing; re-run it or pick another file")
    if n >= 3 and buf[0] == 0xEF and buf[1] == 0xBB and buf[2] == 0xBF:
        w[L.ST_POS] = 3  # a UTF-8 byte-order mark: not part of the JSON text
    while True:
        status = scan(buf, n, eof, w, strings.strs, thr, blocks, spans)
        drain()
        if status == L.R_FLUSH:
            for s, name in enumerate(L.STORE_NAMES):
                if w[L.W_FILL + s] >= BLOCK_ROWS:
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
            where = offset + int(w[L.ST_ERRPOS])
            if w[L.S_EVENTS] and _crash_tail(buf[int(w[L.ST_ERRPOS]):n], source, eof):
                truncated_at = where  # what a node that died mid-write leaves: a cut
                crash_tail = True
                break
            if code == L.E_NOT_JSON and int(w[L.ST_EVENT_INDEX]) == 0:
                raise TraceError(source.name, "is not JSON (expected '{' or '[')",
                                 offset=where, hint=_not_json_hint(buf[:n], source.name))
            raise TraceError(source.name, L.ERROR_TEXT.get(code, "malformed JSON"),
                             offset=where,
                             hint=f"after {int(w[L.ST_EVENT_INDEX])} events; the file is "
                                  "corrupt: re-export the trace")
        elif status == L.R_NEED_MORE:
            pos = int(w[L.ST_POS])
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
                w[L.ST_POS] = 0
            fill_buffer()
    for s, name in enumerate(L.STORE_NAMES):
        stores[name].seal(int(w[L.W_FILL + s]))
        w[L.W_FILL + s] = 0
    if not w[L.ST_SAW_EVENTS] and truncated_at is not None:
        raise TraceError(source.name, "ends before any trace event", offset=truncated_at,
                         hint="the file is cut short or empty; re-export the trace")
    if not w[L.ST_SAW_EVENTS]:
        raise TraceError(source.name, "is JSON but not a Kineto trace (no 'traceEvents')",
                         offset=None,
                         hint="pass a PyTorch profiler trace (export_chrome_trace output)")
    if truncated_at is not None:
        warnings.append(
            f"{source.name}: trace is truncated at byte {truncated_at} "
            + ("(zero bytes or garbage from there to the end, as a node that died while "
               "writing leaves) " if crash_tail else "")
            + f"(kept the {int(w[L.S_EVENTS])} complete events before it)")
    if source.stream_truncated:
        warnings.append(f"{source.name}: {source.compression} stream ends early "
                        f"(decompressed {source.bytes_out} bytes)")
        if truncated_at is None:
            truncated_at = offset + n
    n_threads = int(w[L.W_NTHR])
    return ScannedTrace(
        source=source.name, compression=source.compression, stores=stores, strings=strings,
        threads=thr[L.TR_PIDN:L.TR_TIDS + 1, :n_threads].copy(), header=header,
        stats=_stats_dict(w, strings, header), truncated_at=truncated_at, budget=budget,
        bytes_read=source.bytes_out, compressed_bytes=source.compressed_bytes,
        warnings=warnings)


_EVENT_MARK = b'"ph"'


def _crash_tail(rest: np.ndarray, source: ByteSource, eof: bool) -> bool:
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
    counts = strings.strs[L.SR_COUNT, :len(strings)]
    by_cat: dict[str, int] = {}
    for sid in np.flatnonzero(counts).tolist():
        text = strings.texts[sid]
        by_cat[text] = by_cat.get(text, 0) + int(counts[sid])
    out = {L.STAT_NAMES[k]: int(w[k]) for k in L.STAT_NAMES}
    out["events_by_cat"] = dict(sorted(by_cat.items()))
    out["skipped"] = {L.SKIP_NAMES[k]: int(w[k]) for k in L.SKIP_NAMES if w[k]}
    out["notes"] = {L.NOTE_NAMES[k]: int(w[k]) for k in L.NOTE_NAMES if w[k]}
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
