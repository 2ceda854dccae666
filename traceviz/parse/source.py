"""Byte sources: a path, ``-`` (stdin) or a binary file object, plain / gzip / zstd.

The compression is sniffed from the magic bytes, never from the file name. A worker
thread reads (and decompresses) the input into a bounded queue of chunks, so I/O and
decompression overlap with scanning (file reads, ``zlib`` (ISA-L's where installed) and
``zstandard`` release the GIL, and so does the scanner). Plain input is read into a few
recycled buffers: a fresh 4 MB ``bytes`` per read cost a page fault and a zeroed page
per 4 KB, ~8 % of a parse. A gzip or zstd stream that ends early is not an error here:
the bytes decompressed so far are delivered and :attr:`ByteSource.stream_truncated` is
set, so the scanner can keep every complete event.
"""
from __future__ import annotations

import io
import os
import queue
import sys
import threading
from typing import BinaryIO

from ..errors import TraceError

try:  # ISA-L's inflate (~2.5x zlib's) where a wheel is built for the machine
    from isal import isal_zlib as zlib
except ImportError:
    import zlib  # type: ignore[no-redef]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OUT_CHUNK = 4 << 20
_PLAIN_BUFFERS = 4  # recycled read buffers of a plain input (the queue holds 3)
_IN_CHUNK = 1 << 20


