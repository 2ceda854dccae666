"""Build the GPU activity table (and optionally the CPU table) from a scanned trace.

The GPU activity table has one row per kernel, memcpy and memset of one rank (columns in
:data:`ACTIVITY_COLUMNS`, documented in DESIGN.md). Rows are sorted by ``ts`` (ties in
file order). Times are int64 ns on the rank's clock as written in the trace (Kineto's
``ts`` in µs times 1000, exactly). Rank-level facts go into the schema metadata under
``b"traceviz"`` as JSON (see :func:`trace_metadata`).

Where the launch of an activity is unknown (no correlation, or no runtime event with
it), ``iteration`` is taken from the activity's own start; everything ``launch_*`` and
``cpu_op*`` is null. Columns are built one at a time (:class:`.output_columns.OutputColumns`)
so memory stays bounded on traces larger than it.

The CPU table (``cpu=True``) holds every CPU-side complete event (runtime / driver
calls, cpu_op, user_annotation, python_function, ...) in file order.
"""
from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .. import __version__
from ..classify.collectives import dtype_bytes, parse_ranks
from ..classify.kinds import COMM, KINDS, MEM, first_match, name_kinds
from ..classify.patterns import Patterns
from . import layout as L
from .budget import MemoryPlan, release_free_memory
from ..classify.groups import GROUPS, comm_groups
from ..classify.phases import PHASES, LaunchFacts, classify
from ..topology.layout import Layout
from .links import Lookups, link
from .output_columns import OutputColumns
from .reader import ScannedTrace

SCHEMA_VERSION = 1
METADATA_KEY = b"traceviz"
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast",
               "SendRecv", "Reduce", "Gather", "Scatter", "Barrier")
ACTIVITY_COLUMNS = (
    "rank", "device", "stream", "cat", "name", "ts", "dur", "correlation", "external_id",
    "launch_ts", "launch_dur", "launch_tid", "launch_name", "cpu_op", "cpu_op_external_id",
    "kind", "iteration", "phase", "microbatch", "chunk", "comm_group", "collective",
    "pg_name", "pg_desc", "group_size", "group_ranks",
    "msg_in_bytes", "msg_out_bytes", "dtype", "seq", "in_nelems", "out_nelems",
    "src_rank", "dst_rank", "bytes", "memory_bw_gbps", "index")


@dataclass
class ParsedTrace:
    """The tables of one rank (built lazily from spillable columns) and its metadata."""

    meta: dict
    warnings: list[str]
    columns: OutputColumns
    cpu_columns: OutputColumns | None = None
    _tables: dict = field(default_factory=dict)
    _close: object = None

    def close(self) -> None:
        """Delete the temporary files behind the columns (tables already read stay)."""
        if self._close is not None:
            self._close()

    def __enter__(self) -> ParsedTrace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def activities(self) -> pa.Table:
        """The GPU activity table, in memory."""
        if "gpu" not in self._tables:
            self._tables["gpu"] = self.columns.table()
        return self._tables["gpu"]

    @property
    def cpu(self) -> pa.Table | None:
        """The CPU table (``cpu=True`` only), in memory."""
        if self.cpu_columns is None:
            return None
        if "cpu" not in self._tables:
            self._tables["cpu"] = self.cpu_columns.table()
        return self._tables["cpu"]


