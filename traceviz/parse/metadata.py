"""The rank-level facts of a scanned trace, stored as JSON under ``traceviz`` in the
parquet metadata (see :mod:`traceviz.table.schema`), and thread numbers."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from .._version import __version__
from ..table.schema import SCHEMA_VERSION, stored_groups
from .reader import ScannedTrace


def thread_numbers(threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) numbers per thread index; -1 where the trace gave a non-numeric name."""
    if threads.size == 0:
        return np.full(1, -1, np.int64), np.full(1, -1, np.int64)
    return (np.where(threads[1] < 0, threads[0], -1), np.where(threads[3] < 0, threads[2], -1))


def trace_metadata(scanned: ScannedTrace, rank: int, rank_source: str, join_stats: dict,
                   steps: list[dict], kinds: dict) -> dict:
    """The rank-level facts stored as JSON under ``traceviz`` in the parquet metadata."""
    h = scanned.header
    values = dict(h.values)
    dist = values.pop("distributedInfo", {})
    dist = dist if isinstance(dist, dict) else {}
    stats = dict(scanned.stats)
    stats.update(join=join_stats, kinds=kinds, bytes_read=scanned.bytes_read,
                 compressed_bytes=scanned.compressed_bytes, truncated_at=scanned.truncated_at,
                 spilled_bytes=scanned.budget.spilled_bytes,
                 rows={name: len(store) for name, store in scanned.stores.items()})
    threads = []
    for idx in range(scanned.threads.shape[1]):
        pidn, pids, tidn, tids = scanned.threads[:, idx].tolist()
        pid = pidn if pids < 0 else scanned.strings.texts[pids]
        tid = tidn if tids < 0 else scanned.strings.texts[tids]
        threads.append({"pid": pid, "tid": tid, "name": h.thread_names.get((pid, tid)),
                        "process": h.process_names.get(pid),
                        "label": h.process_labels.get(pid)})
    return {
        "schema_version": SCHEMA_VERSION,
        "traceviz_version": __version__,
        "source": scanned.source,
        # the source file as parsed: a later trace at the same path is another trace
        # even where its time is older (copied with its time kept)
        "source_stat": source_stat(scanned.source),
        "compression": scanned.compression,
        "rank": rank,
        "rank_source": rank_source,
        "world_size": h.world_size(),
        # the groups once (not again under "distributed"), the world's without its ranks
        "distributed": {k: v for k, v in dist.items() if k != "pg_config"},
        "pg_config": stored_groups(dist.get("pg_config", []), h.world_size()),
        "device_properties": values.pop("deviceProperties", []),
        "base_time_ns": values.pop("baseTimeNanoseconds", None),
        "header": values,
        "steps": steps,
        "threads": threads,
        "stats": stats,
    }


STAMP_BYTES = 1 << 16  # the content stamp reads this much at each end of a file


def content_stamp(path: str | os.PathLike) -> str | None:
    """A stamp of a file's content (hex BLAKE2b of its size, first and last
    :data:`STAMP_BYTES` bytes; the whole file when smaller than twice that): a trace
    replaced by another of the same size and modification time (``cp -p``,
    ``rsync -a``, ``tar``, ``touch -r``) has another stamp unless the two differ only in
    their middle. None when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            digest = hashlib.blake2b(str(size).encode(), digest_size=16)
            digest.update(f.read(STAMP_BYTES))
            if size > STAMP_BYTES:
                f.seek(max(STAMP_BYTES, size - STAMP_BYTES))
                digest.update(f.read(STAMP_BYTES))
    except (OSError, ValueError, TypeError):
        return None
    return digest.hexdigest()


def source_stat(source: str | os.PathLike) -> dict | None:
    """Size, modification time (ns) and content stamp (:func:`content_stamp`) of the
    source file (None: not a file, stdin)."""
    try:
        st = os.stat(source)
    except (OSError, ValueError, TypeError):
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "stamp": content_stamp(source)}
