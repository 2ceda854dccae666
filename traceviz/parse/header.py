"""Top-level keys of a Kineto trace (everything but ``traceEvents``) and ``M`` events.

The scanner hands over byte spans; here each value is decoded with orjson (Python's
``json`` for integers beyond 64 bits). Large values of unknown keys are not kept.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, TypeGuard

import orjson

KEEP_UNKNOWN_BELOW = 64 << 10  # bytes; larger values of keys we do not use are dropped
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_WORKER_IN_NAME = re.compile(r"worker[-_]?(\d+)", re.IGNORECASE)
RANK_LIMIT = 1 << 31  # a rank is stored as int32: a larger number is no rank


def rank_in_name(name: str) -> int | None:
    """The rank a trace's file name states (``rank_3``, ``worker7``), None when it states
    none or a number no rank can be."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _RANK_IN_NAME.search(base) or _WORKER_IN_NAME.search(base)
    return int(m.group(1)) if m and int(m.group(1)) < RANK_LIMIT else None


def is_rank(value: object) -> TypeGuard[int]:
    """Whether a value a trace states can be a rank (an int in [0, 2**31))."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < RANK_LIMIT


def decode_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class Header:
    """Collects top-level values and process/thread metadata while scanning."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.dropped: list[str] = []
        self.process_names: dict[Any, str] = {}
        self.process_labels: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.metadata_events = 0

    def add_value(self, key: str, raw: bytes) -> None:
        if key in WANTED or len(raw) < KEEP_UNKNOWN_BELOW:
            try:
                self.values[key] = decode_json(raw)
            except ValueError:
                self.dropped.append(key)
        else:
            self.dropped.append(key)

    def add_metadata_event(self, raw: bytes) -> None:
        self.metadata_events += 1
        try:
            ev = decode_json(raw)
        except ValueError:
            return
        args = ev.get("args") or {}
        name = ev.get("name")
        if name == "process_name":
            self.process_names[ev.get("pid")] = str(args.get("name", ""))
        elif name == "process_labels":
            self.process_labels[ev.get("pid")] = str(args.get("labels", ""))
        elif name == "thread_name":
            self.thread_names[(ev.get("pid"), ev.get("tid"))] = str(args.get("name", ""))

    def merge(self, later: Header) -> None:
        """Add what ``later`` collected from a later part of the same trace (its values
        and names win, as a single pass's later ones would)."""
        self.values.update(later.values)
        self.dropped += later.dropped
        self.process_names.update(later.process_names)
        self.process_labels.update(later.process_labels)
        self.thread_names.update(later.thread_names)
        self.metadata_events += later.metadata_events

    # ---- facts ---------------------------------------------------------------------
    @property
    def distributed(self) -> dict:
        d = self.values.get("distributedInfo")
        return d if isinstance(d, dict) else {}

    def rank(self, source_name: str) -> tuple[int, str]:
        """(rank, where it came from): distributedInfo, else the file name, else -1."""
        r = self.distributed.get("rank")
        if is_rank(r):
            return r, "distributedInfo"
        named = rank_in_name(source_name)
        return (named, "file name") if named is not None else (-1, "unknown")

    def world_size(self) -> int:
        w = self.distributed.get("world_size")
        return w if isinstance(w, int) and not isinstance(w, bool) else -1


WANTED = {"distributedInfo", "deviceProperties", "baseTimeNanoseconds", "displayTimeUnit",
          "schemaVersion", "traceName", "record_shapes", "with_stack", "with_flops",
          "with_modules", "profile_memory", "cuda_driver_version", "cuda_runtime_version",
          "cupti_version", "hip_runtime_version", "hip_driver_version", "roctracer_version",
          "trace_id"}


def _header_source(src):
    """A plain file opened directly (no reader thread nor its buffers: a batch reads
    hundreds of headers), else a :class:`~.source.ByteSource` (compressed files, file
    objects)."""
    from .source import GZIP_MAGIC, ZSTD_MAGIC, ByteSource

    if isinstance(src, (str, os.PathLike)):
        try:
            fh = open(src, "rb")
        except OSError:
            return ByteSource(src)  # it says what is wrong, as for every other read
        if not fh.read(4).startswith((GZIP_MAGIC, ZSTD_MAGIC)):
            fh.seek(0)
            return fh
        fh.close()
    return ByteSource(src)


def read_header(src, limit: int = 64 << 20) -> dict | None:
    """Top-level keys written before ``traceEvents`` (where Kineto puts its header).

    Reads at most ``limit`` decompressed bytes; returns None when the trace has no such
    prefix (a bare event array, or a header after the events): parse the trace then.
    """
    source = _header_source(src)
    try:
        data = bytearray()
        chunk = bytearray(64 << 10)  # Kineto's header is a few KB: read little at first
        while len(data) < limit:
            got = source.readinto(memoryview(chunk))
            if not got:
                break
            data += chunk[:got]
            if len(chunk) < 1 << 20:
                chunk = bytearray(len(chunk) * 4)
            pos = data.find(b'"traceEvents"')
            if pos >= 0:
                prefix = bytes(data[:pos]).strip().rstrip(b",").rstrip()
                if not prefix.startswith(b"{"):
                    return None
                try:
                    doc = decode_json(prefix + b"}")
                except ValueError:
                    return None
                return doc if isinstance(doc, dict) else None
            if data.lstrip()[:1] == b"[":
                return None
        return None
    finally:
        source.close()