class Strings:
    """Per-string-id facts of one trace: texts, canonical ids, category classes.

    Every per-string lookup array here has ``len(texts) + 1`` entries: the last one is the
    value for id -1 (absent), so ``table[ids]`` is right even where ids are -1.
    """

    def __init__(self, scanned: ScannedTrace) -> None:
        self.texts = scanned.strings.texts
        self.canon = scanned.strings.canonical()
        self.cls = np.array([L.CATEGORY_CLASS.get(t, L.CLS_OTHER) for t in self.texts]
                            + [L.CLS_NONE], dtype=np.int8)

    def lookup(self, dtype, absent) -> np.ndarray:
        """A per-string lookup array filled with ``absent`` (see the class doc)."""
        return np.full(len(self.texts) + 1, absent, dtype=dtype)

    def ids_of(self, text: str) -> np.ndarray:
        return np.array([i for i, t in enumerate(self.texts) if t == text], dtype=np.int64)

    def matches(self, pattern) -> np.ndarray:
        """Per-string lookup: whether ``pattern.search`` finds the string."""
        out = self.lookup(bool, False)
        out[:-1] = [bool(pattern.search(t)) for t in self.texts]
        return out

    def numbers(self, pattern) -> np.ndarray:
        """Group 1 of ``pattern.match`` as an int per string (-1: no match)."""
        out = self.lookup(np.int64, -1)
        for i, text in enumerate(self.texts):
            m = pattern.match(text)
            if m:
                out[i] = int(m.group(1))
        return out

    def floats(self, ids: np.ndarray) -> np.ndarray:
        """The float value of each id's text (NaN: absent or not a number)."""
        values = self.lookup(np.float64, np.nan)
        for i in np.unique(ids[ids >= 0]).tolist():
            try:
                values[i] = float(self.texts[i])
            except ValueError:
                pass
        return values[ids]

    def dictionary(self, ids: np.ndarray) -> pa.DictionaryArray:
        """Dictionary column of string ids (-1 -> null) holding only the texts used.
        Works in int32 (the indices' type): 9 bytes per row besides the result."""
        canon = self.canon_lookup()[ids]  # -1 stays -1 (last entry)
        used = np.zeros(len(self.texts) + 1, dtype=bool)
        used[canon] = True
        used[-1] = False
        code = np.cumsum(used, dtype=np.int32) - 1  # dense code of each used id, O(rows)
        code[-1] = 0  # absent rows: any valid index, masked below
        mask = canon < 0
        indices = code[canon]
        del canon
        dictionary = pa.array([self.texts[i] for i in np.flatnonzero(used[:-1]).tolist()],
                              pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(indices, mask=mask), dictionary)

    def canon_lookup(self) -> np.ndarray:
        """Canonical id (int32) per string id, with the id -1 entry last (see the class
        doc)."""
        if not hasattr(self, "_canon_lookup"):
            self._canon_lookup = np.append(self.canon, np.int32(-1))
        return self._canon_lookup


def _nullable(values: np.ndarray, mask: np.ndarray, type_: pa.DataType) -> pa.Array:
    return pa.array(values, type=type_, mask=mask)


def _fixed_dictionary(codes: np.ndarray, names: tuple[str, ...]) -> pa.DictionaryArray:
    mask = codes < 0
    return pa.DictionaryArray.from_arrays(
        pa.array(np.where(mask, 0, codes).astype(np.int32), mask=mask),
        pa.array(list(names), pa.string()))


