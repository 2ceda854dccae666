"""Shared constants of the scanner: stores and their fields, key tables, status codes.

The scanner sorts every complete (``ph: X``) event into one of five *stores* by its
category, and writes the fields that store needs into an ``int64`` block of shape
``(fields, rows)``. Flow events go to a sixth store. ``FIELDS`` names the rows of each
block and the narrow dtype each column gets once a block is sealed.

All times are int64 nanoseconds; ids of strings are indexes into the trace's
:class:`~traceviz.parse.strings.StringTable`; ``-1`` means absent.
"""
from __future__ import annotations

import numpy as np

from .lexer import string_hash

# ---- stores -----------------------------------------------------------------------
GPU, LAUNCH, OPS, PY, COMM, FLOW, XARGS, MEMORY = range(8)
STORE_NAMES = ("gpu", "launch", "ops", "python", "comm", "flow", "xargs", "memory")
N_STORES = len(STORE_NAMES)

FIELDS: dict[str, list[tuple[str, str]]] = {
    # device timeline: kernel, memcpy, memset, gpu_user_annotation, cuda_sync
    "gpu": [("ts", "i8"), ("dur", "i8"), ("name", "i4"), ("cat", "i4"), ("thread", "i4"),
            ("device", "i8"), ("stream", "i8"), ("correlation", "i8"), ("external_id", "i8"),
            ("bytes", "i8"), ("bandwidth", "i4"), ("index", "i8")],
    # CPU runtime / driver API calls (the launches)
    "launch": [("ts", "i8"), ("dur", "i8"), ("name", "i4"), ("cat", "i4"), ("thread", "i4"),
               ("correlation", "i8"), ("external_id", "i8"), ("index", "i8")],
    # cpu_op, user_annotation, Operator and every other CPU-side complete event
    "ops": [("ts", "i8"), ("dur", "i8"), ("name", "i4"), ("cat", "i4"), ("thread", "i4"),
            ("external_id", "i8"), ("seq_number", "i8"), ("fwd_thread_id", "i8"),
            ("stream", "i8"), ("index", "i8")],
    # python_function (with_stack traces)
    "python": [("ts", "i8"), ("dur", "i8"), ("name", "i4"), ("thread", "i4"),
               ("python_id", "i8"), ("python_parent_id", "i8"), ("index", "i8")],
    # collective metadata of any event that carries it (sparse; row = row in its store)
    "comm": [("store", "i1"), ("row", "i8"), ("collective", "i4"), ("dtype", "i4"),
             ("in_nelems", "i8"), ("out_nelems", "i8"), ("group_size", "i8"),
             ("pg_name", "i4"), ("pg_desc", "i4"), ("pg_ranks", "i4"), ("seq", "i8"),
             ("src_rank", "i8"), ("dst_rank", "i8")],
    # flow events (s / f / t)
    "flow": [("ph", "i1"), ("cat", "i4"), ("id", "i8"), ("thread", "i4"), ("ts", "i8"),
             ("bp", "i1"), ("name", "i4")],
    # sparse args only the CPU table reads (row = row in its store): what a cuda_sync
    # event waits on (critical path), the shapes record_shapes writes on a cpu_op
    "xargs": [("store", "i1"), ("row", "i8"), ("wait_stream", "i8"), ("wait_corr", "i8"),
              ("input_dims", "i4"), ("input_types", "i4"), ("concrete", "i4")],
    # the caching allocator's events (``[memory]`` instants of profile_memory=True):
    # bytes allocated (> 0) or freed (< 0), the device's totals after it, the block
    # address, the device (-1: the CPU) and its type (1: CUDA), on the thread that
    # asked; bytes, addr and device are UNREADABLE when absent or not an int64 integer
    "memory": [("ts", "i8"), ("thread", "i4"), ("bytes", "i8"), ("allocated", "i8"),
               ("reserved", "i8"), ("addr", "i8"), ("device", "i8"), ("device_type", "i8"),
               ("index", "i8")],
}


def _idx(store):
    return {f: i for i, (f, _) in enumerate(FIELDS[store])}


