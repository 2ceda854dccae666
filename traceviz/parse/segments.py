"""A compressed trace cut into segments at event boundaries as it is inflated, so that
one scanner per core reads a segment each (:func:`~traceviz.parse.reader.scan_trace`).

A :class:`Splitter` thread takes the decompressed chunks of a
:class:`~traceviz.parse.source.ByteSource` in order and feeds them to the open
:class:`Segment`; once that segment holds ``segment_bytes`` it is ended at the next comma
that looks like one between two events (:data:`EVENT_BOUNDARY`) and the bytes after the
comma open the next segment. A segment keeps its bytes until its scanner has read them;
all segments together keep at most about ``held_bytes`` (the splitter waits for the
scanners), so inflating runs ahead of scanning by that much at most.

A comma that is not between two events (one inside a string that happens to look like
a boundary) is caught by the reader: the scan of the segment before it does not end
exactly there, and the trace is scanned again in one pass.
"""
from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable

from .source import ByteSource, Stopped

# "}" "," "{" '"' with whitespace between: the end of one event and the start of the
# next, unless the bytes are inside a string (then the parts do not meet: one pass)
EVENT_BOUNDARY = re.compile(rb"\}\s*(,)\s*\{\s*\"")
HEAD_BYTES = 4096  # the stream's first bytes kept: what its JSON text starts with


class Segment:
    """The decompressed bytes ``[start, stop)`` of a trace (``stop`` None: to the end of
    the stream), read like a :class:`~traceviz.parse.source.ByteSource`. ``index``
    counts the segments from 0."""

    def __init__(self, splitter: Splitter, index: int, start: int) -> None:
        self.name = splitter.source.name
        self.compression = splitter.source.compression
        self.index = index
        self.start = start
        self.stop: int | None = None
        self.stream_truncated = False
        self.bytes_out = 0
        self._splitter = splitter
        self._views: deque[memoryview] = deque()
        self._ended = False
        self._error: BaseException | None = None

    @property
    def compressed_bytes(self) -> int:
        """Compressed bytes read so far (of the whole file)."""
        return self._splitter.source.compressed_bytes

    def readinto(self, out: memoryview) -> int:
        """Fill ``out`` with up to ``len(out)`` bytes (waiting for the splitter); 0 means
        the end of the segment. Raises the stream's error where the segment met it."""
        sp = self._splitter
        got = 0
        with sp.cond:
            while got < len(out):
                while not (self._views or self._ended or sp.stopped):
                    sp.cond.wait()
                if sp.stopped:
                    raise Stopped
                if not self._views:
                    if self._error is not None and got == 0:
                        raise self._error
                    break
                view = self._views[0]
                k = min(len(view), len(out) - got)
                out[got:got + k] = view[:k]
                if k == len(view):
                    self._views.popleft()
                else:
                    self._views[0] = view[k:]
                got += k
                sp.held -= k
            sp.cond.notify_all()
        self.bytes_out += got
        return got


class Splitter:
    """Cuts ``source`` into segments in a thread of its own; ``on_segment`` gets each
    segment as it opens (before its bytes), in order."""

    def __init__(self, source: ByteSource, segment_bytes: int, held_bytes: int,
                 on_segment: Callable[[Segment], None]) -> None:
        self.source = source
        self.segment_bytes = segment_bytes
        self.held_bytes = held_bytes
        self.cond = threading.Condition()
        self.held = 0  # bytes fed to segments and not yet read
        self.stopped = False
        self.head = b""  # the stream's first HEAD_BYTES bytes (set before segment 1 opens)
        self._on_segment = on_segment
        self._count = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Abandon the segments (their reads raise :class:`Stopped`) and stop inflating."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join()
        self.source.close()

    def _open(self, start: int) -> Segment:
        seg = Segment(self, self._count, start)
        self._count += 1
        self._on_segment(seg)
        return seg

    def _feed(self, seg: Segment, view: memoryview) -> None:
        if not len(view):
            return
        with self.cond:
            while self.held > self.held_bytes and not self.stopped:
                self.cond.wait()
            if self.stopped:
                raise Stopped
            seg._views.append(view)
            self.held += len(view)
            self.cond.notify_all()

    def _end(self, seg: Segment, stop: int | None, error: BaseException | None = None
             ) -> None:
        with self.cond:
            seg.stop = stop
            seg.stream_truncated = stop is None and self.source.stream_truncated
            seg._error = error
            seg._ended = True
            self.cond.notify_all()

    def _run(self) -> None:
        seg = self._open(0)
        fed = 0  # bytes in the open segment
        base = 0  # stream offset of the chunk's first byte
        try:
            while (chunk := self.source.next_chunk()) is not None:
                if not self.head:
                    self.head = bytes(chunk[:HEAD_BYTES])
                view = memoryview(chunk)
                pos = 0
                while True:
                    room = self.segment_bytes - fed
                    m = (EVENT_BOUNDARY.search(chunk, pos + max(room, 0))
                         if len(chunk) - pos > room else None)
                    if m is None:
                        self._feed(seg, view[pos:])
                        fed += len(chunk) - pos
                        break
                    comma = m.start(1)
                    self._feed(seg, view[pos:comma])
                    self._end(seg, base + comma)
                    pos = comma + 1
                    seg, fed = self._open(base + pos), 0
                base += len(chunk)
            self._end(seg, None)
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - the segment's reader raises it
            self._end(seg, None, exc)
