"""The per-rank build: parse a trace, classify its activities, assemble its tables.

This is where parsing (:mod:`traceviz.parse`: bytes -> columns -> joins) meets meaning
(:mod:`traceviz.classify`: kind, phase, micro-batch, group, collective). The GPU
activity table has one row per kernel, memcpy and memset of one rank (columns in
:data:`~traceviz.table.schema.ACTIVITY_COLUMNS`). Rows are sorted by ``ts`` (ties in
file order). Times are int64 ns on the rank's clock as written in the trace (Kineto's
``ts`` in µs times 1000, exactly). Rank-level facts go into the schema metadata under
``b"traceviz"`` as JSON (see :func:`traceviz.parse.metadata.trace_metadata`).

Where the launch of an activity is unknown (no correlation, or no runtime event with
it), ``iteration`` is taken from the activity's own start; everything ``launch_*`` and
``cpu_op*`` is null. Columns are built one at a time
(:class:`~traceviz.parse.output_columns.OutputColumns`) so memory stays bounded on
traces larger than it.

The CPU table (``cpu=True``) holds every CPU-side complete event (runtime / driver
calls, cpu_op, user_annotation, python_function, ...) in file order.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from .._version import __version__
from ..classify.collectives import collective_types, dtype_bytes, group_facts
from ..classify.groups import comm_groups
from ..classify.kinds import name_kinds
from ..classify.patterns import Patterns, load_patterns
from ..classify.phases import (
    BOOKKEEPING,
    MEMCPY as MEMCPY_LAUNCH,
    MEMSET as MEMSET_LAUNCH,
    ZEROING,
    LaunchFacts,
    classify,
)
from ..errors import TraceVizError, UsageError
from ..parse import fields as L
from ..parse.budget import BESIDE_BYTES_PER_ACTIVITY, MemoryPlan
from ..parse.cpu_table import CPU_ONLY_FIELDS, cpu_columns
from ..parse.device_tasks import (
    adopt_device_tasks,
    device_threads,
    unread_device_events,
)
from ..parse.links import Lookups, gathered, link
from ..parse.memory_table import memory_table
from ..parse.metadata import thread_numbers, trace_metadata
from ..parse.names import Strings
from ..parse.output_columns import OutputColumns, row_group_for
from ..parse.reader import (
    DEFAULT_BUDGET,
    DEFAULT_CHUNK,
    ScannedTrace,
    jit_loaded,
    scan_trace,
    segment_work,
)
from ..parse.text_store import TextDictionary
from ..startup import resume_collector
from ..table.arrays import column, fixed_dictionary
from ..table.inputs import note_input
from ..table.io import atomic_path, write_parquet
from ..table.parked import InMemory, Parking, release_free_memory
from ..table.schema import (
    ACTIVITY_CATS,
    ACTIVITY_COLUMNS,
    COLLECTIVES,
    COMM,
    GRAPH_LAUNCH,
    GROUPS,
    KERNEL,
    KINDS,
    MEM,
    MEMCPY,
    MEMSET,
    METADATA_KEY,
    NO_PAYLOAD,
    PHASES,
)
from ..topology.layout import Layout, config_of
from .outputs import cpu_path, memory_path

def parse_trace(src: str | os.PathLike | BinaryIO, *, cpu: bool = False,
                patterns: Patterns | str | os.PathLike | None = None,
                memory_budget: int = DEFAULT_BUDGET,
                chunk_size: int = DEFAULT_CHUNK, plan: MemoryPlan | None = None,
                topology: Layout | None = None, vpp: int | None = None,
                warn_floor: bool = False) -> ParsedTrace:
    """Parse one rank's Kineto trace (path, ``"-"`` for stdin, or a binary file object).

    ``memory_budget`` (bytes) bounds the memory of the process during the parse; see
    :mod:`traceviz.parse.budget` for how it is shared (past its shares, column buffers
    spill to a temporary folder and the joins run on parts); ``plan`` gives the shares
    explicitly instead. ``topology`` (the job's layout) resolves process groups the trace
    does not describe; ``vpp`` is the number of model chunks per pipeline stage
    (interleaved schedule; None: found from the trace). ``chunk_size`` (bytes) is the
    read buffer (it grows to hold any single event larger than it). Raises
    :class:`~traceviz.errors.TraceError` on input that is not a readable Kineto trace; a
    truncated trace is parsed up to the cut and reported in ``ParsedTrace.warnings`` and
    ``meta["stats"]["truncated_at"]``. The metadata's ``parse_options``
    (:func:`parse_options`) say what the table was parsed with. ``warn_floor`` (for a
    fresh process, whose memory is the runtime's alone): a warning when the budget is
    below the runtime plus the least data share (:meth:`MemoryPlan.below_floor`).
    Otherwise a warning when the per-activity arrays alone go past the budget
    (:meth:`MemoryPlan.beyond`: they are held in memory, not spilled).
    """
    if isinstance(src, (str, os.PathLike)) and os.fspath(src) != "-":
        note_input(src)  # never an output of this command
    if not isinstance(patterns, Patterns):
        patterns = load_patterns(patterns)
    plan = plan or MemoryPlan.measure(memory_budget, jit_loaded())
    try:
        scanned = scan_trace(src, memory_budget=plan.scan_blocks, chunk_size=chunk_size,
                             drop=None if cpu else CPU_ONLY_FIELDS,
                             segments=plan.room_for(segment_work()),
                             max_strings=plan.max_strings)
    except OSError as exc:
        raise _spill_error(src, exc) from None
    resume_collector()  # a command's start-up ends with its first scan (startup)
    try:
        parsed = build(scanned, patterns, plan, cpu=cpu, topology=topology, vpp=vpp)
    except OSError as exc:
        scanned.close()
        raise _spill_error(src, exc) from None
    except BaseException:
        scanned.close()
        raise
    parsed.set_meta("parse_options", parse_options(topology, patterns, vpp))
    if warn_floor and (low := plan.below_floor()) is not None:
        parsed.warnings.append(f"{_source_name(src)}: {low}")
    elif (over := plan.beyond(parsed.columns.n_rows)) is not None:
        parsed.warnings.append(f"{_source_name(src)}: {over}")
    return keep_alive(parsed, scanned)


def _source_name(src) -> str:
    """What to call the trace ``src`` (a path or a file object) in a message."""
    name = src if isinstance(src, (str, os.PathLike)) else getattr(src, "name", "<stream>")
    return os.fspath(name)


def _spill_error(src, exc: OSError) -> TraceVizError:
    """An error writing the spill files (the temporary folder full, read-only, gone) as
    one line naming the folder and what to do."""
    import tempfile

    return TraceVizError(
        f"{_source_name(src)}: cannot write the spill files in {tempfile.gettempdir()}: "
        f"{exc.strerror or exc}; free space there, point TMPDIR at a larger disk, or raise "
        "--memory-budget so less is spilled")


def parse_options(topology: Layout | None, patterns: Patterns, vpp: int | None) -> dict:
    """What a table is parsed with, as stored in its metadata (``parse_options``): the
    vpp given (None: found from the trace), digests of the topology (its sizes and
    order, which make every group: O(1), where its groups were O(world) per trace and
    O(world^2) per job) and the patterns, and the traceviz version. A table whose
    options differ from a request is stale."""
    def digest(value) -> str | None:
        if value is None:
            return None
        return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]

    return {"vpp": vpp, "topology": digest(None if topology is None else config_of(topology)),
            "patterns": digest(patterns.raw), "traceviz_version": __version__}




def parse_table(src: str | os.PathLike | BinaryIO, **kwargs) -> pa.Table:
    """The GPU activity table of one rank's trace (see :func:`parse_trace`)."""
    return parse_trace(src, **kwargs).activities


@dataclass
class ParsedTrace:
    """The tables of one rank (built lazily from spillable columns) and its metadata."""

    meta: dict
    warnings: list[str]
    columns: OutputColumns
    cpu_columns: OutputColumns | None = None
    memory: pa.Table | None = None  # the allocator table (with the CPU table; None: none)
    _tables: dict = field(default_factory=dict)
    _close: Callable[[], None] | None = None

    def set_meta(self, key: str, value) -> None:
        """Add a rank-level fact to the metadata (of both tables)."""
        self.meta[key] = value
        for columns in (self.columns, self.cpu_columns):
            if columns is not None:
                columns.metadata = {METADATA_KEY: json.dumps(self.meta).encode()}

    def write(self, dest: str) -> list[str]:
        """Write the GPU activity table to ``dest`` (``-``: stdout) and, when the CPU table
        was built, the CPU table to :func:`cpu_path` of ``dest``: both or neither (a
        failure leaves no file behind). Returns the paths written."""
        if self.cpu_columns is None:
            self.columns.write_parquet(dest)
            return [dest]
        if dest == "-":
            raise UsageError("the CPU table is a second file: give -o FILE, not '-'")
        with contextlib.ExitStack() as stack:
            gpu_tmp = stack.enter_context(atomic_path(dest))
            cpu_tmp = stack.enter_context(atomic_path(cpu_path(dest)))
            self.columns.write_parquet(gpu_tmp)
            self.cpu_columns.write_parquet(cpu_tmp)
            if self.memory is not None:
                write_parquet(self.memory.replace_schema_metadata(self.cpu_columns.metadata),
                              stack.enter_context(atomic_path(memory_path(dest))))
        return [dest, cpu_path(dest)] + ([memory_path(dest)] if self.memory is not None
                                         else [])

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


def build(scanned: ScannedTrace, patterns: Patterns, plan: MemoryPlan, *,
          cpu: bool = False, topology: Layout | None = None,
          vpp: int | None = None) -> ParsedTrace:
    """Link, classify and assemble the output tables of ``scanned``.

    ``plan`` bounds the joins' working set and the output columns held in memory (larger
    tables are spilled to the trace's temporary folder, which lives until
    ``scanned.close()``). A trace that spilled while scanning spills the rest of its
    blocks first, to make room for the per-activity arrays. ``topology`` (the job's
    layout) resolves groups the trace does not describe; ``vpp`` is the number of model
    chunks per stage (interleaved schedule; None: found from the trace).
    """
    if scanned.budget.spilled_bytes:
        scanned.budget.spill_all()
    work_bytes = plan.join_work
    tasks = adopt_device_tasks(scanned)
    s = Strings(scanned)
    rank, rank_source = scanned.header.rank(scanned.source)
    pipeline = _pipeline(scanned, topology, rank)
    gpu, launch, ops = (scanned.stores[k] for k in ("gpu", "launch", "ops"))
    pid_of, tid_of = thread_numbers(scanned.threads)
    gpu_names, op_names = s.used(gpu, "name"), s.used(ops, "name")
    kind_of_name = _name_kinds(s, gpu_names, patterns)
    lookups = _lookups(s, op_names, s.used(scanned.stores["python"], "name"),
                       s.used(scanned.stores["comm"], "collective"), patterns)
    said_backward = s.matches(patterns.phases["backward_name"], gpu_names)
    said_backward |= s.matches(patterns.phases["backward_name"], op_names)
    # kernels that fill memory (zeroing), and the schedule's own bookkeeping between steps
    zeroing = s.matches(patterns.phases["zeroing_kernel"], gpu_names)
    bookkeeping = (s.matches(patterns.phases["bookkeeping_kernel"], gpu_names),
                   s.matches(patterns.phases["bookkeeping_op"], op_names))
    del gpu_names, op_names
    texts_held, n_strings = scanned.strings.held_bytes(), len(scanned.strings)
    parks = plan.parks(len(gpu), held=texts_held, strings=n_strings)
    store = Parking(lambda: scanned.budget.new_path("p")) if parks else InMemory()
    links = link(scanned, lookups, work_bytes, store)
    links.stats["device tasks without a category"] = tasks
    n = links.rows.shape[0]
    out = OutputColumns(n, scanned.budget, spill_bytes=plan.output_held(n),
                        row_group=row_group_for(n, scanned.strings.texts.total_bytes()),
                        names=ACTIVITY_COLUMNS, release=store.release)

    def put(col: str, values, mask=None, type_=None):
        out.add(col, values if isinstance(values, (pa.Array, TextDictionary))
                else column(values, type_, mask))
        store.release()

    # The per-activity arrays (tens of MB each at a few million activities) are put and
    # dropped as soon as nothing later needs them: those the phases do not read go first,
    # so the phases and the columns held never meet them. Parked, each is made a slice at
    # a time (store.map / store.each) and its pages are handed back after its put.
    put("correlation", links.corr)
    links.corr = None  # type: ignore[assignment]  # dropped: memory
    launch_row = links.launch_row
    no_launch = store.map(bool, lambda r: r < 0, launch_row)
    put("launch_dur", gathered(store, launch, launch_row, "dur")[0], no_launch, pa.int64())
    launch_name, = gathered(store, launch, launch_row, "name")
    graph_launch = s.matches(GRAPH_LAUNCH, s.used(launch, "name"))  # CUDA / HIP graphs
    graph = store.unique(lambda r, name: r[graph_launch[name]], launch_row, launch_name)
    links.stats["launched by a graph launch"] = store.count(
        launch_name, lambda v: graph_launch[v])
    links.stats["graph launches"] = int(graph.shape[0])
    links.launch_row = None  # type: ignore[assignment]  # dropped: memory
    put("launch_name", s.dictionary(launch_name, store=store))
    del launch_name, graph, launch_row
    op_name, op_ext = gathered(store, ops, links.op_row, "name", "external_id")
    links.op_row = None  # type: ignore[assignment]  # dropped: memory
    put("cpu_op", s.dictionary(op_name, store=store))
    put("cpu_op_external_id", op_ext, _negative(store, op_ext), pa.int64())
    del op_ext
    name, = gathered(store, gpu, links.rows, "name")
    backward_named = store.map(bool, lambda a, b: said_backward[a] | said_backward[b],
                               name, op_name)
    # 1 memcpy, 2 memset (below), 3 a zeroing kernel, 4 bookkeeping (classify.phases)
    memory = store.map(np.int8, lambda k, o: np.select(
        [bookkeeping[0][k] & bookkeeping[1][o], zeroing[k]], [BOOKKEEPING, ZEROING], 0),
        name, op_name)
    del op_name
    kind = store.map(np.int8, kind_of_name.__getitem__, name)
    # a kernel with collective metadata (its own args, or the record_param_comms its
    # launch ran in) is a collective whatever its name says
    for lo, hi in store.slices(n):
        cls, k = links.cls[lo:hi], kind[lo:hi]
        k[((links.comm_row[lo:hi] >= 0) | links.in_rpc[lo:hi]) & (cls == L.CLS_KERNEL)] = COMM
        k[(cls == L.CLS_MEMCPY) | (cls == L.CLS_MEMSET)] = MEM
        memory[lo:hi][k == COMM] = 0
        memory[lo:hi][cls == L.CLS_MEMCPY] = MEMCPY_LAUNCH
        memory[lo:hi][cls == L.CLS_MEMSET] = MEMSET_LAUNCH
        del cls, k
    links.in_rpc = None  # type: ignore[assignment]  # dropped: memory
    rows = links.rows
    unstated: set[int] = set()  # the threads of device activities that state no stream
    gpu_fields = functools.partial(_put_gpu_fields, put, store, gpu, rows, kind, pid_of,
                                   tid_of, s, rank, unstated)
    # the GPU fields nothing before them reads are made beside the phases (numpy and
    # Arrow, mostly without the GIL), where the budget has room for both working sets
    beside = not plan.parks(len(gpu), held=texts_held + len(gpu) * BESIDE_BYTES_PER_ACTIVITY,
                            strings=n_strings)
    with _beside(gpu_fields, beside):
        coll = _collective_meta(scanned, s, patterns, links.comm_row, kind, topology, name,
                                store, (links.block_act, links.block_entry), rank)
        links.comm_row = None  # type: ignore[assignment]  # dropped: memory
        phase, microbatch, chunk, evidence = _phases(s, patterns, links, coll, memory,
                                                     backward_named, pipeline, vpp, store)
        del memory, backward_named
        stats, steps, cls = links.stats, links.steps, links.cls
        launch_ts, launch_thread, iteration = links.launch_ts, links.launch_thread, links.iteration
        del links
        classification = {"vpp": evidence.pop("vpp"), "pp": pipeline[0], "stage": pipeline[1],
                          "microbatch_evidence": evidence,
                          "phases": {PHASES[k]: int(c) for k, c in
                                     enumerate(store.bincount(phase, len(PHASES))) if c},
                          "comm_group_evidence": coll.evidence}
        put("launch_ts", launch_ts, no_launch, pa.int64())
        del launch_ts, no_launch
        launch_tid = store.map(np.int64, lambda t: np.where(t >= 0, tid_of[np.maximum(t, 0)], -1),
                               launch_thread)
        put("launch_tid", launch_tid, _negative(store, launch_tid), pa.int64())
        del launch_thread, launch_tid
        put("iteration", iteration)
        del iteration
        put("phase", fixed_dictionary(phase, PHASES, store))
        put("microbatch", microbatch)
        put("chunk", chunk)
        del phase, microbatch, chunk
        _collective_columns(coll, s, patterns, name, put, store)
        del coll
        put("cat", fixed_dictionary(store.map(np.int32, lambda c: np.select(
            [c == L.CLS_KERNEL, c == L.CLS_MEMCPY], [KERNEL, MEMCPY], MEMSET), cls),
            ACTIVITY_CATS, store))
        del cls
        put("name", s.dictionary(name, store=store))
        del name
        put("kind", fixed_dictionary(kind, KINDS, store))
    kinds = {KINDS[k]: int(c) for k, c in enumerate(store.bincount(kind, len(KINDS))) if c}
    meta = trace_metadata(scanned, rank, rank_source, stats, steps, kinds)
    meta["stats"]["parked_bytes"] = store.parked_bytes
    meta["classification"] = classification
    # their stream is their thread's id; HTA leaves such activities out (--hta-compat)
    meta["streams_unstated"] = sorted(unstated)
    out.metadata = {METADATA_KEY: json.dumps(meta).encode()}
    unread = unread_device_events(scanned, s.cls)
    if unread:
        meta["stats"]["device events not read"] = unread
        scanned.warnings.append(
            f"{scanned.source}: " + ", ".join(f"{n} {cat or '(no category)'}"
                                              for cat, n in unread.items())
            + " events on a device's timeline are of a kind traceviz does not read as "
              "device activities; their time is not in the tables")
    negative = meta["stats"]["notes"].get(L.NOTE_NAMES[L.S_NEG_DUR])
    if negative:
        scanned.warnings.append(
            f"{scanned.source}: {negative} complete event(s) with a negative dur: kept, "
            "each lasting 0 in every interval and breakdown (a clock or profiler fault)")
    cpu_out, allocator = None, None
    if cpu:
        cpu_out = cpu_columns(scanned, s, pid_of, tid_of, plan.output_held(n),
                              device_threads(scanned))
        cpu_out.metadata = dict(out.metadata)
        allocator = memory_table(scanned, pid_of, tid_of)
    release_free_memory()
    return ParsedTrace(meta=meta, warnings=list(scanned.warnings), columns=out,
                       cpu_columns=cpu_out, memory=allocator)


@dataclass
class CollectiveMeta:
    """Collective metadata of the activities that have it (a small share of the rows).

    ``has`` holds their row numbers (activity order); ``fields`` the comm store's int64
    fields per such row (-1 unknown; a coalesced block's kernel: its first op's);
    ``ranks`` / ``size`` / ``desc_code`` the group facts completed from pg_config (see
    :func:`~traceviz.classify.collectives.group_facts`); ``groups`` the comm_group per
    activity (index into GROUPS, -1 for non-COMM rows). ``comm`` holds the row numbers of
    the COMM activities; ``at`` / ``stated`` where each is in ``has``, and whether it is.
    Per row of ``has`` (:func:`_block_ops`): ``in_bytes`` / ``out_bytes`` (-1 unknown),
    ``recv_from`` / ``send_to`` (the peers of its receives / sends, None: none) and
    ``direction`` (1 sends, 2 receives, 3 both, 0 neither).
    """

    n: int
    has: np.ndarray
    comm: np.ndarray
    at: np.ndarray
    stated: np.ndarray
    fields: dict[str, np.ndarray]
    ranks: list
    size: np.ndarray
    desc_code: np.ndarray
    descs: list[str]
    groups: np.ndarray
    evidence: dict[str, int]
    store: InMemory  # where the per-activity arrays are made
    in_bytes: np.ndarray
    out_bytes: np.ndarray
    recv_from: list
    send_to: list
    direction: np.ndarray

    def full(self, values: np.ndarray, dtype=np.int32) -> np.ndarray:
        """Per-activity array: ``values`` at ``has``, -1 elsewhere (int32 unless the
        values need more: counts, bytes, sequence numbers)."""
        out = self.store.full(self.n, -1, dtype)
        self.store.scatter(out, self.has, values)
        return out


COMM_FIELDS = ("collective", "dtype", "pg_name", "pg_desc", "pg_ranks", "group_size",
               "in_nelems", "out_nelems", "seq", "src_rank", "dst_rank")


def _collective_meta(scanned: ScannedTrace, s: Strings, patterns: Patterns,
                     comm_row: np.ndarray, kind: np.ndarray, topology: Layout | None,
                     name: np.ndarray, store: InMemory,
                     blocks: tuple[np.ndarray, np.ndarray], rank: int = -1) -> CollectiveMeta:
    """Gather the collective metadata of the rows that have it and the comm_group of the
    collectives (from compact arrays of those rows: nothing per activity but the
    result); ``blocks``: the ops of coalesced blocks (activity positions, comm entries:
    :func:`~traceviz.parse.links.coalescing_blocks`)."""
    comm = scanned.stores["comm"]
    n = comm_row.shape[0]
    has = store.positions(comm_row, lambda v: v >= 0)
    entry = store.take(comm_row, has)
    fields = {f: (comm.column(f)[entry].astype(np.int64) if has.size
                  else np.zeros(0, dtype=np.int64)) for f in COMM_FIELDS}
    ranks, size, desc_code, descs = group_facts(
        s.texts, scanned.header.distributed, fields["pg_name"], fields["pg_desc"],
        fields["pg_ranks"], fields["group_size"])
    ph = patterns.phases
    stated_names = _distinct(fields["collective"])
    p2p_name = s.matches(ph["p2p_send"], stated_names) | s.matches(ph["p2p_recv"], stated_names)
    in_bytes, out_bytes, recv_from, send_to, direction = _block_ops(
        s, patterns, comm, has, fields, blocks)
    rows = store.positions(kind, lambda k: k == COMM)  # the collectives
    comm_names = store.take(name, rows)
    named = _distinct(comm_names)
    by_kernel = s.lookup(np.int32, -1)
    for label, pattern in reversed(patterns.kernel_groups):  # the first pattern wins
        by_kernel[s.matches(pattern, named)] = GROUPS.index(label)
    at, stated = _found_in(has, rows)  # rows[j] is has[at[j]] where stated
    code = np.full(rows.shape[0], -1, dtype=np.int32)
    code[stated] = desc_code[at[stated]]
    said = np.flatnonzero(stated)
    p2p_rows = said[p2p_name[fields["collective"][at[said]]]]
    found, evidence = comm_groups(
        np.ones(rows.shape[0], dtype=bool), code, descs,
        {j: ranks[a] for j, a in zip(said.tolist(), at[said].tolist())}, patterns,
        topology, set(p2p_rows.tolist()), by_kernel[comm_names],
        _in_one_pipeline(p2p_rows, at, rank, recv_from, send_to, topology))
    groups = store.full(n, -1, np.int8)
    store.scatter(groups, rows, found)
    return CollectiveMeta(n, has, rows, at, stated, fields, ranks, size, desc_code, descs,
                          groups, evidence, store, in_bytes, out_bytes, recv_from, send_to,
                          direction)


def _in_one_pipeline(p2p_rows: np.ndarray, at: np.ndarray, rank: int, recv_from: list,
                     send_to: list, topology: Layout | None) -> set[int]:
    """The send / receive rows (of ``p2p_rows``; ``at`` maps a row to its metadata)
    whose rank and peers are all in one pipeline group of the layout, whatever process
    group they ran on (interleaved Megatron's, or a pipelining job's on the default
    group)."""
    if topology is None or rank < 0 or not p2p_rows.size:
        return set()
    mine = [frozenset(g) for g in topology.generator("dense", "pp")
            if len(g) > 1 and rank in g]
    out = set()
    for j, a in zip(p2p_rows.tolist(), at[p2p_rows].tolist()):
        peers = (recv_from[a] or []) + (send_to[a] or [])
        if peers and any(set(peers) <= g for g in mine):
            out.add(j)
    return out


def _block_ops(s: Strings, patterns: Patterns, comm, has: np.ndarray,
               fields: dict[str, np.ndarray], blocks: tuple[np.ndarray, np.ndarray]):
    """Per row of ``has``: message bytes in / out (the sum over a coalesced block's
    ops; -1 where an op's size or dtype is unknown), the peers it receives from and sends
    to (global ranks, an op's ``Src Rank`` / ``Dst Rank``; None: none), and its
    direction (1 sends, 2 receives, 3 both, 0 neither; from the ``Collective name``
    of each op). A row outside every block is one op: its own fields."""
    act, entry = blocks
    # one op per row of ``has``, or the block's ops in its place
    in_block = np.isin(has, act)
    op_row = np.concatenate([np.flatnonzero(~in_block), np.searchsorted(has, act)])
    ops = {f: np.concatenate([fields[f][~in_block], comm.column(f)[entry].astype(np.int64)])
           for f in ("collective", "dtype", "in_nelems", "out_nelems", "src_rank",
                     "dst_rank")}
    order = np.argsort(op_row, kind="stable")  # a block's ops stay in their order
    op_row = op_row[order]
    ops = {f: v[order] for f, v in ops.items()}
    dtypes = _distinct(ops["dtype"])
    elem = np.zeros(int(dtypes.max(initial=-1)) + 2, dtype=np.int64)  # id -1: the last
    elem[dtypes] = [dtype_bytes(s.texts[d]) or 0 for d in dtypes.tolist()]
    e = elem[ops["dtype"]]
    k = has.shape[0]

    def summed(nelems: np.ndarray) -> np.ndarray:
        each = np.where((nelems >= 0) & (e > 0), nelems * e, -1)
        total = np.bincount(op_row, weights=np.maximum(each, 0), minlength=k).astype(np.int64)
        unknown = np.bincount(op_row, weights=each < 0, minlength=k) > 0
        return np.where(unknown, -1, total)

    named = _distinct(ops["collective"])
    send = s.matches(patterns.phases["p2p_send"], named)[ops["collective"]]
    recv = s.matches(patterns.phases["p2p_recv"], named)[ops["collective"]]
    # a plain op states its peer in either field; a block's sends / receives by name
    to = np.where(send | (~recv & (ops["dst_rank"] >= 0)), ops["dst_rank"], -1)
    frm = np.where(recv | (~send & (ops["src_rank"] >= 0)), ops["src_rank"], -1)
    direction = np.zeros(k, dtype=np.int8)
    np.bitwise_or.at(direction, op_row, (send * 1 + recv * 2).astype(np.int8))
    return (summed(ops["in_nelems"]), summed(ops["out_nelems"]), _peer_lists(op_row, frm, k),
            _peer_lists(op_row, to, k), direction)


def _peer_lists(op_row: np.ndarray, peer: np.ndarray, k: int) -> list:
    """Per row ``0..k-1``: the known peers (``peer >= 0``) of its ops, in op order;
    None where it has none."""
    out: list = [None] * k
    sel = np.flatnonzero(peer >= 0)
    for row, p in zip(op_row[sel].tolist(), peer[sel].tolist()):
        if out[row] is None:
            out[row] = []
        out[row].append(p)
    return out


def _distinct(ids: np.ndarray) -> np.ndarray:
    """The distinct string ids (ascending) among ``ids`` (-1: none)."""
    return np.unique(ids[ids >= 0])


@contextlib.contextmanager
def _beside(work: Callable[[], None], at_once: bool) -> Iterator[None]:
    """Run ``work()`` in a second thread while the block runs (its error raised when the
    block ends; the block's own error waits for it first: it may read the trace's spill
    files), or after the block where not ``at_once``."""
    if not at_once:
        yield
        work()
        return
    with ThreadPoolExecutor(1, thread_name_prefix="beside") as pool:
        done = pool.submit(work)
        yield
        done.result()


def _put_gpu_fields(put: Callable, store: InMemory, gpu, rows: np.ndarray, kind: np.ndarray,
                    pid_of: np.ndarray, tid_of: np.ndarray, s: Strings, rank: int,
                    unstated: set[int]) -> None:
    """Put the GPU fields that nothing else reads (``ts`` to ``rank``), one at a time,
    each gathered from the ``gpu`` store at ``rows`` (``kind``: final, read only);
    ``unstated`` gets the thread ids standing in for the streams events do not state."""

    def stream_of(st: np.ndarray, th: np.ndarray) -> np.ndarray:
        unknown = st < 0
        if unknown.any():
            unstated.update(int(t) for t in np.unique(tid_of[th[unknown]]))
        return _stated(st, tid_of, th)

    def field(name: str) -> np.ndarray:
        return gathered(store, gpu, rows, name)[0]

    def not_mem(values: np.ndarray, unknown) -> np.ndarray:
        """Where a memory column is null: unknown values, and rows that are no memcpy /
        memset."""
        return store.map(bool, lambda v, k: unknown(v) | (k != MEM), values, kind)

    put("ts", field("ts"))
    put("index", field("index"))
    put("dur", field("dur"))
    thread = field("thread")  # where the event states no device / stream: its pid / tid
    device, stream = field("device"), field("stream")
    put("device", store.map(np.int32, lambda d, th: _stated(d, pid_of, th), device, thread))
    put("stream", store.map(np.int64, stream_of, stream, thread))
    del thread, device, stream
    external_id = field("external_id")
    put("external_id", store.map(np.int64, lambda v: np.maximum(v, -1), external_id))
    del external_id
    bytes_ = field("bytes")
    put("bytes", bytes_, not_mem(bytes_, lambda v: v < 0), pa.int64())
    del bytes_
    bandwidth = field("bandwidth")
    bw = store.map(np.float64, s.floats, bandwidth)
    del bandwidth
    put("memory_bw_gbps", bw, not_mem(bw, np.isnan), pa.float64())
    del bw
    put("rank", store.full(rows.shape[0], rank, np.int32))


def _negative(store: InMemory, values: np.ndarray) -> np.ndarray:
    """Where ``values`` are negative (unknown), made in ``store``."""
    return store.map(bool, lambda v: v < 0, values)


def _found_in(sorted_rows: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``: its index in ``sorted_rows`` and whether it is there."""
    if not sorted_rows.size:
        return np.zeros(rows.shape[0], dtype=np.int64), np.zeros(rows.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(sorted_rows, rows), sorted_rows.shape[0] - 1)
    return at, sorted_rows[at] == rows


def _collective_columns(coll: CollectiveMeta, s: Strings, patterns: Patterns,
                        name: np.ndarray, put, store: InMemory) -> None:
    """Put the collective metadata columns and comm_group. Each column is expanded to
    full length just before ``put`` (in ``store``) and dropped right after it."""
    n, f, full = coll.n, coll.fields, coll.full
    said = np.full(coll.comm.shape[0], -1, dtype=np.int64)  # the Collective name arg, if any
    said[coll.stated] = f["collective"][coll.at[coll.stated]]
    types = store.full(n, -1, np.int32)
    store.scatter(types, coll.comm, collective_types(s.texts, patterns, said,
                                                     store.take(name, coll.comm),
                                                     np.ones(coll.comm.shape[0], dtype=bool)))
    del said
    put("collective", fixed_dictionary(types, COLLECTIVES, store))
    del types
    put("pg_name", s.dictionary(f["pg_name"], n, coll.has, store))
    code = full(coll.desc_code)
    put("pg_desc", fixed_dictionary(code, tuple(coll.descs), store))
    del code
    size = full(coll.size)
    put("group_size", size, _negative(store, size), pa.int32())
    del size
    put("group_ranks", _list_column(n, coll.has, coll.ranks, store))
    put("comm_group", fixed_dictionary(coll.groups, GROUPS, store))
    for col, values in (("msg_in_bytes", coll.in_bytes), ("msg_out_bytes", coll.out_bytes)):
        v = full(values, np.int64)
        put(col, v, _negative(store, v), pa.int64())
        del v
    put("dtype", s.dictionary(f["dtype"], n, coll.has, store))
    for col, t in (("seq", pa.int64()), ("in_nelems", pa.int64()), ("out_nelems", pa.int64())):
        v = full(f[col], np.int64)
        put(col, v, _negative(store, v), t)
        del v
    put("src_rank", _list_column(n, coll.has, coll.recv_from, store))
    put("dst_rank", _list_column(n, coll.has, coll.send_to, store))


def _stated(values: np.ndarray, of_thread: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """``values`` (changed in place) with its unknown (negative) entries replaced by
    ``of_thread`` of the event's thread."""
    unknown = np.flatnonzero(values < 0)
    values[unknown] = of_thread[thread[unknown]]
    return values


NAMES_AT_ONCE = 1 << 16  # distinct names decoded and classified at a time


def _name_kinds(s: Strings, names_used: np.ndarray, patterns: Patterns) -> np.ndarray:
    """Per-string lookup: the kind of every string used as a GPU activity's name
    (``names_used``, ascending ids; each distinct name is classified once)."""
    kind_of_name = s.lookup(np.int8, 0)
    for lo in range(0, names_used.shape[0], NAMES_AT_ONCE):  # texts decoded a part at a time
        part = names_used[lo:lo + NAMES_AT_ONCE]
        kind_of_name[part] = name_kinds(list(s.texts.select(part)), patterns)
    return kind_of_name


def _lookups(s: Strings, op_names: np.ndarray, frame_names: np.ndarray,
             collective_names: np.ndarray, patterns: Patterns) -> Lookups:
    """The per-string facts the joins need (which names are steps, autograd nodes,
    frames, ...), from the patterns; the joins read them by the names of CPU ops and
    annotations (``op_names``), of python frames (``frame_names``) and the ``Collective
    name`` args (``collective_names``; ascending ids), so only those are matched."""
    ph = patterns.phases
    is_rpc = s.lookup(bool, False)
    is_rpc[s.ids_of("record_param_comms")] = True
    recompute_node = s.matches(ph["recompute_op"], op_names)
    is_transfer = s.lookup(bool, False)
    for name, pattern in patterns.collectives:
        if name not in NO_PAYLOAD:
            is_transfer |= s.matches(pattern, collective_names)
    return Lookups(
        category_class=s.cls, step_number=s.numbers(patterns.iteration, op_names),
        is_rpc=is_rpc, is_node=s.matches(ph["autograd_node"], op_names) | recompute_node,
        is_recompute_node=recompute_node,
        is_optimizer_annotation=s.matches(ph["optimizer_annotation"], op_names),
        is_coalesced=s.matches(patterns.coalesced, op_names), is_transfer=is_transfer,
        is_loss_scale=s.matches(ph["loss_scale_op"], op_names),
        frame={k: s.matches(ph[k], frame_names)
               for k in ("forward_step", "backward_step", "recompute_frame",
                         "optimizer_frame", "interleaved_schedule", "pipelined_schedule")})


def _pipeline(scanned: ScannedTrace, topology: Layout | None, rank: int
              ) -> tuple[int, int | None]:
    """(PP size, this rank's stage; None unknown) from the topology, else from this
    rank's PIPELINE_MODEL_PARALLEL_GROUP in pg_config."""
    if topology is not None:
        stage = topology.coordinates(rank)["pp_rank"] if 0 <= rank < topology.world else None
        return topology.pp, stage
    for pg in scanned.header.distributed.get("pg_config") or []:
        if isinstance(pg, dict) and pg.get("pg_desc") == "PIPELINE_MODEL_PARALLEL_GROUP":
            listed = pg.get("ranks")
            ranks = listed if isinstance(listed, list) else []
            size = int(pg.get("pg_size") or len(ranks) or 1)
            return size, ranks.index(rank) if rank in ranks else None
    return 1, 0


def _phases(s: Strings, patterns: Patterns, links, coll: CollectiveMeta, memory: np.ndarray,
            backward_named: np.ndarray, pipeline: tuple[int, int | None], vpp: int | None,
            store: InMemory):
    """Phase, micro-batch and chunk per activity (see classify.phases). P2P sends and
    receives are those of the pipeline group (or of an unknown group): CP's ring
    exchanges are sends / receives too, but inside one micro-batch op."""
    groups = store.take(coll.groups, coll.has)
    pp_group = (groups == GROUPS.index("PP")) | (groups == GROUPS.index("OTHER"))
    # 1 a send, 2 a receive (also a block that sends too: the step after it waits for
    # what it receives), 0 neither
    said = np.where(pp_group, np.where(coll.direction & 2, 2, coll.direction & 1), 0)
    p2p = store.full(coll.n, 0, np.int8)
    store.scatter(p2p, coll.has, said.astype(np.int8))
    del groups, pp_group, said
    facts = LaunchFacts(ts=links.launch_ts, end=links.launch_end,
                        thread=links.launch_thread,
                        iteration=links.iteration, p2p=p2p, recompute=links.recompute,
                        optimizer=links.optimizer, forward_ts=links.forward_ts,
                        forward_ops=links.forward_ops,
                        memory=memory, backward_named=backward_named,
                        autograd=links.autograd, in_op=links.in_op)
    frames = {k: (ts, ts + dur) for k, (ts, dur) in links.frames.items()}
    interleaved = (True if links.schedule_frames["interleaved_schedule"] else
                   False if links.schedule_frames["pipelined_schedule"] else None)
    pp, stage = pipeline
    return classify(facts, frames, links.main_thread, pp, vpp, stage, interleaved, store)


def _list_column(n: int, rows: np.ndarray, lists: list, store: InMemory) -> pa.ListArray:
    """A list<int32> column of ``n`` rows holding ``lists[j]`` at ``rows[j]`` (``rows``
    ascending; else null)."""
    ends = np.zeros(len(lists) + 1, dtype=np.int64)  # values before rows[j]: ends[j]
    np.cumsum([len(x) if x is not None else 0 for x in lists], out=ends[1:])
    offsets = store.each(n + 1, np.int32, lambda lo, hi: ends[np.searchsorted(
        rows, np.arange(lo, hi))])
    values = np.array([r for x in lists if x is not None for r in x], dtype=np.int32)
    valid = store.full(n, False, bool)
    store.scatter(valid, rows, np.array([x is not None for x in lists], dtype=bool))
    # from buffers: ListArray.from_arrays(mask=...) imports pyarrow.compute (~75 ms of
    # every parse's start-up)
    return pa.Array.from_buffers(
        pa.list_(pa.int32()), n,
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets)],
        children=[column(np.asarray(values, dtype=np.int32))])


def keep_alive(parsed: ParsedTrace, scanned: ScannedTrace) -> ParsedTrace:
    """Delete ``scanned``'s temporary folder on ``parsed.close()`` or once it is garbage."""
    parsed._close = weakref.finalize(parsed, scanned.close)
    return parsed