_G, _L, _O, _P, _C, _F, _X, _M = (_idx(s) for s in STORE_NAMES)
G_TS, G_DUR, G_NAME, G_CAT, G_THREAD = _G["ts"], _G["dur"], _G["name"], _G["cat"], _G["thread"]
G_DEVICE, G_STREAM, G_CORR, G_EXT, G_BYTES, G_BW, G_INDEX = (
    _G["device"], _G["stream"], _G["correlation"], _G["external_id"], _G["bytes"],
    _G["bandwidth"], _G["index"])
L_TS, L_DUR, L_NAME, L_CAT, L_THREAD, L_CORR, L_EXT, L_INDEX = (
    _L["ts"], _L["dur"], _L["name"], _L["cat"], _L["thread"], _L["correlation"],
    _L["external_id"], _L["index"])
O_TS, O_DUR, O_NAME, O_CAT, O_THREAD, O_EXT, O_SEQNUM, O_FWD, O_STREAM, O_INDEX = (
    _O["ts"], _O["dur"], _O["name"], _O["cat"], _O["thread"], _O["external_id"],
    _O["seq_number"], _O["fwd_thread_id"], _O["stream"], _O["index"])
P_TS, P_DUR, P_NAME, P_THREAD, P_PYID, P_PARENT, P_INDEX = (
    _P["ts"], _P["dur"], _P["name"], _P["thread"], _P["python_id"], _P["python_parent_id"],
    _P["index"])
C_STORE, C_ROW, C_COLL, C_DTYPE, C_IN, C_OUT, C_GSIZE = (
    _C["store"], _C["row"], _C["collective"], _C["dtype"], _C["in_nelems"], _C["out_nelems"],
    _C["group_size"])
C_PGNAME, C_PGDESC, C_PGRANKS, C_SEQ, C_SRC, C_DST = (
    _C["pg_name"], _C["pg_desc"], _C["pg_ranks"], _C["seq"], _C["src_rank"], _C["dst_rank"])
F_PH, F_CAT, F_ID, F_THREAD, F_TS, F_BP, F_NAME = (
    _F["ph"], _F["cat"], _F["id"], _F["thread"], _F["ts"], _F["bp"], _F["name"])
X_STORE, X_ROW, X_WAIT_STREAM, X_WAIT_CORR, X_DIMS, X_TYPES, X_CONCRETE = (
    _X["store"], _X["row"], _X["wait_stream"], _X["wait_corr"], _X["input_dims"],
    _X["input_types"], _X["concrete"])
M_TS, M_THREAD, M_BYTES, M_ALLOC, M_RESERVED, M_ADDR, M_DEVICE, M_DEVTYPE, M_INDEX = (
    _M["ts"], _M["thread"], _M["bytes"], _M["allocated"], _M["reserved"], _M["addr"],
    _M["device"], _M["device_type"], _M["index"])

# ---- category classes --------------------------------------------------------------
(CLS_NONE, CLS_KERNEL, CLS_MEMCPY, CLS_MEMSET, CLS_GPU_ANNOT, CLS_SYNC, CLS_RUNTIME,
 CLS_DRIVER, CLS_CPU_OP, CLS_USER_ANNOT, CLS_PYTHON, CLS_OTHER, CLS_LAUNCH_FLOW,
 CLS_FWDBWD, CLS_TRACE) = range(15)

