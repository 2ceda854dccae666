"""The CPU table: every CPU-side complete event (runtime / driver calls, cpu_op,
user_annotation, python_function, ...) of one trace, in file order."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.arrays import column
from .names import Strings
from .output_columns import OutputColumns
from .reader import ScannedTrace


def _nullable(values: np.ndarray, mask: np.ndarray, type_: pa.DataType) -> pa.Array:
    return column(values, type_, mask)


CPU_FIELDS = ("correlation", "external_id", "seq_number", "fwd_thread_id", "python_id",
              "python_parent_id", "stream")
# store fields that only the CPU table reads: not kept when it is not asked for (a
# quarter of the CPU-side bytes, all of which would be spilled on a large trace)
CPU_ONLY_FIELDS = {"launch": ("cat", "external_id", "index"),
                   "ops": ("fwd_thread_id", "stream"),
                   "python": ("python_id", "python_parent_id", "index")}


def cpu_columns(scanned: ScannedTrace, s: Strings, pid_of: np.ndarray, tid_of: np.ndarray,
                work_bytes: int, device_threads: np.ndarray) -> OutputColumns:
    """CPU-side complete events (runtime/driver, cpu_op, annotations, python) in file
    order; not the events on ``device_threads`` (per thread index, see
    :func:`~traceviz.parsing.device_tasks.device_threads`) nor the launches made of flows
    (index -1)."""
    stores = [scanned.stores[k] for k in ("launch", "ops", "python")]
    python_cat = s.ids_of("python_function")

    def concat(f: str) -> np.ndarray:
        parts = []
        for st in stores:
            if f in st.dtypes:
                parts.append(st.column(f).astype(np.int64))
            elif f == "cat" and st.name == "python":
                parts.append(np.full(len(st), python_cat[0] if python_cat.size else -1))
            else:
                parts.append(np.full(len(st), -1, dtype=np.int64))
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    index = concat("index")
    keep = np.flatnonzero((index >= 0) & ~device_threads[concat("thread")])
    order = keep[np.argsort(index[keep], kind="stable")]
    del index, keep
    out = OutputColumns(order.shape[0], scanned.budget, spill_bytes=work_bytes)
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
        out.add(f, _nullable(v, v < 0, pa.int64()))
    out.add("index", column(concat("index")[order]))
    return out
