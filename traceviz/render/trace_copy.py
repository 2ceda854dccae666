"""Write a copy of a Chrome / Kineto trace with extra events, streaming.

The caller opens the source (:class:`traceviz.parse.source.ByteSource` reads plain, gzip
and zstd) and passes it here.

The source (plain, gzip or zstd) is copied byte for byte into a gzip file, with the
extra events inserted at the start of its ``traceEvents`` array (or of a top-level
array). Nothing is parsed beyond finding that point, so memory stays flat on traces of
any size; the output opens in Perfetto UI and chrome://tracing. Written atomically.
"""
from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Iterable

import orjson

from ..errors import TraceError
from ..table.io import atomic_path

_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_CHUNK = 4 << 20
_MAX_HEAD = 256 << 20  # give up looking for "traceEvents" after this many bytes


def us_text(ns: int) -> str:
    """A ns time as the µs decimal Kineto writes (exact, 3 decimals)."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _insertion_point(src, name: str) -> tuple[bytes, bytes]:
    """(bytes up to and including the array's '[', the bytes read after it)."""
    head = bytearray()
    buf = bytearray(_CHUNK)
    searched = 0
    while True:
        first = re.match(rb"\s*(\S)", head)
        if first and first.group(1) == b"[":  # a top-level array of events
            return bytes(head[:first.end()]), bytes(head[first.end():])
        m = _ARRAY_START.search(head, max(0, searched - 64))
        if m:
            return bytes(head[:m.end()]), bytes(head[m.end():])
        searched = len(head)
        n = src.readinto(buf)
        if not n or len(head) > _MAX_HEAD:
            raise TraceError(name, "no traceEvents array found",
                             hint="pass a Chrome / Kineto trace (JSON with 'traceEvents')")
        head += buf[:n]


def event_json(event: dict) -> bytes:
    """One event as JSON; its ``ts`` and ``dur`` (int ns) written as exact µs decimal
    text."""
    rest = {k: v for k, v in event.items() if k not in ("ts", "dur")}
    head = b'{"ts":' + us_text(event["ts"]).encode()
    if "dur" in event:
        head += b',"dur":' + us_text(event["dur"]).encode()
    body = orjson.dumps(rest)
    return head + (b"," + body[1:] if rest else b"}")


GZIP_LEVEL = 6  # the traces traceviz writes: gzip's own default (9 takes ~3x as long)


def gzip_output(path: str) -> io.BufferedWriter:
    """``path`` opened for writing gzip at :data:`GZIP_LEVEL`, through a 1 MiB buffer
    (an event at a time would compress a few hundred bytes per call)."""
    return io.BufferedWriter(gzip.open(path, "wb", compresslevel=GZIP_LEVEL), 1 << 20)


def write_with_events(src, name: str, output: str | os.PathLike,
                      events: Iterable[dict]) -> int:
    """Copy the trace ``src`` (an open byte source with ``readinto``, decompressed;
    ``name`` names it in errors) to gzip ``output`` with ``events`` (``ts`` in int ns,
    see :func:`event_json`) prepended to its events; the number of events written.
    ``src`` is read to its end, not closed."""
    prefix, rest = _insertion_point(src, name)
    with atomic_path(output) as tmp, gzip_output(tmp) as out:
        out.write(prefix)
        count = 0
        for event in events:
            out.write((b",\n" if count else b"\n") + event_json(event))
            count += 1
        buf = bytearray(_CHUNK)
        while not rest.strip():  # is the array empty? look at its next byte
            n = src.readinto(buf)
            if not n:
                break
            rest += bytes(buf[:n])
        if count and rest.lstrip()[:1] != b"]":
            out.write(b",")
        out.write(rest)
        while n := src.readinto(buf):
            out.write(buf[:n])
    return count
