"""The GPU activity table's schema: its columns, the enums of its dictionary columns
(each named once, here), and the rank-level metadata stored with it.

A dictionary column holds the *names* below; analyses turn them into codes (the name's
position in its tuple) with :func:`traceviz.table.arrays.index_in`, and never write a
code as a bare number. The metadata is JSON under :data:`METADATA_KEY` in the parquet
key-value metadata (see :func:`metadata`).
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any

import orjson
import pyarrow as pa

from ..limits import MAX_WORLD

SCHEMA_VERSION = 1
METADATA_KEY = b"traceviz"

_TEXT = pa.dictionary(pa.int32(), pa.string())  # names repeat: stored once each
# The GPU activity table, one row per kernel / memcpy / memset (README, "The GPU activity
# table"): times and sizes int64 (ns, bytes), ranks and small counts int32, texts
# dictionary-encoded; every column nullable (null: unknown).
ACTIVITY_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("device", pa.int32()), ("stream", pa.int64()), ("cat", _TEXT),
    ("name", _TEXT), ("ts", pa.int64()), ("dur", pa.int64()), ("correlation", pa.int64()),
    ("external_id", pa.int64()), ("launch_ts", pa.int64()), ("launch_dur", pa.int64()),
    ("launch_tid", pa.int64()), ("launch_name", _TEXT), ("cpu_op", _TEXT),
    ("cpu_op_external_id", pa.int64()), ("kind", _TEXT), ("iteration", pa.int32()),
    ("phase", _TEXT), ("microbatch", pa.int32()), ("chunk", pa.int32()),
    ("comm_group", _TEXT), ("collective", _TEXT), ("pg_name", _TEXT), ("pg_desc", _TEXT),
    ("group_size", pa.int32()), ("group_ranks", pa.list_(pa.int32())),
    ("msg_in_bytes", pa.int64()), ("msg_out_bytes", pa.int64()), ("dtype", _TEXT),
    ("seq", pa.int64()), ("in_nelems", pa.int64()), ("out_nelems", pa.int64()),
    ("src_rank", pa.list_(pa.int32())), ("dst_rank", pa.list_(pa.int32())),
    ("bytes", pa.int64()),
    ("memory_bw_gbps", pa.float64()), ("index", pa.int64())])
ACTIVITY_COLUMNS = tuple(ACTIVITY_SCHEMA.names)

# Integer columns whose values grow with the row (times and ids in file or time order) or
# come in long runs (the stream, device and launch thread of consecutive activities), in
# any of traceviz's tables: written DELTA_BINARY_PACKED, where a row costs the few bits of
# its difference to the one before (a real trace's table 159 -> 128 KB and its CPU table
# 439 -> 233 KB; the 2 GB synthetic kernel-dense table, whose rows repeat, 52 -> 5 MB,
# written in 1.4 instead of 2.1 s); the other integer columns vary from row to row
# (durations, sizes) and are smaller plain + zstd.
DELTA_COLUMNS = ("ts", "launch_ts", "correlation", "external_id", "cpu_op_external_id",
                 "index", "seq", "stream", "device", "launch_tid")

# ``cat``: the activity's category (old spellings Kernel / Memcpy / Memset normalized)
ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL, MEMCPY, MEMSET = range(3)

# ``kind``: what the activity does
KINDS = ("COMP", "COMM", "MEM")
COMP, COMM, MEM = range(3)

# ``phase``: the training phase of the CPU call that launched it
PHASES = ("FWD", "BWD", "RECOMPUTE", "OPTIMIZER", "OTHER")
FWD, BWD, RECOMPUTE, OPTIMIZER, OTHER = range(5)

# ``comm_group``: the parallel group of a COMM activity (Megatron's group_desc -> group:
# README, "Definitions"); EMB / POS_EMB are the (position) embedding groups of the first
# and last pipeline stages, apart from PP's send / receive
GROUPS = ("TP", "CP", "EP", "ETP", "DP", "EDP", "PP", "EMB", "POS_EMB", "OTHER")

# ``collective``: the collective type of a COMM activity; Barrier and Handshake move no
# payload (a barrier; a kernel that only signals peers or exchanges counts, such as
# DeepEP's notify kernels)
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast",
               "SendRecv", "Reduce", "Gather", "Scatter", "Barrier", "Handshake")
NO_PAYLOAD = ("Barrier", "Handshake")


# the launch call of a CUDA / HIP graph replay (``launch_name``): the activities it
# launched ran ops captured when the graph was recorded, not ops of this launch
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")


def group(name: str) -> int:
    """Code of a ``comm_group`` name."""
    return GROUPS.index(name)


def collective(name: str) -> int:
    """Code of a ``collective`` name."""
    return COLLECTIVES.index(name)


def stored_groups(groups: object, world: int) -> list:
    """The process groups (a trace's ``distributedInfo.pg_config``) as a table's footer
    keeps them: each as stated, but a group of every rank of the world (0 .. ``world``
    - 1, the default group) without its ``ranks`` and with ``"all_ranks": true``. Every
    rank states it: kept whole, a job's footers would hold O(world^2) numbers (at
    16,384 ranks, 0.9 MB per table, and minutes to read them all).
    :func:`group_ranks` reads a stored group's ranks back."""
    out = []
    for pg in groups if isinstance(groups, list) else []:
        ranks = pg.get("ranks") if isinstance(pg, dict) else None
        # the list's length first: a world size a trace claims is never built
        if (isinstance(ranks, list) and 0 < world == len(ranks)
                and ranks == list(range(world))):
            pg = {k: v for k, v in pg.items() if k != "ranks"} | {"all_ranks": True}
        out.append(pg)
    return out