class ByteSource:
    """Decompressed bytes of one trace, read with :meth:`readinto`."""

    stop = None  # the whole stream (a part of a trace says where it was cut)

    def __init__(self, src: str | os.PathLike | BinaryIO) -> None:
        self._own = False
        if isinstance(src, (str, os.PathLike)) and os.fspath(src) == "-":
            self.name = "<stdin>"
            fh: BinaryIO = sys.stdin.buffer
        elif isinstance(src, (str, os.PathLike)):
            self.name = os.fspath(src)
            try:
                fh = open(self.name, "rb")
            except IsADirectoryError:
                raise TraceError(self.name, "is a folder, not a trace file",
                                 hint="pass one trace file, or use 'traceviz batch' on a folder")
            except OSError as exc:
                raise TraceError(self.name, f"cannot open: {exc.strerror or exc}",
                                 hint="check the path and its permissions") from None
            self._own = True
        else:
            self.name = getattr(src, "name", None) or "<stream>"
            if not isinstance(self.name, str):
                self.name = "<stream>"
            fh = src
        self._fh = fh
        self.compressed_bytes = 0
        self.bytes_out = 0
        self.stream_truncated = False
        head = self._read_raw(4)
        if head.startswith(GZIP_MAGIC):
            self.compression = "gzip"
        elif head.startswith(ZSTD_MAGIC):
            self.compression = "zstd"
        else:
            self.compression = "none"
        self._head = head
        self._queue: queue.Queue = queue.Queue(maxsize=_PLAIN_BUFFERS - 1)
        self._free: queue.Queue = queue.Queue()  # plain input: buffers the scanner is done with
        self._pending = memoryview(b"")
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._thread.start()

    # ---- raw input ------------------------------------------------------------------
    def _read_raw(self, size: int) -> bytes:
        data = self._raw(self._fh.read, size) or b""
        self.compressed_bytes += len(data)
        return data

    def _read_raw_into(self, readinto, chunk: bytearray) -> int:
        got = self._raw(readinto, chunk) or 0
        self.compressed_bytes += got
        return got

    def _raw(self, read, arg):
        """``read(arg)`` with a read error turned into a TraceError at the offset."""
        try:
            return read(arg)
        except OSError as exc:
            raise TraceError(self.name, f"read failed: {exc}",
                             offset=self.compressed_bytes) from None

    def _produce(self) -> None:
        q = _StoppableQueue(self._queue, self._stop)
        try:
            if self.compression == "gzip":
                self._gunzip(q)
            elif self.compression == "zstd":
                self._unzstd(q)
            else:
                self._plain(q)
            q.put(None)
        except _Stopped:
            return
        except TraceError as exc:
            self._give(q, exc)
        except Exception as exc:  # corrupt stream: report where
            self._give(q, TraceError(self.name, f"{self.compression} data is corrupt ({exc})",
                                     offset=self.compressed_bytes,
                                     hint="the file is damaged; re-copy or re-export the trace"))

    @staticmethod
    def _give(q, exc: Exception) -> None:
        try:
            q.put(exc)
            q.put(None)
        except _Stopped:
            pass

    def _plain(self, q: _StoppableQueue) -> None:
        if self._head:
            q.put(self._head)
        readinto = getattr(self._fh, "readinto", None)
        if readinto is None:  # a file object with read() only
            while data := self._read_raw(_OUT_CHUNK):
                q.put(data)
            return
        free = _StoppableQueue(self._free, self._stop)
        for _ in range(_PLAIN_BUFFERS):
            free.put(bytearray(_OUT_CHUNK))
        while True:
            chunk = free.get()
            got = self._read_raw_into(readinto, chunk)
            if not got:
                return
            q.put(memoryview(chunk)[:got])

    def _gunzip(self, q: _StoppableQueue) -> None:
        dec = zlib.decompressobj(wbits=31)
        data = self._head
        while True:
            if not data:
                data = self._read_raw(_IN_CHUNK)
                if not data:
                    if not dec.eof:
                        self.stream_truncated = True
                    tail = dec.flush()
                    if tail:
                        q.put(tail)
                    return
            out = dec.decompress(data, _OUT_CHUNK)
            if out:
                q.put(out)
            data = dec.unconsumed_tail
            if dec.eof:  # input past the member's end is in unused_data (tail repeats it)
                data = dec.unused_data.lstrip(b"\0")
                if not data:
                    data = self._read_raw(_IN_CHUNK).lstrip(b"\0")
                    if not data:
                        return
                dec = zlib.decompressobj(wbits=31)  # next gzip member

    def _unzstd(self, q: _StoppableQueue) -> None:
        import zstandard

        raw = io.BufferedReader(_Prefixed(self._head, self))
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        while True:
            try:
                out = reader.read(_OUT_CHUNK)
            except zstandard.ZstdError as exc:
                if "incomplete" in str(exc) or "truncated" in str(exc):
                    self.stream_truncated = True
                    return
                raise
            if not out:
                return
            q.put(out)

    # ---- decompressed output ---------------------------------------------------------
    def readinto(self, out: memoryview) -> int:
        """Fill ``out`` with up to ``len(out)`` bytes; 0 means end of input."""
        got = 0
        while got < len(out):
            if not self._pending:
                if self._done:
                    break
                item = self._queue.get()
                if item is None:
                    self._done = True
                    break
                if isinstance(item, Exception):
                    self._done = True
                    raise item
                self._recycle()
                self._pending = memoryview(item)
            k = min(len(self._pending), len(out) - got)
            out[got:got + k] = self._pending[:k]
            self._pending = self._pending[k:]
            got += k
        self.bytes_out += got
        return got

    def next_chunk(self) -> bytes | None:
        """The next decompressed chunk of a compressed input, whole and the caller's to
        keep (None at the end); its errors as :meth:`readinto` raises them. Not mixed
        with :meth:`readinto`."""
        if self._done:
            return None
        item = self._queue.get()
        if item is None or isinstance(item, Exception):
            self._done = True
            if item is not None:
                raise item
            return None
        self.bytes_out += len(item)
        return item

    def _recycle(self) -> None:
        """Hand the consumed chunk's buffer back to the plain reader."""
        if isinstance(self._pending.obj, bytearray):
            self._free.put(self._pending.obj)

    def close(self) -> None:
        """Stop the worker (even mid-file) and close the input. Prompt: the worker is
        woken wherever it waits (a free buffer, room in the queue), not left to notice
        the stop at its next poll (~60 ms of every command that sniffed a large trace)."""
        self._stop.set()
        self._free.put(None)
        while self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(0.005)
        if self._own:
            self._fh.close()


