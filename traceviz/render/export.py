"""``traceviz export``: traceviz's classification as Chrome-trace tracks (Perfetto UI,
chrome://tracing).

Per rank, one extra process ``traceviz rank R`` with:

* thread 1 ``steps``: one slice per micro-batch step (iteration, phase, micro-batch,
  chunk: first kernel start to last kernel end) and per optimizer step;
* thread 2 ``communication``: one slice per COMM kernel, named by parallel group and
  collective, with its size (nccl-tests' S), group, Seq and bus bandwidth;
* a counter ``collectives in flight``;
* with ``kernels``: thread ``stream S`` per GPU stream with every kernel / memcpy /
  memset, named and labelled (kind, phase, micro-batch, group).

A single trace keeps all its own events and gets these tracks in its own time base. A
job becomes one file of every rank's tracks (kernels included) on one clock: each rank's
times minus its offset from the collective-end clock sync. ``ts`` is int ns here; the
writers print exact µs.
"""
from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..analysis.select import codes_of, index_in, ints
from ..output import atomic_path
from .trace_inject import event_json

PID_BASE = 900_000_000  # far from Kineto's pids (process ids, device ids)
COLUMNS = ("ts", "dur", "kind", "name", "stream", "iteration", "phase", "microbatch",
           "chunk", "comm_group", "collective", "pg_name", "seq", "group_size",
           "msg_in_bytes", "msg_out_bytes")


def _text(table: pa.Table, name: str) -> list:
    codes, values = codes_of(table[name])
    values = values + [None]
    return [values[c] for c in codes.tolist()]


def rank_events(table: pa.Table, rank: int, offset_ns: int = 0,
                kernels: bool = False) -> Iterator[dict]:
    """The tracks of one rank's activity table (see the module doc)."""
    from ..analysis.calls import factors, operation_bytes
    from ..intervals import grouped_span
    from ..parse.table import COLLECTIVES

    pid = PID_BASE + rank
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
           "args": {"name": f"traceviz rank {rank}"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
           "args": {"sort_index": rank}}
    for tid, name in ((1, "steps"), (2, "communication")):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
               "args": {"name": name}}
    ts = ints(table["ts"]) - offset_ns
    end = ts + np.maximum(ints(table["dur"], 0), 0)
    kind = index_in(table["kind"], ("COMP", "COMM", "MEM"))
    phase_code, phases = codes_of(table["phase"])
    it, mb, chunk = (ints(table[c]) for c in ("iteration", "microbatch",
                                                                "chunk"))
    # micro-batch steps, and the optimizer step of each iteration (micro-batch / chunk -1)
    opt = phases.index("OPTIMIZER") if "OPTIMIZER" in phases else -2
    rows = np.flatnonzero((mb >= 0) | (phase_code == opt))
    in_step = mb[rows] >= 0
    keys = np.stack([it[rows], phase_code[rows], np.where(in_step, mb[rows], -1),
                     np.where(in_step, chunk[rows], -1)], axis=1)
    uniq, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.ravel()
    lo, hi = grouped_span(ts[rows], end[rows], group, uniq.shape[0])
    count = np.bincount(group, minlength=uniq.shape[0])
    for k in np.argsort(lo, kind="stable").tolist():
        i_, p, m, c = uniq[k].tolist()
        ph = phases[p]
        name = ph if m < 0 else f"{ph} mb{m}" + (f" chunk{c}" if c > 0 else "")
        yield {"ph": "X", "name": name, "pid": pid, "tid": 1, "ts": int(lo[k]),
               "dur": int(hi[k] - lo[k]), "args": {"iteration": i_, "phase": ph,
                                                  "microbatch": m, "chunk": c,
                                                  "kernels": int(count[k])}}
    # communication
    comm = np.flatnonzero(kind == 1)
    coll = index_in(table["collective"], COLLECTIVES)
    size = ints(table["group_size"])
    nbytes = operation_bytes(coll, ints(table["msg_in_bytes"]),
                             ints(table["msg_out_bytes"]), size)
    factor = factors(coll, size)
    group, pg, seq = _text(table, "comm_group"), _text(table, "pg_name"), ints(table["seq"])
    for i in comm.tolist():
        dur = int(end[i] - ts[i])
        args = {"group": group[i], "collective": COLLECTIVES[coll[i]] if coll[i] >= 0 else None,
                "process_group": pg[i], "seq": int(seq[i]), "group_size": int(size[i])}
        if nbytes[i] >= 0:
            args["bytes"] = int(nbytes[i])
            if dur > 0 and np.isfinite(factor[i]):
                args["busbw_gbps"] = round(float(nbytes[i] * factor[i] / dur), 3)
        yield {"ph": "X", "name": f"{group[i] or '?'} {args['collective'] or 'comm'}",
               "pid": pid, "tid": 2, "ts": int(ts[i]), "dur": dur, "args": args}
    t = np.concatenate([ts[comm], end[comm]])
    delta = np.concatenate([np.ones(comm.size, np.int64), -np.ones(comm.size, np.int64)])
    order = np.lexsort((delta, t))
    level = np.cumsum(delta[order])
    for when, n in zip(t[order].tolist(), level.tolist()):
        yield {"ph": "C", "name": "collectives in flight", "pid": pid, "ts": when,
               "args": {"collectives": n}}
    if kernels:
        yield from _kernel_events(table, pid, ts, end, mb, group)


def _kernel_events(table, pid, ts, end, mb, group) -> Iterator[dict]:
    stream = ints(table["stream"])
    names, kind, phase = (_text(table, c) for c in ("name", "kind", "phase"))
    for s in np.unique(stream).tolist():
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": 100 + s, "ts": 0,
               "args": {"name": f"stream {s}"}}
    for i in range(ts.shape[0]):
        args = {"kind": kind[i], "phase": phase[i], "microbatch": int(mb[i])}
        if group[i]:
            args["group"] = group[i]
        yield {"ph": "X", "name": names[i], "pid": pid, "tid": 100 + int(stream[i]),
               "ts": int(ts[i]), "dur": int(end[i] - ts[i]), "args": args}


def write_job(tables: Iterator[tuple[int, pa.Table]], offsets: dict[int, int],
              output: str | os.PathLike, kernels: bool = True) -> int:
    """One Chrome trace (gzip when ``output`` ends in .gz) of every rank's tracks on one
    clock; the number of events written."""
    count = 0
    with atomic_path(Path(output)) as tmp:
        opener = gzip.open if str(output).endswith(".gz") else open
        with opener(tmp, "wb") as out:
            out.write(b'{"displayTimeUnit": "ms", "traceEvents": [')
            for rank, table in tables:
                for event in rank_events(table, rank, offsets.get(rank, 0), kernels):
                    out.write((b",\n" if count else b"\n") + event_json(event))
                    count += 1
            out.write(b"\n]}\n")
    return count