def group_ranks(pg: dict, world: object) -> list | None:
    """The ranks of a process group as the footer keeps it (:func:`stored_groups`; also
    the groups of tables that kept them whole); None where it states none readable."""
    if isinstance(pg.get("ranks"), list):
        return pg["ranks"]
    if (pg.get("all_ranks") is True and isinstance(world, int)
            and not isinstance(world, bool) and 0 < world <= MAX_WORLD):
        return list(range(world))
    return None


def cut_groups(meta: dict) -> dict:
    """``meta`` with its process groups (``pg_config`` and ``distributed``'s copy) cut to
    the pipeline groups, and ``pg_descs``: the distinct descriptions of every group the
    rank is in (kept where ``meta`` has them already). A rank's groups list every group
    it is in, its world included (O(world) per rank, O(world^2) over a job held at
    once); the job-wide analyses read only the pipeline groups and the descriptions."""
    groups = [pg for pg in meta.get("pg_config") or (meta.get("distributed") or {}).get(
        "pg_config") or [] if isinstance(pg, dict)]
    out = dict(meta)
    out["pg_descs"] = meta.get("pg_descs") or sorted(
        {str(pg.get("pg_desc") or "") for pg in groups} - {""})
    world = meta.get("world_size")
    pipes = [pg | {"ranks": ranks} for pg in groups
             if pg.get("pg_desc") == "PIPELINE_MODEL_PARALLEL_GROUP"
             and (ranks := group_ranks(pg, world)) is not None]
    out["pg_config"] = pipes
    if isinstance(meta.get("distributed"), dict):
        out["distributed"] = {**meta["distributed"], "pg_config": pipes}
    return out


def metadata(table: pa.Table) -> dict:
    """The rank-level facts (``traceviz`` schema metadata) of a table; {} when absent."""
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return orjson.loads(raw) if raw else {}


def parquet_columns(path: str | os.PathLike) -> tuple[str, ...]:
    """The column names of a parquet file, read from its footer once per version of the
    file (commands look at a job's thousands of tables several times); OSError /
    ArrowInvalid when it is not a readable parquet file."""
    return _footer(_version(path))[0]


def _version(path: str | os.PathLike) -> tuple[str, int, int]:
    """(path, mtime ns, size): a file rewritten since is another version."""
    st = os.stat(path)
    return (os.path.abspath(path), st.st_mtime_ns, st.st_size)


FACTS = ("source", "rank", "kind", "world_size")  # the small facts :func:`file_fact` answers from memory


@functools.lru_cache(maxsize=1 << 15)
def _footer(version: tuple[str, int, int]) -> tuple[tuple[str, ...], bool, dict]:
    """(the column names of ``version``, whether it has traceviz's metadata, its
    :data:`FACTS`). The rest of the metadata is not kept: a table of a job of n ranks
    states the job's process groups, O(n) bytes, and a job's thousands of footers held
    at once would be O(n^2). Room for every table of a 16,384-rank job and its CPU
    tables (~1 KB each): a job's footers are each read once, not once per look."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(version[0])
    raw = (schema.metadata or {}).get(METADATA_KEY)
    try:
        meta = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:  # damaged: its loader says so
        meta = {}
    facts = {k: meta[k] for k in FACTS if k in meta} if isinstance(meta, dict) else {}
    return tuple(schema.names), raw is not None, facts


def file_fact(path: str | os.PathLike, name: str) -> Any:
    """One of the :data:`FACTS` of a parquet file's footer (None when it states none),
    read once per version of the file; OSError / ArrowInvalid when it is not a readable
    parquet file."""
    if name not in FACTS:
        raise KeyError(name)
    return _footer(_version(path))[2].get(name)


@functools.lru_cache(maxsize=64)
def _footer_metadata(version: tuple[str, int, int]) -> bytes | None:
    """The traceviz metadata of ``version``'s footer (raw JSON), the last few kept."""
    import pyarrow.parquet as pq

    return (pq.read_schema(version[0]).metadata or {}).get(METADATA_KEY)


def file_metadata(path: str | os.PathLike) -> dict:
    """The rank-level facts of a parquet file, read from its footer only ({} when the
    file has none; OSError / ArrowInvalid when it is not a readable parquet file)."""
    raw = _footer_metadata(_version(path))
    return orjson.loads(raw) if raw else {}


def is_activity_table(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a GPU activity table written by ``traceviz parse`` (not a CPU
    table, not an analysis output). An unreadable ``.parquet`` counts as one, so that
    its loader reports why it cannot be read."""
    if os.fspath(path).endswith(".cpu.parquet"):
        return False
    try:
        names, has_metadata, _ = _footer(_version(path))
    except (OSError, pa.ArrowInvalid):
        return True
    return has_metadata and "kind" in names
