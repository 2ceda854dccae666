"""Chrome-trace events (Perfetto UI, chrome://tracing) of what the analyses computed:
per rank, one extra process ``traceviz rank R`` with

* thread 1 ``steps``: one slice per micro-batch step and per optimizer span;
* thread 2 ``communication``: one slice per COMM kernel, named by parallel group and
  collective, with its size (nccl-tests' S), group, Seq and bus bandwidth;
* a counter ``collectives in flight``;
* with ``kernels``: thread ``stream S`` per GPU stream with every kernel / memcpy /
  memset, named and labelled (kind, phase, micro-batch, group);

and the counter tracks of :mod:`traceviz.analysis.counters`. ``ts`` is int ns in the
events here; :func:`.trace_copy.event_json` prints exact µs.
"""
from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..analysis.counters import CounterTracks
from ..analysis.tracks import RankTracks
from ..table.io import atomic_path
from .trace_copy import event_json

PID_BASE = 900_000_000  # far from Kineto's pids (process ids, device ids)


def rank_events(tr: RankTracks, kernels: bool = False) -> Iterator[dict]:
    """The events of one rank's tracks (see the module doc)."""
    pid = PID_BASE + tr.rank
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
           "args": {"name": f"traceviz rank {tr.rank}"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
           "args": {"sort_index": tr.rank}}
    for tid, name in ((1, "steps"), (2, "communication")):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
               "args": {"name": name}}
    st = tr.steps
    for k in range(st.start.shape[0]):
        ph, m, c = st.phase[k], int(st.microbatch[k]), int(st.chunk[k])
        name = ph if m < 0 else f"{ph} mb{m}" + (f" chunk{c}" if c > 0 else "")
        yield {"ph": "X", "name": name, "pid": pid, "tid": 1, "ts": int(st.start[k]),
               "dur": int(st.end[k] - st.start[k]),
               "args": {"iteration": int(st.iteration[k]), "phase": ph, "microbatch": m,
                        "chunk": c, "kernels": int(st.kernels[k])}}
    for i in tr.comm_rows.tolist():
        args = {"group": tr.group[i], "collective": tr.collective[i],
                "process_group": tr.process_group[i], "seq": int(tr.seq[i]),
                "group_size": int(tr.group_size[i])}
        if tr.nbytes[i] >= 0:
            args["bytes"] = int(tr.nbytes[i])
            if np.isfinite(tr.busbw[i]):
                args["busbw_gbps"] = round(float(tr.busbw[i]), 3)
        yield {"ph": "X", "name": f"{tr.group[i] or '?'} {tr.collective[i] or 'comm'}",
               "pid": pid, "tid": 2, "ts": int(tr.ts[i]), "dur": int(tr.end[i] - tr.ts[i]),
               "args": args}
    for when, n in zip(*(a.tolist() for a in tr.in_flight)):
        yield {"ph": "C", "name": "collectives in flight", "pid": pid, "ts": when,
               "args": {"collectives": n}}
    if kernels:
        yield from _kernel_events(tr, pid)


def _kernel_events(tr: RankTracks, pid: int) -> Iterator[dict]:
    for s in np.unique(tr.stream).tolist():
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": 100 + s, "ts": 0,
               "args": {"name": f"stream {s}"}}
    for i in range(tr.ts.shape[0]):
        args = {"kind": tr.kind[i], "phase": tr.phase[i], "microbatch": int(tr.microbatch[i])}
        if tr.group[i]:
            args["group"] = tr.group[i]
        yield {"ph": "X", "name": tr.name[i], "pid": pid, "tid": 100 + int(tr.stream[i]),
               "ts": int(tr.ts[i]), "dur": int(tr.end[i] - tr.ts[i]), "args": args}


def counter_events(tracks: CounterTracks) -> Iterator[dict]:
    """Counter events (``ph: C``) of one rank's counter tracks: "Queue Length" per stream
    (``id`` the stream, args ``{"Queue Length": n}``) and one per memcpy / memset
    subtype (args ``{"Memcpy BW": GB/s}``), on the GPU's process."""
    for stream, (pid, t, length) in tracks.queue.items():
        for ts, n in zip(t.tolist(), length.tolist()):
            yield {"ph": "C", "name": "Queue Length", "pid": pid, "id": stream, "ts": ts,
                   "args": {"Queue Length": n}}
    for sub, (pid, t, bw) in tracks.bandwidth.items():
        for ts, v in zip(t.tolist(), bw.tolist()):
            yield {"ph": "C", "name": sub, "pid": pid, "ts": ts, "args": {"Memcpy BW": v}}


def write_job(ranks: Iterable[RankTracks], output: str | os.PathLike,
              kernels: bool = True) -> int:
    """One Chrome trace (gzip when ``output`` ends in .gz) of every rank's tracks, times
    as given (one clock); the number of events written."""
    count = 0
    with atomic_path(Path(output)) as tmp:
        opener = gzip.open if str(output).endswith(".gz") else open
        with opener(tmp, "wb") as out:
            out.write(b'{"displayTimeUnit": "ms", "traceEvents": [')
            for tracks in ranks:
                for event in rank_events(tracks, kernels):
                    out.write((b",\n" if count else b"\n") + event_json(event))
                    count += 1
            out.write(b"\n]}\n")
    return count
