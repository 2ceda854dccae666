"""The allocator table: the caching allocator's events of one trace (``[memory]``
instants that ``profile_memory=True`` writes), in file order: when (``ts``, ns), on which
thread (``pid`` / ``tid``), the bytes allocated (> 0) or freed (< 0), the device's
allocated and reserved totals after the event, the block's address, and the device
(``device_type`` 1: CUDA, 0: CPU; ``device`` -1: the CPU). None for a trace without them.

Null: ``bytes``, ``addr`` or ``device`` absent or unreadable (not an int64 integer:
:data:`~.fields.UNREADABLE`), ``reserved`` or ``device_type`` absent."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import column
from .fields import UNREADABLE
from .reader import ScannedTrace

FIELDS = ("ts", "bytes", "allocated", "reserved", "addr", "device", "device_type", "index")
EXACT = ("bytes", "addr", "device")  # -1 is a value of each; absent is UNREADABLE


def memory_table(scanned: ScannedTrace, pid_of: np.ndarray, tid_of: np.ndarray
                 ) -> pa.Table | None:
    """The allocator table of ``scanned`` (see the module doc), or None without events.
    One row per event: 8 int64 columns and two thread numbers (~80 bytes an event)."""
    store = scanned.stores["memory"]
    if not len(store):
        return None
    cols: dict[str, list[np.ndarray]] = {f: [] for f in FIELDS + ("thread",)}
    for _, block in store.blocks(*FIELDS, "thread"):
        for f, v in block.items():
            cols[f].append(v.astype(np.int64))
    got = {f: np.concatenate(v) for f, v in cols.items()}
    thread = got.pop("thread")
    out = {"ts": column(got["ts"]), "pid": column(pid_of[thread]), "tid": column(tid_of[thread])}
    for f in FIELDS[1:]:
        v = got[f]
        out[f] = column(v, pa.int64(), v == (UNREADABLE if f in EXACT else -1))
    return pa.table(out)