def thread_numbers(threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) numbers per thread index; -1 where the trace gave a non-numeric name."""
    if threads.size == 0:
        return np.full(1, -1, np.int64), np.full(1, -1, np.int64)
    return (np.where(threads[1] < 0, threads[0], -1), np.where(threads[3] < 0, threads[2], -1))


def build(scanned: ScannedTrace, patterns: Patterns, plan: MemoryPlan, *,
          cpu: bool = False, topology: Layout | None = None, vpp: int = 1) -> ParsedTrace:
    """Link, classify and assemble the output tables of ``scanned``.

    ``plan`` bounds the joins' working set and the output columns held in memory (larger
    tables are spilled to the trace's temporary folder, which lives until
    ``scanned.close()``). A trace that spilled while scanning spills the rest of its
    blocks first, to make room for the per-activity arrays. ``topology`` (the job's
    layout) resolves groups the trace does not describe; ``vpp`` is the number of model
    chunks per stage (interleaved schedule).
    """
    if scanned.budget.spilled_bytes:
        scanned.budget.spill_all()
    work_bytes = plan.join_work
    s = Strings(scanned)
    pp = _pipeline_size(scanned, topology)
    gpu, launch, ops = (scanned.stores[k] for k in ("gpu", "launch", "ops"))
    pid_of, tid_of = thread_numbers(scanned.threads)
    kind_of_name = s.lookup(np.int8, 0)
    is_used = s.lookup(bool, False)
    for _, cols in gpu.blocks("name"):
        is_used[cols["name"]] = True
    names_used = np.flatnonzero(is_used[:-1])
    kind_of_name[names_used] = name_kinds([s.texts[i] for i in names_used.tolist()], patterns)
    ph = patterns.phases
    is_rpc = s.lookup(bool, False)
    is_rpc[s.ids_of("record_param_comms")] = True
    recompute_node = s.matches(ph["recompute_op"])
    lookups = Lookups(
        category_class=s.cls, step_number=s.numbers(patterns.iteration), is_rpc=is_rpc,
        is_comm_kernel=kind_of_name == COMM,
        is_node=s.matches(ph["autograd_node"]) | recompute_node,
        is_recompute_node=recompute_node,
        is_optimizer_annotation=s.matches(ph["optimizer_annotation"]),
        frame={k: s.matches(ph[k]) for k in ("forward_step", "backward_step",
                                             "recompute_frame", "optimizer_frame")})
    links = link(scanned, lookups, work_bytes)
    n = links.rows.shape[0]
    out = OutputColumns(n, scanned.budget, spill_bytes=plan.output_held(n),
                        names=ACTIVITY_COLUMNS)

    def put(col: str, values, mask=None, type_=None):
        out.add(col, values if isinstance(values, pa.Array)
                else pa.array(values, type=type_, mask=mask))

    # The per-activity arrays (tens of MB each at a few million activities) are put and
    # dropped as soon as nothing later needs them: those the phases do not read go first,
    # so the phases and the columns held never meet them.
    put("correlation", links.corr)
    links.corr = None
    no_launch = links.launch_row < 0
    lg = launch.gatherer(links.launch_row)
    links.launch_row = None
    put("launch_dur", lg("dur"), no_launch, pa.int64())
    put("launch_name", s.dictionary(lg("name")))
    del lg
    og = ops.gatherer(links.op_row)
    links.op_row = None
    put("cpu_op", s.dictionary(og("name")))
    op_ext = og("external_id")
    put("cpu_op_external_id", op_ext, op_ext < 0, pa.int64())
    del op_ext, og
    g = gpu.gatherer(links.rows)  # one GPU field at a time, in output order
    name = g("name")
    kind = kind_of_name[name]
    kind[(links.cls == L.CLS_MEMCPY) | (links.cls == L.CLS_MEMSET)] = MEM
    coll = _collective_meta(scanned, s, patterns, links.comm_row, kind == COMM, topology)
    links.comm_row = None
    phase, microbatch, chunk, evidence = _phases(s, patterns, links, coll, pp, vpp)
    stats, steps, cls = links.stats, links.steps, links.cls
    launch_ts, launch_thread, iteration = links.launch_ts, links.launch_thread, links.iteration
    del links
    classification = {"vpp": vpp, "pp": pp, "microbatch_evidence": evidence,
                      "phases": {PHASES[k]: int(c) for k, c in
                                 enumerate(np.bincount(phase, minlength=len(PHASES))) if c},
                      "comm_group_evidence": coll.evidence}
    put("launch_ts", launch_ts, no_launch, pa.int64())
    del launch_ts, no_launch
    launch_tid = np.where(launch_thread >= 0, tid_of[np.maximum(launch_thread, 0)], -1)
    put("launch_tid", launch_tid, launch_tid < 0, pa.int64())
    del launch_thread, launch_tid
    put("iteration", iteration)
    del iteration
    put("phase", _fixed_dictionary(phase.astype(np.int32), PHASES))
    put("microbatch", microbatch)
    put("chunk", chunk)
    del phase, microbatch, chunk
    _collective_columns(coll, s, patterns, name, kind, put)
    del coll
    cat_codes = np.select([cls == L.CLS_KERNEL, cls == L.CLS_MEMCPY], [0, 1], 2)
    put("cat", _fixed_dictionary(cat_codes, ("kernel", "gpu_memcpy", "gpu_memset")))
    del cat_codes, cls
    put("name", s.dictionary(name))
    del name
    put("kind", _fixed_dictionary(kind.astype(np.int32), KINDS))
    put("ts", g("ts"))
    put("index", g("index"))
    put("dur", g("dur"))
    thread = g("thread")
    put("device", np.where((d := g("device")) >= 0, d, pid_of[thread]).astype(np.int32))
    put("stream", np.where((st := g("stream")) >= 0, st, tid_of[thread]).astype(np.int64))
    del thread, d, st
    put("external_id", np.maximum(g("external_id"), -1))
    bytes_ = g("bytes")
    put("bytes", bytes_, (bytes_ < 0) | (kind != MEM), pa.int64())
    bw = s.floats(g("bandwidth"))
    put("memory_bw_gbps", bw, np.isnan(bw) | (kind != MEM), pa.float64())
    del bytes_, bw, g
    rank, rank_source = scanned.header.rank(scanned.source)
    put("rank", np.full(n, rank, dtype=np.int32))
    kinds = {KINDS[k]: int(c) for k, c in enumerate(np.bincount(kind, minlength=len(KINDS)))
             if c}
    meta = trace_metadata(scanned, rank, rank_source, stats, steps, kinds)
    meta["classification"] = classification
    out.metadata = {METADATA_KEY: json.dumps(meta).encode()}
    cpu_out = None
    if cpu:
        cpu_out = cpu_columns(scanned, s, pid_of, tid_of, plan.output_held(n))
        cpu_out.metadata = dict(out.metadata)
    release_free_memory()
    return ParsedTrace(meta=meta, warnings=list(scanned.warnings), columns=out,
                       cpu_columns=cpu_out)


@dataclass
class CollectiveMeta:
    """Collective metadata of the activities that have it (a small share of the rows).

    ``has`` holds their row numbers (activity order); ``fields`` the comm store's int64
    fields per such row (-1 unknown); ``ranks`` / ``size`` / ``desc_code`` the group
    facts completed from pg_config (see :func:`_group_facts`); ``groups`` the comm_group
    per activity (index into GROUPS, -1 for non-COMM rows).
    """

    n: int
    has: np.ndarray
    fields: dict[str, np.ndarray]
    ranks: list
    size: np.ndarray
    desc_code: np.ndarray
    descs: list[str]
    groups: np.ndarray
    evidence: dict[str, int]

    def full(self, values: np.ndarray, dtype=np.int32) -> np.ndarray:
        """Per-activity array: ``values`` at ``has``, -1 elsewhere (int32 unless the
        values need more: counts, bytes, sequence numbers)."""
        out = np.full(self.n, -1, dtype=dtype)
        out[self.has] = values
        return out


COMM_FIELDS = ("collective", "dtype", "pg_name", "pg_desc", "pg_ranks", "group_size",
               "in_nelems", "out_nelems", "seq", "src_rank", "dst_rank")


def _collective_meta(scanned: ScannedTrace, s: Strings, patterns: Patterns,
                     comm_row: np.ndarray, is_comm: np.ndarray,
                     topology: Layout | None) -> CollectiveMeta:
    """Gather the collective metadata of the rows that have it and their comm_group."""
    comm = scanned.stores["comm"]
    has = np.flatnonzero(comm_row >= 0)
    entry = comm_row[has]
    fields = {f: (comm.column(f)[entry].astype(np.int64) if has.size
                  else np.zeros(0, dtype=np.int64)) for f in COMM_FIELDS}
    ranks, size, desc_code, descs = _group_facts(
        s, scanned.header.distributed, fields["pg_name"], fields["pg_desc"],
        fields["pg_ranks"], fields["group_size"])
    code = np.full(comm_row.shape[0], -1, dtype=np.int32)
    code[has] = desc_code
    groups, evidence = comm_groups(is_comm, code, descs, dict(zip(has.tolist(), ranks)),
                                   patterns, topology)
    return CollectiveMeta(comm_row.shape[0], has, fields, ranks, size, desc_code, descs,
                          groups, evidence)


def _collective_columns(coll: CollectiveMeta, s: Strings, patterns: Patterns,
                        name: np.ndarray, kind: np.ndarray, put) -> None:
    """Put the collective metadata columns and comm_group. Each column is expanded to
    full length just before ``put``."""
    n, f, full = coll.n, coll.fields, coll.full
    put("collective", _fixed_dictionary(
        _collective_types(s, patterns, full(f["collective"]), name, kind), COLLECTIVES))
    put("pg_name", s.dictionary(full(f["pg_name"])))
    code = full(coll.desc_code)
    put("pg_desc", pa.DictionaryArray.from_arrays(
        pa.array(np.maximum(code, 0).astype(np.int32), mask=code < 0),
        pa.array(coll.descs, pa.string())))
    size = full(coll.size)
    put("group_size", size, size < 0, pa.int32())
    put("group_ranks", _list_column(n, coll.has, coll.ranks))
    put("comm_group", _fixed_dictionary(coll.groups, GROUPS))
    elem = np.array([dtype_bytes(s.texts[d]) or 0 if d >= 0 else 0
                     for d in f["dtype"].tolist()], dtype=np.int64)
    for col, nel_field in (("msg_in_bytes", "in_nelems"), ("msg_out_bytes", "out_nelems")):
        nel = f[nel_field]
        v = full(np.where((nel >= 0) & (elem > 0), nel * elem, -1), np.int64)
        put(col, v, v < 0, pa.int64())
    put("dtype", s.dictionary(full(f["dtype"])))
    for col, t in (("seq", pa.int64()), ("in_nelems", pa.int64()), ("out_nelems", pa.int64()),
                   ("src_rank", pa.int32()), ("dst_rank", pa.int32())):
        v = full(f[col], np.int64 if t == pa.int64() else np.int32)
        put(col, v, v < 0, t)


def _pipeline_size(scanned: ScannedTrace, topology: Layout | None) -> int:
    """PP size from the topology, else this rank's PIPELINE_MODEL_PARALLEL_GROUP."""
    if topology is not None:
        return topology.pp
    for pg in scanned.header.distributed.get("pg_config") or []:
        if isinstance(pg, dict) and pg.get("pg_desc") == "PIPELINE_MODEL_PARALLEL_GROUP":
            return int(pg.get("pg_size") or len(pg.get("ranks") or [1]))
    return 1


