"""The CPU table: every CPU-side complete event (runtime / driver calls, cpu_op,
user_annotation, python_function, ...) of one trace, and the device's ``cuda_sync``
events (Stream / Context / Event Sync, Stream Wait Event: what a synchronisation waited
on, for the critical path), in file order.

Columns besides the event's own: ``correlation`` (runtime calls and sync events),
``stream`` (the stream a sync event or a cpu_op names), ``wait_on_stream`` and
``wait_on_event_correlation`` (the stream and the ``cudaEventRecord`` correlation an
Event Sync / Stream Wait Event waits on), and the shapes ``record_shapes`` writes on a
cpu_op: ``input_dims`` / ``input_types`` / ``concrete_inputs`` as the trace's JSON text
(null when the trace has none)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import column
from . import fields as L
from .names import Strings
from .output_columns import OutputColumns, row_group_for
from .reader import ScannedTrace

CPU_FIELDS = ("correlation", "external_id", "seq_number", "fwd_thread_id", "python_id",
              "python_parent_id", "stream")
# store fields that only the CPU table reads: not kept when it is not asked for (a
# quarter of the CPU-side bytes, all of which would be spilled on a large trace)
CPU_ONLY_FIELDS = {"launch": ("cat", "external_id", "index"),
                   "ops": ("fwd_thread_id", "stream"),
                   "python": ("python_id", "python_parent_id", "index"),
                   "xargs": tuple(f for f, _ in L.FIELDS["xargs"])}
SYNC_CATEGORIES = ("cuda_sync", "xpu_sync")
# (table column, xargs field, is a string id)
XARGS_COLUMNS = (("wait_on_stream", "wait_stream", False),
                 ("wait_on_event_correlation", "wait_corr", False),
                 ("input_dims", "input_dims", True), ("input_types", "input_types", True),
                 ("concrete_inputs", "concrete", True))


def _xargs(scanned: ScannedTrace, store: int, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The xargs fields of the given rows of ``store`` (-1 where a row has none)."""
    x = scanned.stores["xargs"]
    mine = np.flatnonzero(x.column("store") == store)
    keys = x.column("row")[mine].astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, mine = keys[order], mine[order]
    pos = np.minimum(np.searchsorted(keys, rows), max(keys.size - 1, 0))
    hit = keys[pos] == rows if keys.size else np.zeros(rows.size, bool)
    out = {}
    for _, field, _ in XARGS_COLUMNS:
        v = x.column(field)[mine[pos]].astype(np.int64) if keys.size else hit.astype(np.int64)
        out[field] = np.where(hit, v, -1)
    return out


def cpu_columns(scanned: ScannedTrace, s: Strings, pid_of: np.ndarray, tid_of: np.ndarray,
                work_bytes: int, device_threads: np.ndarray) -> OutputColumns:
    """CPU-side complete events (runtime/driver, cpu_op, annotations, python) and the
    sync events, in file order; not the other events on ``device_threads`` (per thread
    index, see :func:`~traceviz.parse.device_tasks.device_threads`) nor the launches
    made of flows (index -1)."""
    store_ids = (L.LAUNCH, L.OPS, L.PY, L.GPU)
    stores = [scanned.stores[L.STORE_NAMES[k]] for k in store_ids]
    python_cat = s.ids_of("python_function")
    sync_cats = np.concatenate([s.ids_of(c) for c in SYNC_CATEGORIES]).astype(np.int64)
    gpu = scanned.stores["gpu"]
    sync_rows = np.flatnonzero(np.isin(gpu.column("cat").astype(np.int64), sync_cats))

    def part(st, f: str, rows: np.ndarray | None) -> np.ndarray:
        n = len(st) if rows is None else rows.size
        if f in st.dtypes and f not in st.drop:
            v = st.column(f).astype(np.int64)
            return v if rows is None else v[rows]
        if f == "cat" and st.name == "python":
            return np.full(n, python_cat[0] if python_cat.size else -1)
        return np.full(n, -1, dtype=np.int64)

    def concat(f: str) -> np.ndarray:
        parts = [part(st, f, sync_rows if st.name == "gpu" else None) for st in stores]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    index = concat("index")
    is_sync = np.zeros(index.size, bool)
    is_sync[index.size - sync_rows.size:] = True
    keep = np.flatnonzero((index >= 0) & (~device_threads[concat("thread")] | is_sync))
    order = keep[np.argsort(index[keep], kind="stable")]
    del index, keep
    out = OutputColumns(order.shape[0], scanned.budget, spill_bytes=work_bytes,
                        row_group=row_group_for(order.shape[0],
                                                scanned.strings.texts.total_bytes()))
    thread = concat("thread")[order]
    out.add("cat", s.dictionary(concat("cat")[order]))
    out.add("name", s.dictionary(concat("name")[order]))
    out.add("pid", column(pid_of[thread]))
    out.add("tid", column(tid_of[thread]))
    del thread
    out.add("ts", column(concat("ts")[order]))
    out.add("dur", column(concat("dur")[order]))
    for f in CPU_FIELDS:
        v = concat(f)[order]
        out.add(f, column(v, pa.int64(), v < 0))
    # xargs of each part: ops rows (shapes) and sync rows (waits)
    xparts: dict[str, list[np.ndarray]] = {f: [] for _, f, _ in XARGS_COLUMNS}
    for k, st in zip(store_ids, stores):
        rows = sync_rows if st.name == "gpu" else np.arange(len(st))
        got = _xargs(scanned, k, rows) if k in (L.OPS, L.GPU) else None
        for _, f, _ in XARGS_COLUMNS:
            xparts[f].append(got[f] if got else np.full(rows.size, -1, np.int64))
    for name, f, is_string in XARGS_COLUMNS:
        v = np.concatenate(xparts[f])[order]
        out.add(name, s.dictionary(v) if is_string else column(v, pa.int64(), v < 0))
    out.add("index", column(concat("index")[order]))
    return out