# Kineto's activity types (libkineto/include/ActivityType.h) and older spellings. Device
# activities: CUDA / ROCm / XPU kernels, memcpy, memset; MTIA's on-device CCP events.
# Launches: the runtime / driver calls of CUDA, ROCm (HIP through cuda_runtime), MTIA,
# XPU, HPU and PrivateUse1 backends.
CATEGORY_CLASS = {
    "kernel": CLS_KERNEL, "Kernel": CLS_KERNEL, "mtia_ccp_events": CLS_KERNEL,
    "gpu_memcpy": CLS_MEMCPY, "Memcpy": CLS_MEMCPY,
    "gpu_memset": CLS_MEMSET, "Memset": CLS_MEMSET,
    "gpu_user_annotation": CLS_GPU_ANNOT,
    "cuda_sync": CLS_SYNC, "xpu_sync": CLS_SYNC,
    "cuda_runtime": CLS_RUNTIME, "Runtime": CLS_RUNTIME, "mtia_runtime": CLS_RUNTIME,
    "xpu_runtime": CLS_RUNTIME, "hpu_op": CLS_RUNTIME, "privateuse1_runtime": CLS_RUNTIME,
    "cuda_driver": CLS_DRIVER, "Driver": CLS_DRIVER, "xpu_driver": CLS_DRIVER,
    "privateuse1_driver": CLS_DRIVER,
    "cpu_op": CLS_CPU_OP, "Operator": CLS_CPU_OP,
    "user_annotation": CLS_USER_ANNOT,
    "python_function": CLS_PYTHON,
    "ac2g": CLS_LAUNCH_FLOW, "async": CLS_LAUNCH_FLOW, "async_cpu_to_gpu": CLS_LAUNCH_FLOW,
    "async_npu": CLS_LAUNCH_FLOW,  # torch_npu: from the launching op to the device task
    "fwdbwd": CLS_FWDBWD,
    "Trace": CLS_TRACE,  # the profiler's own span around the trace
}
ACTIVITY_CLASSES = (CLS_KERNEL, CLS_MEMCPY, CLS_MEMSET)

# ---- event keys and arg keys ---------------------------------------------------------
(K_PH, K_NAME, K_CAT, K_PID, K_TID, K_TS, K_DUR, K_ID, K_BP, K_ARGS) = range(1, 11)
EVENT_KEYS = {b"ph": K_PH, b"name": K_NAME, b"cat": K_CAT, b"pid": K_PID, b"tid": K_TID,
              b"ts": K_TS, b"dur": K_DUR, b"id": K_ID, b"bp": K_BP, b"args": K_ARGS}

# arg slots; INT slots take numbers, STR slots take strings (interned); a STR slot given
# a JSON number or list keeps its text (A_BW: Kineto's float "memory bandwidth (GB/s)")
(A_CORR, A_EXT, A_DEVICE, A_STREAM, A_SEQNUM, A_FWD, A_PYID, A_PYPARENT, A_IN, A_OUT,
 A_GSIZE, A_SEQ, A_SRC, A_DST, A_BYTES, A_WAIT_STREAM, A_WAIT_CORR, A_MEM_BYTES,
 A_TOTAL_ALLOC, A_TOTAL_RESERVED, A_ADDR, A_DEVICE_ID, A_DEVICE_TYPE, A_COLL, A_DTYPE,
 A_PGNAME, A_PGDESC, A_PGRANKS, A_BW, A_DIMS, A_TYPES, A_CONCRETE) = range(32)
N_ARGS = 32
FIRST_STR_ARG = A_COLL
ARG_KEYS = {
    b"correlation": A_CORR, b"External id": A_EXT, b"external id": A_EXT,
    b"device": A_DEVICE, b"stream": A_STREAM, b"Sequence number": A_SEQNUM,
    b"Fwd thread id": A_FWD, b"Python id": A_PYID, b"Python parent id": A_PYPARENT,
    b"In msg nelems": A_IN, b"Out msg nelems": A_OUT, b"Group size": A_GSIZE,
    b"Seq": A_SEQ, b"Src Rank": A_SRC, b"Dst Rank": A_DST, b"bytes": A_BYTES,
    b"Collective name": A_COLL, b"dtype": A_DTYPE, b"Process Group Name": A_PGNAME,
    b"Process Group Description": A_PGDESC, b"Process Group Ranks": A_PGRANKS,
    b"memory bandwidth (GB/s)": A_BW,
    b"wait_on_stream": A_WAIT_STREAM, b"wait_on_cuda_event_record_corr_id": A_WAIT_CORR,
    b"Bytes": A_MEM_BYTES, b"Total Allocated": A_TOTAL_ALLOC,
    b"Total Reserved": A_TOTAL_RESERVED, b"Addr": A_ADDR, b"Device Id": A_DEVICE_ID,
    b"Device Type": A_DEVICE_TYPE,
    b"Input Dims": A_DIMS, b"Input type": A_TYPES, b"Concrete Inputs": A_CONCRETE,
}