def _phases(s: Strings, patterns: Patterns, links, coll: CollectiveMeta, pp: int,
            vpp: int):
    """Phase, micro-batch and chunk per activity (see classify.phases). P2P sends and
    receives are those of the pipeline group (or of an unknown group): CP's ring
    exchanges are sends / receives too, but inside one micro-batch op."""
    ph = patterns.phases
    name = coll.full(coll.fields["collective"])
    pipeline = (coll.groups == GROUPS.index("PP")) | (coll.groups == GROUPS.index("OTHER"))
    p2p = np.where(pipeline & s.matches(ph["p2p_send"])[name], 1,
                   np.where(pipeline & s.matches(ph["p2p_recv"])[name], 2, 0)).astype(np.int8)
    facts = LaunchFacts(ts=links.launch_ts, end=links.launch_end,
                        thread=links.launch_thread,
                        iteration=links.iteration, p2p=p2p, recompute=links.recompute,
                        optimizer=links.optimizer, forward_ts=links.forward_ts)
    frames = {k: (ts, ts + dur) for k, (ts, dur) in links.frames.items()}
    return classify(facts, frames, links.main_thread, pp, vpp)


def _list_column(n: int, rows: np.ndarray, lists: list) -> pa.ListArray:
    """A list<int32> column of ``n`` rows holding ``lists[j]`` at ``rows[j]`` (else null)."""
    lengths = np.zeros(n, dtype=np.int32)
    lengths[rows] = [len(x) if x is not None else 0 for x in lists]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = np.array([r for x in lists if x is not None for r in x], dtype=np.int32)
    valid = np.zeros(n, dtype=bool)
    valid[rows] = [x is not None for x in lists]
    # from buffers: ListArray.from_arrays(mask=...) imports pyarrow.compute (~75 ms of
    # every parse's start-up)
    return pa.Array.from_buffers(
        pa.list_(pa.int32()), n,
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets)],
        children=[pa.array(values, pa.int32())])


