"""Build the GPU activity table (and optionally the CPU table) from a scanned trace.

The GPU activity table has one row per kernel, memcpy and memset of one rank (columns in
:data:`ACTIVITY_COLUMNS`, documented in DESIGN.md). Rows are sorted by ``ts`` (ties in
file order). Times are int64 ns on the rank's clock as written in the trace (Kineto's
``ts`` in µs times 1000, exactly). Rank-level facts go into the schema metadata under
``b"traceviz"`` as JSON (see :func:`trace_metadata`).

Where the launch of an activity is unknown (no correlation, or no runtime event with
it), ``iteration`` is taken from the activity's own start; everything ``launch_*`` and
``cpu_op*`` is null.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .. import __version__
from ..classify.collectives import dtype_bytes, parse_ranks
from ..classify.kinds import COMM, KINDS, MEM, first_match, name_kinds
from ..classify.patterns import Patterns
from . import layout as L
from .join import innermost_enclosing, match_by_key, match_flows, step_of
from .reader import ScannedTrace

SCHEMA_VERSION = 1
METADATA_KEY = b"traceviz"
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast",
               "SendRecv", "Reduce", "Gather", "Scatter", "Barrier")

ACTIVITY_COLUMNS = (
    "rank", "device", "stream", "cat", "name", "ts", "dur", "correlation", "external_id",
    "launch_ts", "launch_dur", "launch_tid", "launch_name", "cpu_op", "cpu_op_external_id",
    "kind", "iteration", "collective", "pg_name", "pg_desc", "group_size", "group_ranks",
    "msg_in_bytes", "msg_out_bytes", "dtype", "seq", "in_nelems", "out_nelems",
    "src_rank", "dst_rank", "bytes", "index")


@dataclass
class ParsedTrace:
    """Tables of one rank plus its metadata (also stored in the tables' schema)."""

    activities: pa.Table
    cpu: pa.Table | None
    meta: dict
    warnings: list[str] = field(default_factory=list)


class _Strings:
    """Canonical ids and texts of a trace's string table."""

    def __init__(self, scanned: ScannedTrace) -> None:
        self.texts = scanned.strings.texts
        self.canon = scanned.strings.canonical()
        self.cls = np.array([L.CATEGORY_CLASS.get(t, L.CLS_OTHER) for t in self.texts],
                            dtype=np.int8)

    def ids_of(self, text: str) -> np.ndarray:
        return np.array([i for i, t in enumerate(self.texts) if t == text], dtype=np.int64)

    def dictionary(self, ids: np.ndarray) -> pa.DictionaryArray:
        """Dictionary column of string ids (-1 -> null) holding only the texts used."""
        ids = np.asarray(ids, dtype=np.int64)
        mask = ids < 0
        canon = np.where(mask, -1, self.canon[np.where(mask, 0, ids)])
        uniq, inverse = np.unique(canon[~mask], return_inverse=True)
        indices = np.zeros(ids.shape[0], dtype=np.int32)
        indices[~mask] = inverse
        dictionary = pa.array([self.texts[i] for i in uniq.tolist()], pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(indices, mask=mask), dictionary)


def _nullable(values: np.ndarray, mask: np.ndarray, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type=type_, mask=mask)


def _fixed_dictionary(codes: np.ndarray, names: tuple[str, ...]) -> pa.DictionaryArray:
    mask = codes < 0
    return pa.DictionaryArray.from_arrays(
        pa.array(np.where(mask, 0, codes).astype(np.int32), mask=mask),
        pa.array(list(names), pa.string()))


def _thread_numbers(threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) numbers per thread index; -1 where the trace gave a non-numeric name."""
    pid = np.where(threads[1] < 0, threads[0], -1) if threads.size else np.empty(0, np.int64)
    tid = np.where(threads[3] < 0, threads[2], -1) if threads.size else np.empty(0, np.int64)
    return pid, tid


def build(scanned: ScannedTrace, patterns: Patterns, *, cpu: bool = False) -> ParsedTrace:
    """Join and classify the stores of ``scanned`` into the output tables."""
    s = _Strings(scanned)
    gpu = scanned.stores["gpu"]
    launch = scanned.stores["launch"]
    ops = scanned.stores["ops"]
    flows = scanned.stores["flow"]
    pid_of_thread, tid_of_thread = _thread_numbers(scanned.threads)
    join_stats: dict[str, int] = {}

    # ---- activities: kernel / memcpy / memset rows of the GPU store --------------------
    gcat = gpu.column("cat")
    gcls = s.cls[gcat] if gcat.size else np.empty(0, np.int8)
    act = np.flatnonzero(np.isin(gcls, L.ACTIVITY_CLASSES))
    g = {f: gpu.column(f)[act] for f in ("ts", "dur", "name", "cat", "thread", "device",
                                         "stream", "correlation", "external_id", "bytes",
                                         "index")}
    n = act.shape[0]
    g_cls = gcls[act]

    # ---- correlation join with runtime / driver launches ------------------------------
    lts = launch.column("ts")
    lthread = launch.column("thread")
    lcorr = launch.column("correlation")
    gcorr = g["correlation"].copy()
    if (gcorr < 0).any() or (lcorr < 0).any():
        gcorr, lcorr, from_flows = _correlation_from_flows(
            s, flows, gcorr, g["thread"], g["ts"], lcorr, lthread, lts)
        join_stats["correlation from flow events"] = from_flows
    lrow, count = match_by_key(gcorr, lcorr, g["ts"], lts)
    has_launch = lrow >= 0
    join_stats.update({
        "activities": int(n),
        "launched": int(has_launch.sum()),
        "no correlation id": int((gcorr < 0).sum()),
        "correlation without launch": int(((gcorr >= 0) & (count == 0)).sum()),
        "correlation with several launches (one kept)": int((count > 1).sum()),
    })
    lr = np.where(has_launch, lrow, 0)
    launch_ts = launch.column("ts")[lr] if n and lts.size else np.zeros(n, np.int64)
    launch_dur = launch.column("dur")[lr] if n and lts.size else np.zeros(n, np.int64)
    launch_name = np.where(has_launch, launch.column("name")[lr], -1) if lts.size else \
        np.full(n, -1)
    launch_thread = np.where(has_launch, lthread[lr], -1) if lts.size else np.full(n, -1)
    launch_tid = np.where(launch_thread >= 0, tid_of_thread[np.maximum(launch_thread, 0)],
                          -1) if n else np.zeros(0, np.int64)

    # ---- launch -> innermost enclosing cpu_op on the same thread ---------------------
    ocat = ops.column("cat")
    ocls = s.cls[ocat] if ocat.size else np.empty(0, np.int8)
    ots = ops.column("ts")
    odur = ops.column("dur")
    othread = ops.column("thread")
    oname = ops.column("name")
    oext = ops.column("external_id")
    is_op = np.flatnonzero(ocls == L.CLS_CPU_OP)
    q_thread = np.where(has_launch, launch_thread, -1)
    op_row = innermost_enclosing(ots[is_op], odur[is_op], othread[is_op], launch_ts, q_thread)
    op_row = np.where(op_row >= 0, is_op[np.maximum(op_row, 0)], -1) if is_op.size else op_row
    join_stats["launch inside a cpu_op"] = int((op_row >= 0).sum())

    # ---- iteration from ProfilerStep#N ------------------------------------------------
    step_num = np.full(len(s.texts), -1, dtype=np.int64)
    for i, text in enumerate(s.texts):
        m = patterns.iteration.match(text)
        if m:
            step_num[i] = int(m.group(1))
    is_step = np.flatnonzero(step_num[oname] >= 0) if oname.size else np.empty(0, np.int64)
    at = np.where(has_launch, launch_ts, g["ts"])
    iteration = step_of(at, ots[is_step], odur[is_step], step_num[oname[is_step]])

    # ---- kind --------------------------------------------------------------------------
    used = np.unique(g["name"])
    by_name = np.zeros(len(s.texts), dtype=np.int8)
    by_name[used] = name_kinds([s.texts[i] for i in used.tolist()], patterns)
    kind = by_name[g["name"]]
    kind[(g_cls == L.CLS_MEMCPY) | (g_cls == L.CLS_MEMSET)] = MEM

    # ---- collective metadata -------------------------------------------------------------
    meta_row = _collective_rows(scanned, s, act, op_row_source=(
        ots, odur, othread, oname), launch_ts=launch_ts, q_thread=q_thread, kind=kind)
    comm = scanned.stores["comm"]
    coll = {f: comm.column(f) for f in ("collective", "dtype", "in_nelems", "out_nelems",
                                        "group_size", "pg_name", "pg_desc", "pg_ranks", "seq",
                                        "src_rank", "dst_rank")}
    has_meta = meta_row >= 0
    mr = np.maximum(meta_row, 0)

    def meta(field: str) -> np.ndarray:
        col = coll[field]
        return np.where(has_meta, col[mr], -1) if col.size else np.full(n, -1, np.int64)

    coll_name = meta("collective")
    dtype_id = meta("dtype")
    pg_name = meta("pg_name")
    pg_desc = meta("pg_desc")
    pg_ranks = meta("pg_ranks")
    group_size = meta("group_size")
    in_nelems = meta("in_nelems")
    out_nelems = meta("out_nelems")
    collective = _collective_types(s, patterns, coll_name, g["name"], kind)
    dist = scanned.header.distributed
    ranks_list, group_size, pg_desc_text = _group_facts(s, dist, pg_name, pg_desc, pg_ranks,
                                                        group_size)
    elem = _dtype_sizes(s, dtype_id)
    msg_in = np.where((in_nelems >= 0) & (elem > 0), in_nelems * elem, -1)
    msg_out = np.where((out_nelems >= 0) & (elem > 0), out_nelems * elem, -1)

    # ---- assemble, sorted by ts (ties: file order) ------------------------------------
    rank, rank_source = scanned.header.rank(scanned.source)
    order = np.lexsort((g["index"], g["ts"]))
    device = np.where(g["device"] >= 0, g["device"],
                      pid_of_thread[g["thread"]] if n else g["device"])
    stream = np.where(g["stream"] >= 0, g["stream"],
                      tid_of_thread[g["thread"]] if n else g["stream"])
    cat_codes = np.select([g_cls == L.CLS_KERNEL, g_cls == L.CLS_MEMCPY], [0, 1], 2)
    no_launch = ~has_launch
    no_op = op_row < 0
    opr = np.maximum(op_row, 0)
    cols = {
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "device": pa.array(device.astype(np.int32)),
        "stream": pa.array(stream.astype(np.int64)),
        "cat": _fixed_dictionary(cat_codes, ("kernel", "gpu_memcpy", "gpu_memset")),
        "name": s.dictionary(g["name"]),
        "ts": pa.array(g["ts"]),
        "dur": pa.array(g["dur"]),
        "correlation": pa.array(gcorr),
        "external_id": pa.array(g["external_id"]),
        "launch_ts": _nullable(launch_ts, no_launch, pa.int64()),
        "launch_dur": _nullable(launch_dur, no_launch, pa.int64()),
        "launch_tid": _nullable(launch_tid, no_launch | (launch_tid < 0), pa.int64()),
        "launch_name": s.dictionary(launch_name),
        "cpu_op": s.dictionary(np.where(no_op, -1, oname[opr] if oname.size else -1)),
        "cpu_op_external_id": _nullable(oext[opr] if oext.size else np.zeros(n, np.int64),
                                        no_op | ((oext[opr] if oext.size else -1) < 0),
                                        pa.int64()),
        "kind": _fixed_dictionary(kind.astype(np.int32), KINDS),
        "iteration": pa.array(iteration),
        "collective": _fixed_dictionary(collective, COLLECTIVES),
        "pg_name": s.dictionary(pg_name),
        "pg_desc": pa.array(pg_desc_text, pa.string()).dictionary_encode(),
        "group_size": _nullable(group_size, group_size < 0, pa.int32()),
        "group_ranks": pa.array(ranks_list, pa.list_(pa.int32())),
        "msg_in_bytes": _nullable(msg_in, msg_in < 0, pa.int64()),
        "msg_out_bytes": _nullable(msg_out, msg_out < 0, pa.int64()),
        "dtype": s.dictionary(dtype_id),
        "seq": _nullable(meta("seq"), meta("seq") < 0, pa.int64()),
        "in_nelems": _nullable(in_nelems, in_nelems < 0, pa.int64()),
        "out_nelems": _nullable(out_nelems, out_nelems < 0, pa.int64()),
        "src_rank": _nullable(meta("src_rank"), meta("src_rank") < 0, pa.int32()),
        "dst_rank": _nullable(meta("dst_rank"), meta("dst_rank") < 0, pa.int32()),
        "bytes": _nullable(g["bytes"], (g["bytes"] < 0) | (kind != MEM), pa.int64()),
        "index": pa.array(g["index"]),
    }
    table = pa.table(cols).take(pa.array(order))
    steps = _steps(ots, odur, oname, is_step, step_num)
    meta_dict = trace_metadata(scanned, rank, rank_source, join_stats, steps)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta_dict).encode()})
    cpu_table = None
    if cpu:
        cpu_table = cpu_events_table(scanned, s, pid_of_thread, tid_of_thread)
        cpu_table = cpu_table.replace_schema_metadata(
            {METADATA_KEY: json.dumps(meta_dict).encode()})
    return ParsedTrace(activities=table, cpu=cpu_table, meta=meta_dict,
                       warnings=list(scanned.warnings))


def _correlation_from_flows(s, flows, gcorr, gthread, gts, lcorr, lthread, lts):
    """Fill missing correlation ids from launch-flow endpoints (ac2g / async)."""
    fcat = flows.column("cat")
    if fcat.size == 0:
        return gcorr, lcorr, 0
    is_launch_flow = s.cls[fcat] == L.CLS_LAUNCH_FLOW
    fph = flows.column("ph")
    fid = flows.column("id")
    fthread = flows.column("thread")
    fts = flows.column("ts")
    filled = 0
    for ph, corr, thread, ts in ((ord("f"), gcorr, gthread, gts), (ord("s"), lcorr, lthread, lts)):
        missing = np.flatnonzero(corr < 0)
        if missing.size == 0:
            continue
        sel = is_launch_flow & (fph == ph)
        found = match_flows(fid[sel], fthread[sel], fts[sel], thread[missing], ts[missing])
        corr[missing] = found
        filled += int((found >= 0).sum())
    return gcorr, lcorr, filled


def _collective_rows(scanned, s, act, op_row_source, launch_ts, q_thread, kind):
    """Row of the comm store holding each activity's collective metadata (-1: none).

    First the activity's own args (Kineto copies them onto NCCL kernels), else the
    innermost ``record_param_comms`` CPU op around its launch.
    """
    comm = scanned.stores["comm"]
    n = act.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    cstore = comm.column("store")
    if cstore.size == 0:
        return out
    crow = comm.column("row")
    pos = np.full(len(scanned.stores["gpu"]), -1, dtype=np.int64)
    pos[act] = np.arange(n)
    own = np.flatnonzero(cstore == L.GPU)
    p = pos[crow[own]]
    out[p[p >= 0]] = own[p >= 0]
    need = np.flatnonzero((out < 0) & (kind == COMM) & (q_thread >= 0))
    if need.size == 0:
        return out
    ots, odur, othread, oname = op_row_source
    rpc_ids = s.ids_of("record_param_comms")
    on_ops = np.flatnonzero(cstore == L.OPS)
    rows = crow[on_ops]
    rows = rows[np.isin(oname[rows], rpc_ids)]
    if rows.size == 0:
        return out
    entry_of_row = dict(zip(crow[on_ops].tolist(), on_ops.tolist()))
    found = innermost_enclosing(ots[rows], odur[rows], othread[rows], launch_ts[need],
                                q_thread[need])
    hit = found >= 0
    out[need[hit]] = [entry_of_row[r] for r in rows[found[hit]].tolist()]
    return out


def _collective_types(s, patterns, coll_name, kernel_name, kind) -> np.ndarray:
    """Index into COLLECTIVES for COMM rows (-1 otherwise / unknown)."""
    code_of = {c: i for i, c in enumerate(COLLECTIVES)}
    out = np.full(coll_name.shape[0], -1, dtype=np.int32)
    comm_rows = kind == COMM
    for ids, rows in ((coll_name, comm_rows & (coll_name >= 0)),
                      (kernel_name, comm_rows & (coll_name < 0))):
        uniq = np.unique(ids[rows])
        names = first_match([s.texts[i] for i in uniq.tolist()], patterns.collectives)
        lut = {u: code_of.get(c, -1) if c else -1 for u, c in zip(uniq.tolist(), names)}
        out[rows] = [lut[i] for i in ids[rows].tolist()] if rows.any() else []
    # a "Collective name" arg the patterns do not know (e.g. "wait") falls back to the kernel
    unknown = comm_rows & (coll_name >= 0) & (out < 0)
    if unknown.any():
        uniq = np.unique(kernel_name[unknown])
        names = first_match([s.texts[i] for i in uniq.tolist()], patterns.collectives)
        lut = {u: code_of.get(c, -1) if c else -1 for u, c in zip(uniq.tolist(), names)}
        out[unknown] = [lut[i] for i in kernel_name[unknown].tolist()]
    return out


def _group_facts(s, dist, pg_name, pg_desc, pg_ranks, group_size):
    """Group ranks list, size and description per row, completed from pg_config."""
    config = {str(pg.get("pg_name")): pg for pg in dist.get("pg_config") or []
              if isinstance(pg, dict)}
    n = pg_name.shape[0]
    ranks_out: list = [None] * n
    desc_out: list = [None] * n
    size = group_size.copy()
    keys = np.stack([pg_name, pg_desc, pg_ranks, group_size]) if n else np.empty((4, 0))
    uniq, inverse = np.unique(keys, axis=1, return_inverse=True) if n else (keys, [])
    facts = []
    for name_id, desc_id, ranks_id, gsize in uniq.T.tolist():
        name = s.texts[name_id] if name_id >= 0 else None
        pg = config.get(name) if name is not None else None
        ranks = parse_ranks(s.texts[ranks_id]) if ranks_id >= 0 else None
        if ranks is None and pg is not None and isinstance(pg.get("ranks"), list):
            ranks = [int(r) for r in pg["ranks"]]
        desc = s.texts[desc_id] if desc_id >= 0 else None
        if desc is None and pg is not None and pg.get("pg_desc") is not None:
            desc = str(pg["pg_desc"])
        if gsize < 0:
            if pg is not None and isinstance(pg.get("pg_size"), int):
                gsize = pg["pg_size"]
            elif ranks is not None:
                gsize = len(ranks)
        facts.append((ranks, desc, gsize))
    for row, k in enumerate(np.asarray(inverse).reshape(-1).tolist()):
        ranks_out[row], desc_out[row], size[row] = facts[k]
    return ranks_out, size, desc_out


def _dtype_sizes(s, dtype_id: np.ndarray) -> np.ndarray:
    out = np.zeros(dtype_id.shape[0], dtype=np.int64)
    for d in np.unique(dtype_id[dtype_id >= 0]).tolist():
        out[dtype_id == d] = dtype_bytes(s.texts[d]) or 0
    return out


def _steps(ots, odur, oname, is_step, step_num) -> list[dict]:
    rows = sorted(zip(ots[is_step].tolist(), odur[is_step].tolist(),
                      step_num[oname[is_step]].tolist()))
    return [{"iteration": it, "ts": ts, "dur": dur} for ts, dur, it in rows]


def trace_metadata(scanned: ScannedTrace, rank: int, rank_source: str, join_stats: dict,
                   steps: list[dict]) -> dict:
    """The rank-level facts stored as JSON under ``traceviz`` in the parquet metadata."""
    h = scanned.header
    values = dict(h.values)
    dist = values.pop("distributedInfo", {}) if isinstance(values.get("distributedInfo"),
                                                              dict) else {}
    stats = dict(scanned.stats)
    stats["join"] = join_stats
    stats["bytes_read"] = scanned.bytes_read
    stats["compressed_bytes"] = scanned.compressed_bytes
    stats["truncated_at"] = scanned.truncated_at
    stats["spilled_bytes"] = scanned.budget.spilled_bytes
    stats["rows"] = {name: len(store) for name, store in scanned.stores.items()}
    threads = []
    for idx in range(scanned.threads.shape[1]):
        pidn, pids, tidn, tids = scanned.threads[:, idx].tolist()
        pid = pidn if pids < 0 else scanned.strings.texts[pids]
        tid = tidn if tids < 0 else scanned.strings.texts[tids]
        name = h.thread_names.get((pid, tid))
        threads.append({"pid": pid, "tid": tid, "name": name,
                        "process": h.process_names.get(pid),
                        "label": h.process_labels.get(pid)})
    return {
        "schema_version": SCHEMA_VERSION,
        "traceviz_version": __version__,
        "source": scanned.source,
        "compression": scanned.compression,
        "rank": rank,
        "rank_source": rank_source,
        "world_size": h.world_size(),
        "distributed": dist,
        "pg_config": dist.get("pg_config", []),
        "device_properties": values.pop("deviceProperties", []),
        "base_time_ns": values.pop("baseTimeNanoseconds", None),
        "header": values,
        "steps": steps,
        "threads": threads,
        "stats": stats,
    }


def cpu_events_table(scanned: ScannedTrace, s: _Strings, pid_of_thread: np.ndarray,
                     tid_of_thread: np.ndarray) -> pa.Table:
    """CPU-side complete events: cpu_op, user_annotation, python_function, runtime/driver."""
    python_cat = s.ids_of("python_function")
    parts = []
    for store in ("launch", "ops", "python"):
        st = scanned.stores[store]
        col = {f: st.column(f) for f, _ in L.FIELDS[store]}
        if store == "python":
            col["cat"] = np.full(len(st), python_cat[0] if python_cat.size else -1)
        parts.append((col, len(st)))
    names = ("correlation", "external_id", "seq_number", "fwd_thread_id", "python_id",
             "python_parent_id", "stream")

    def cat(field: str) -> np.ndarray:
        return np.concatenate([c[field] if field in c else np.full(k, -1, np.int64)
                               for c, k in parts]).astype(np.int64)

    ts = cat("ts")
    thread = cat("thread")
    order = np.lexsort((cat("index"), ts))
    cols = {
        "cat": s.dictionary(cat("cat")[order]),
        "name": s.dictionary(cat("name")[order]),
        "pid": pa.array(pid_of_thread[thread][order] if thread.size else thread),
        "tid": pa.array(tid_of_thread[thread][order] if thread.size else thread),
        "ts": pa.array(ts[order]),
        "dur": pa.array(cat("dur")[order]),
    }
    for f in names:
        v = cat(f)[order]
        cols[f] = _nullable(v, v < 0, pa.int64())
    cols["index"] = pa.array(cat("index")[order])
    return pa.table(cols)