# an allocator event's Bytes, Addr or Device Id that is absent or not an integer in the
# int64 range (the scanner's ``-1`` for absent is a real value of each: a 1-byte free,
# the CPU's device); the smallest int64, which none of them can be
UNREADABLE = np.int64(-(2 ** 63))

TRACE_EVENTS_KEY = b"traceEvents"


def key_table(mapping: dict[bytes, int], size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Open-addressing table (``hash & (size-1)``, linear probing) of string hashes
    (:func:`~.lexer.string_hash`) -> value."""
    keys = np.zeros(size, dtype=np.int64)
    vals = np.full(size, -1, dtype=np.int64)
    for raw, value in mapping.items():
        h = string_hash(raw) or 1
        slot = h & (size - 1)
        while keys[slot] != 0:
            slot = (slot + 1) & (size - 1)
        keys[slot] = h
        vals[slot] = value
    return keys, vals


EVENT_KEY_TABLE = key_table(EVENT_KEYS)
ARG_KEY_TABLE = key_table(ARG_KEYS)
CATEGORY_TABLE = key_table({k.encode(): v for k, v in CATEGORY_CLASS.items()})
# np.int64: numba mis-compares plain ints
TRACE_EVENTS_HASH = np.int64(string_hash(TRACE_EVENTS_KEY))

# ---- scanner status --------------------------------------------------------------------
(R_NEED_MORE, R_FLUSH, R_GROW_STRINGS, R_GROW_THREADS, R_DRAIN, R_DONE, R_ERROR) = range(1, 8)
# modes
(M_START, M_TOP_KEY, M_TOP_AFTER_VALUE, M_EVENTS_ITEM, M_EVENTS_AFTER, M_ARRAY_ITEM,
 M_ARRAY_AFTER, M_DONE) = range(8)
# errors
(E_NONE, E_NOT_JSON, E_EXPECTED_KEY, E_EXPECTED_COLON, E_EXPECTED_COMMA, E_BAD_VALUE,
 E_EVENTS_NOT_ARRAY, E_TRAILING, E_BAD_EVENT, E_TWO_EVENTS) = range(10)
ERROR_TEXT = {
    E_NOT_JSON: "expected '{' or '[' at the start of a Kineto trace",
    E_EXPECTED_KEY: "expected a quoted object key",
    E_EXPECTED_COLON: "expected ':' after an object key",
    E_EXPECTED_COMMA: "expected ',' or a closing bracket",
    E_BAD_VALUE: "malformed JSON value",
    E_EVENTS_NOT_ARRAY: "'traceEvents' is not an array",
    E_TRAILING: "unexpected data after the end of the trace",
    E_BAD_EVENT: "malformed trace event",
    E_TWO_EVENTS: "a second 'traceEvents' array (JSON readers, browsers and Perfetto keep "
                  "only the last: which one is the trace is unclear)",
}

# ---- packed scanner state ---------------------------------------------------------------
# The scanner keeps its state in a few arrays, because every array argument of a numba
# function costs two atomic reference-count operations per call (measured: with ~30
# separate arrays they were half of the per-event cost):
#   w        int64[W_SIZE]                scalars (slots below), then the key tables:
#                                         event keys, arg keys, categories (W_TAB + T_* * 256)
#   strs     int32[capacity]              string ids by hash (id + 1; parse.id_table)
#   sinfo    int64[3, capacity // 2]      per string id (fewer than half the slots): hash
#                                         (SI_KEY), category class (SI_CLASS, -1 unknown)
#                                         and event count (SI_COUNT)
#   pend     int64[3, PENDING]            strings new since the last drain (PD_ID / _OFF
#                                         / _LEN)
#   thr      int64[6, capacity]           thread hash table (TR_KEY -> TR_ID); per thread:
#                                         pid / tid as numbers or string ids (TR_PIDN ...)
#   blocks   int64[stores, MAX_FIELDS, rows]  the active block of every store
#   spans    int64[6, capacity]           top-level values (SP_KEY0..SP_VAL1) and metadata
#                                         events (SP_RAW0, SP_RAW1): byte offsets
# w slots: scanner state ...
# (W_MAXSTR: distinct strings interned at most, past which every new string is one
# marker whose id + 1 is W_FOLD, 0 until then: parse.strings.intern)
(ST_MODE, ST_POS, ST_ERRCODE, ST_ERRPOS, ST_SAW_EVENTS, ST_NTOP, ST_NRAW, ST_EVENT_INDEX,
 W_NSTR, W_NPEND, W_NTHR, W_MAXSTR, W_FOLD) = range(13)
# ... statistics (absolute slots in w) ...
(S_EVENTS, S_COMPLETE, S_FLOW, S_INSTANT, S_METADATA, S_COUNTER, S_OTHER_PH,
 S_SKIP_NO_TS, S_SKIP_NO_DUR, S_SKIP_BAD_TS, S_SKIP_BAD_DUR, S_SKIP_NOT_OBJECT,
 S_SKIP_NO_PH, S_BAD_NUMBER, S_META_NOT_KEPT, S_NEG_DUR, S_SKIP_BAD_FLOW, S_SKIP_RANGE_TS,
 S_SKIP_RANGE_DUR, S_SKIP_RANGE_END, S_FIRST_SEEN, S_FIRST_TS) = range(13, 35)
# (S_FIRST_*: the ts of the trace's first complete event with a category other than
# "Trace", in file order: the row HTA's correlation join falls back to)
# ... store fill and global row base (one slot per store) ...
W_FILL = 35
W_BASE = W_FILL + N_STORES
# ... per-event scratch: parsed fields (W_EV + V_*) and args (W_ARG + A_*) ...
W_EV = W_BASE + N_STORES
N_EV = 15
W_ARG = W_EV + N_EV
# ... and the key tables: table t's keys at W_TAB + 2*t*TAB_SIZE, values TAB_SIZE later
TAB_SIZE = 256
W_TAB = W_ARG + N_ARGS
T_EVENT, T_ARG, T_CAT = range(3)
W_SIZE = W_TAB + 6 * TAB_SIZE

SI_KEY, SI_CLASS, SI_COUNT = range(3)  # the string table's rows per string id
PD_ID, PD_OFF, PD_LEN = range(3)  # its queue of strings new since the last drain
TR_KEY, TR_ID, TR_PIDN, TR_PIDS, TR_TIDN, TR_TIDS = range(6)
SP_KEY0, SP_KEY1, SP_VAL0, SP_VAL1, SP_RAW0, SP_RAW1 = range(6)
MAX_FIELDS = max(len(f) for f in FIELDS.values())


def new_state() -> np.ndarray:
    """A zeroed ``w`` array with the key tables in place."""
    w = np.zeros(W_SIZE, dtype=np.int64)
    for t, (keys, vals) in enumerate((EVENT_KEY_TABLE, ARG_KEY_TABLE, CATEGORY_TABLE)):
        base = W_TAB + 2 * t * TAB_SIZE
        w[base:base + TAB_SIZE] = keys
        w[base + TAB_SIZE:base + 2 * TAB_SIZE] = vals
    return w


STAT_NAMES = {
    S_EVENTS: "events", S_COMPLETE: "complete", S_FLOW: "flow", S_INSTANT: "instant",
    S_METADATA: "metadata", S_COUNTER: "counter", S_OTHER_PH: "other_phase",
}
SKIP_NAMES = {
    S_SKIP_NO_TS: "complete event without ts", S_SKIP_NO_DUR: "complete event without dur",
    S_SKIP_BAD_TS: "ts is not a number", S_SKIP_BAD_DUR: "dur is not a number",
    S_SKIP_NOT_OBJECT: "traceEvents item is not an object",
    S_SKIP_NO_PH: "event without ph", S_SKIP_BAD_FLOW: "flow event without id or ts",
    S_SKIP_RANGE_TS: "ts beyond the int64 ns range",
    S_SKIP_RANGE_DUR: "dur beyond the int64 ns range",
    S_SKIP_RANGE_END: "end (ts + dur) beyond the int64 ns range",
}
NOTE_NAMES = {
    S_BAD_NUMBER: "numeric args out of int64 range (stored as -1)",
    S_META_NOT_KEPT: "metadata events beyond the first 65536 (counted, not decoded)",
    S_NEG_DUR: "complete events with negative dur (kept)",
}