class _StoppableQueue:
    """``put`` and ``get`` that give up (raising _Stopped) once the consumer has closed
    the source."""

    def __init__(self, q: queue.Queue, stop: threading.Event) -> None:
        self._q = q
        self._stop = stop

    def put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.05)
                return
            except queue.Full:
                continue
        raise _Stopped

    def get(self):
        while not self._stop.is_set():
            try:
                item = self._q.get(timeout=0.05)
            except queue.Empty:
                continue
            if not self._stop.is_set():
                return item
        raise _Stopped


class _Stopped(Exception):
    """The consumer closed the source; the worker ends."""


class _Prefixed(io.RawIOBase):
    """Raw stream of ``head`` followed by the rest of ``source``'s file."""

    def __init__(self, head: bytes, source: ByteSource) -> None:
        self._head = head
        self._src = source

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            k = min(len(self._head), len(b))
            b[:k] = self._head[:k]
            self._head = self._head[k:]
            return k
        data = self._src._read_raw(len(b))
        b[:len(data)] = data
        return len(data)


class FileRange:
    """The bytes ``[start, stop)`` of the plain file ``path`` (``stop`` None: to its end),
    named after the file: part ``index`` of a plain trace scanned in parts, with
    :class:`ByteSource`'s reading interface. Read in the caller's thread straight into the
    caller's buffer: the parts scanned at once overlap one another's reads, so a reader
    thread per part only added a copy and a hand-over per buffer (~10 % of a 0.5 GB
    scan on two cores)."""

    compression = "none"
    stream_truncated = False

    def __init__(self, path: str | os.PathLike, index: int, start: int, stop: int | None
                 ) -> None:
        self.name = os.fspath(path)
        self.index = index
        self.start = start
        self.stop = stop
        self._fh = open(self.name, "rb", buffering=0)
        self._fh.seek(start)
        self._left = None if stop is None else stop - start
        self._stopped = False
        self.bytes_out = 0

    @property
    def compressed_bytes(self) -> int:
        return self.bytes_out  # a plain file

    def readinto(self, out: memoryview) -> int:
        """Fill ``out`` with up to ``len(out)`` bytes; 0 means end of the range. Raises
        :class:`Stopped` once :meth:`stop_reading` was called."""
        if self._stopped:
            raise Stopped
        if self._left is not None:
            out = out[:self._left]
        got = 0
        while got < len(out):
            try:
                n = self._fh.readinto(out[got:]) or 0
            except OSError as exc:
                raise TraceError(self.name, f"read failed: {exc}",
                                 offset=self._fh.tell()) from None
            if not n:
                break
            got += n
        if self._left is not None:
            self._left -= got
        self.bytes_out += got
        return got

    def stop_reading(self) -> None:
        """Make the next read give up (the scan of the parts was abandoned)."""
        self._stopped = True

    def close(self) -> None:
        self._fh.close()


class Stopped(Exception):
    """The scan of a trace's parts was abandoned (an error elsewhere, or one pass after
    all); raised by a part's reads."""


def text_size(path: str | os.PathLike, limit: int) -> int | None:
    """Bytes of JSON text in the trace file ``path`` (decompressed) when they are at most
    ``limit``; None when there are more, or when ``path`` is not a readable JSON trace
    file (a folder, stdin, a parquet table, a damaged stream: what the command will
    report). Reads at most ``limit + 1`` decompressed bytes (a small file that inflates
    to gigabytes costs one read-ahead, not the gigabytes)."""
    if os.fspath(path) == "-" or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            plain = not fh.read(4).startswith((GZIP_MAGIC, ZSTD_MAGIC))
        if plain and os.path.getsize(path) > limit:  # its text is its bytes: no read
            return None
    except OSError:
        return None
    try:
        src = ByteSource(path)
    except TraceError:
        return None
    try:
        buf = bytearray(limit + 1)
        size = src.readinto(memoryview(buf))
    except Exception:  # noqa: BLE001 - any damage: the command itself reports it
        return None
    finally:
        src.close()
    if size > limit or buf[:size].removeprefix(b"\xef\xbb\xbf").lstrip()[:1] not in (b"{", b"["):
        return None
    return size