def _collective_types(s, patterns, coll_name, kernel_name, kind) -> np.ndarray:
    """Index into COLLECTIVES for COMM rows: from the ``Collective name`` arg when the
    patterns know it, else from the kernel name; -1 for other rows and unknowns."""
    code_of = {c: i for i, c in enumerate(COLLECTIVES)}
    out = np.full(coll_name.shape[0], -1, dtype=np.int32)
    comm_rows = kind == COMM

    def assign(ids: np.ndarray, rows: np.ndarray) -> None:
        if not rows.any():
            return
        uniq = np.unique(ids[rows])
        names = first_match([s.texts[i] for i in uniq.tolist()], patterns.collectives)
        lut = np.array([code_of[c] if c else -1 for c in names], dtype=np.int32)
        out[rows] = lut[np.searchsorted(uniq, ids[rows])]

    assign(coll_name, comm_rows & (coll_name >= 0))
    assign(kernel_name, comm_rows & (out < 0))
    return out


def _group_facts(s, dist, pg_name, pg_desc, pg_ranks, group_size):
    """Group ranks, size and description of rows with collective metadata, completed from
    ``distributedInfo.pg_config``. Returns (ranks lists, sizes, description codes into
    the returned description texts); -1 / None where unknown."""
    config = {str(pg.get("pg_name")): pg for pg in dist.get("pg_config") or []
              if isinstance(pg, dict)}
    k = pg_name.shape[0]
    lists: list[list[int] | None] = [None] * k
    size = group_size.copy()
    desc_code = np.full(k, -1, dtype=np.int64)
    descs: dict[str, int] = {}
    facts: dict[tuple, tuple] = {}
    for j, key in enumerate(zip(pg_name.tolist(), pg_desc.tolist(), pg_ranks.tolist(),
                                group_size.tolist())):
        if key not in facts:
            name_id, desc_id, ranks_id, gsize = key
            pg = config.get(s.texts[name_id]) if name_id >= 0 else None
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
            facts[key] = (ranks, gsize,
                          -1 if desc is None else descs.setdefault(desc, len(descs)))
        lists[j], size[j], desc_code[j] = facts[key]
    return lists, size, desc_code, list(descs)


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


