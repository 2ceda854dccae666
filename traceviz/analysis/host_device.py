"""One rank's host and device events in one frame (for the critical path and the op
model): the CPU table's rows and the GPU activities, in the trace's event order, with
each runtime call and the device event it launched or waited on linked both ways
(``link``).

Times are int64 ns on the rank's clock; with ``hta_compat`` they are HTA's whole µs
(start ceil, end floor, in ns). ``cls`` says what an event is (``CPU_OP`` ...); GPU-side
rows (activities and sync events) have ``gpu`` set."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..table.arrays import codes_of, ints
from ..table.schema import metadata
from .hta_compat import hta_round

# event classes
(CPU_OP, USER_ANNOT, RUNTIME, PYTHON, OTHER_CPU, ACTIVITY, SYNC) = range(7)
_CAT_CLASS = {"cpu_op": CPU_OP, "Operator": CPU_OP, "user_annotation": USER_ANNOT,
              "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME,
              "Driver": RUNTIME, "python_function": PYTHON, "cuda_sync": SYNC,
              "xpu_sync": SYNC}
# HTA's is_comm_kernel (0.6): communication kernels by name
COMM_KERNEL = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")


@dataclass
class RankEvents:
    """A rank's CPU and GPU events in trace order (see the module doc)."""

    rank: int
    order: np.ndarray       # the event's index in the trace (ties in time: this order)
    ts: np.ndarray          # ns
    dur: np.ndarray         # ns
    cls: np.ndarray         # int8 event class
    name: np.ndarray        # index into names
    names: list[str]
    pid: np.ndarray
    tid: np.ndarray         # GPU rows: the stream
    stream: np.ndarray      # -1: none
    correlation: np.ndarray  # -1: none
    link: np.ndarray        # row of the linked runtime call / device event, -1: none
    wait_stream: np.ndarray  # sync events: the stream / event record they wait on
    wait_corr: np.ndarray
    seq: np.ndarray         # autograd Sequence number of a cpu_op, -1
    table_row: np.ndarray   # GPU activities: row in the GPU table; else -1
    cpu_row: np.ndarray     # CPU table rows: row there; else -1

    def __len__(self) -> int:
        return self.ts.shape[0]

    def slimmed(self) -> RankEvents:
        """What a rank joined into its job's graph keeps of its events: the name, class,
        thread / stream and GPU table row of each (what the path's tables and figure
        read), in narrow types; its times and links live on in the job's graph. The
        other arrays are empty."""
        none = np.zeros(0, np.int64)
        return RankEvents(
            rank=self.rank, order=none, ts=none, dur=none, cls=self.cls.astype(np.int8),
            name=self.name.astype(np.int32), names=self.names, pid=none, tid=self.tid,
            stream=none, correlation=none, link=none, wait_stream=none, wait_corr=none,
            seq=none, table_row=self.table_row.astype(np.int32), cpu_row=none)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    @property
    def gpu(self) -> np.ndarray:
        return (self.cls == ACTIVITY) | (self.cls == SYNC)

    def name_ids(self, *texts: str) -> np.ndarray:
        """Name ids of the given texts (absent ones left out)."""
        return np.array([i for i, t in enumerate(self.names) if t in texts], np.int64)

    def is_named(self, *texts: str) -> np.ndarray:
        return np.isin(self.name, self.name_ids(*texts))


def _col(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, -1, np.int64)
    return ints(table[name])


def rank_events(gpu: pa.Table, cpu: pa.Table, *, hta_compat: bool = False) -> RankEvents:
    """The frame of one rank from its GPU activity table and its CPU table (both from the
    same parse, ``--cpu``)."""
    cpu_names, cpu_name = _names(cpu, "name")
    cat_codes, cats = codes_of(cpu["cat"])
    cat_cls = np.array([_CAT_CLASS.get(c, OTHER_CPU) for c in cats] + [OTHER_CPU], np.int8)
    gpu_names, gpu_name = _names(gpu, "name")
    names = list(dict.fromkeys(cpu_names + gpu_names))
    pos = {t: i for i, t in enumerate(names)}
    remap_cpu = np.array([pos[t] for t in cpu_names] + [-1], np.int64)
    remap_gpu = np.array([pos[t] for t in gpu_names] + [-1], np.int64)
    nc, ng = cpu.num_rows, gpu.num_rows
    cls = np.concatenate([cat_cls[cat_codes], np.full(ng, ACTIVITY, np.int8)])
    stream_cpu = _col(cpu, "stream")
    frame = dict(
        order=np.concatenate([_col(cpu, "index"), _col(gpu, "index")]),
        ts=np.concatenate([_col(cpu, "ts"), _col(gpu, "ts")]),
        dur=np.concatenate([_col(cpu, "dur"), _col(gpu, "dur")]),
        cls=cls,
        name=np.concatenate([remap_cpu[cpu_name], remap_gpu[gpu_name]]),
        pid=np.concatenate([_col(cpu, "pid"), _col(gpu, "device")]),
        tid=np.concatenate([_col(cpu, "tid"), _col(gpu, "stream")]),
        stream=np.concatenate([stream_cpu, _col(gpu, "stream")]),
        correlation=np.concatenate([_col(cpu, "correlation"), _col(gpu, "correlation")]),
        wait_stream=np.concatenate([_col(cpu, "wait_on_stream"), np.full(ng, -1)]),
        wait_corr=np.concatenate([_col(cpu, "wait_on_event_correlation"), np.full(ng, -1)]),
        seq=np.concatenate([_col(cpu, "seq_number"), np.full(ng, -1)]),
        table_row=np.concatenate([np.full(nc, -1), np.arange(ng)]),
        cpu_row=np.concatenate([np.arange(nc), np.full(ng, -1)]),
    )
    order = np.argsort(frame["order"], kind="stable")
    frame = {k: v[order] for k, v in frame.items()}
    if hta_compat:
        start, end = hta_round(frame["ts"], frame["dur"])
        frame["ts"], frame["dur"] = start, end - start
    cls = frame["cls"]
    frame["link"] = _links(frame["correlation"], cls)
    return RankEvents(rank=int(metadata(gpu).get("rank", -1)), names=names, **frame)


def _names(table: pa.Table, column: str) -> tuple[list[str], np.ndarray]:
    codes, texts = codes_of(table[column])
    return list(texts), codes


def _links(correlation: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Row of the event on the other side of each correlation (runtime call <-> device
    activity or sync event); -1 where there is none. HTA's ``index_correlation``."""
    link = np.full(correlation.size, -1, np.int64)
    device = ((cls == ACTIVITY) | (cls == SYNC)) & (correlation >= 0)
    host = (cls == RUNTIME) & (correlation >= 0)
    h, d = np.flatnonzero(host), np.flatnonzero(device)
    if not h.size or not d.size:
        return link
    hs = h[np.argsort(correlation[h], kind="stable")]
    keys = correlation[hs]
    at = np.minimum(np.searchsorted(keys, correlation[d]), keys.size - 1)
    hit = keys[at] == correlation[d]
    link[d[hit]] = hs[at[hit]]
    link[hs[at[hit]]] = d[hit]
    return link