CPU_FIELDS = ("correlation", "external_id", "seq_number", "fwd_thread_id", "python_id",
              "python_parent_id", "stream")
# store fields that only the CPU table reads: not kept when it is not asked for (a
# quarter of the CPU-side bytes, all of which would be spilled on a large trace)
CPU_ONLY_FIELDS = {"launch": ("cat", "external_id", "index"),
                   "ops": ("fwd_thread_id", "stream", "index"),
                   "python": ("python_id", "python_parent_id", "index")}


def cpu_columns(scanned: ScannedTrace, s: Strings, pid_of: np.ndarray, tid_of: np.ndarray,
                work_bytes: int) -> OutputColumns:
    """CPU-side complete events (runtime/driver, cpu_op, annotations, python) in file order."""
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

    order = np.argsort(concat("index"), kind="stable")
    out = OutputColumns(order.shape[0], scanned.budget, spill_bytes=work_bytes)
    thread = concat("thread")[order]
    out.add("cat", s.dictionary(concat("cat")[order]))
    out.add("name", s.dictionary(concat("name")[order]))
    out.add("pid", pa.array(pid_of[thread]))
    out.add("tid", pa.array(tid_of[thread]))
    del thread
    out.add("ts", pa.array(concat("ts")[order]))
    out.add("dur", pa.array(concat("dur")[order]))
    for f in CPU_FIELDS:
        v = concat(f)[order]
        out.add(f, _nullable(v, v < 0, pa.int64()))
    out.add("index", pa.array(concat("index")[order]))
    return out


def keep_alive(parsed: ParsedTrace, scanned: ScannedTrace) -> ParsedTrace:
    """Delete ``scanned``'s temporary folder on ``parsed.close()`` or once it is garbage."""
    parsed._close = weakref.finalize(parsed, scanned.close)
    return parsed
