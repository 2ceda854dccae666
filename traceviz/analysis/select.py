"""Which GPU activities an analysis looks at, as numpy arrays (one rank at a time).

Options mirror HTA's: ``drop_last_step`` (HTA's default: when a rank has at least two
ProfilerSteps, drop every activity not launched before the last step starts, and every
activity without a launch), ``iterations``, ``streams``. ``hta_compat`` reproduces
HTA's µs rounding (start ``ceil``, end ``floor`` to whole µs) and its kernel types by
name (HTA 0.6 rules, OTHER included); without it times are exact ns and kinds are
traceviz's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..api import metadata

CATS = ("COMP", "COMM", "MEM", "OTHER")
COLUMNS = ("device", "ts", "dur", "launch_ts", "launch_dur", "iteration", "stream", "name",
           "cat", "kind", "launch_name", "bytes", "memory_bw_gbps")  # the columns :func:`select` reads
OPTIONAL_COLUMNS = ("memory_bw_gbps",)  # tables parsed before it existed lack it
COMP, COMM, MEM, OTHER = range(4)
US = 1000  # ns per µs

# HTA 0.6 get_kernel_type (re.match: anchored at the start), tested in this order
_HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_HTA_MEM = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_HTA_NOT_COMP = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|"
    r"(cuda.*LaunchKernel)|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|"
    r"(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)")


def hta_kind(name: str) -> int:
    """HTA 0.6's kernel type of a name (COMM, MEM, COMP or OTHER)."""
    if _HTA_COMM.match(name):
        return COMM
    if _HTA_MEM.match(name):
        return MEM
    return OTHER if _HTA_NOT_COMP.match(name) else COMP


def _hta_round(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's load-time rounding, in its float64 µs arithmetic: ts := ceil(ts),
    end := floor(ts + dur) (the float sum can land just below an integer). Returns ns."""
    # the double nearest the trace's decimal µs text, as json.loads reads it (whole µs
    # exact, then one rounding; ts / 1000 would round twice above 2**53 ns)
    t = (ts // US).astype(np.float64) + (ts % US) / US
    return (np.ceil(t).astype(np.int64) * US,
            np.floor(t + dur / US).astype(np.int64) * US)


@dataclass(frozen=True)
class Options:
    """What to select; see the module doc."""

    drop_last_step: bool = False
    iterations: tuple[int, ...] | None = None
    streams: tuple[int, ...] | None = None
    hta_compat: bool = False


@dataclass
class Activities:
    """The selected activities of one rank, in ``ts`` order. Times in ns."""

    rank: int
    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray        # index into CATS
    name: np.ndarray        # index into ``names``
    names: list[str]
    device: np.ndarray      # the GPU's pid in the trace
    stream: np.ndarray
    iteration: np.ndarray
    launch_ts: np.ndarray   # -1: no launch
    launch_end: np.ndarray  # -1: no launch
    launch_name: np.ndarray  # index into ``launch_names``; -1: no launch
    launch_names: list[str]
    cat: np.ndarray         # 0 kernel, 1 gpu_memcpy, 2 gpu_memset
    bytes: np.ndarray       # memcpy / memset bytes, -1 unknown
    bandwidth: np.ndarray   # GB/s: the trace's own value (Kineto's, from its ns duration),
    #                         else bytes / duration; NaN without either
    meta: dict

    def __len__(self) -> int:
        return self.ts.shape[0]


def ints(col: pa.ChunkedArray | pa.Array, fill: int = -1) -> np.ndarray:
    """An int column as int64, nulls as ``fill``."""
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def codes_of(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """A string column as (int64 code per row, -1 for null; the distinct values). Only
    the dictionary becomes Python objects, never the rows."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    codes = np.asarray(pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False),
                       dtype=np.int64)
    return codes, arr.dictionary.to_pylist()


def index_in(col: pa.ChunkedArray | pa.Array, values: tuple[str, ...]) -> np.ndarray:
    """Per row, the position of its value in ``values`` (-1: null or not listed)."""
    codes, dictionary = codes_of(col)
    position = np.array([values.index(d) if d in values else -1 for d in dictionary]
                        + [-1], dtype=np.int64)
    return position[codes]


def select(table: pa.Table, options: Options = Options()) -> Activities:
    """The activities of one rank's table that ``options`` keep."""
    meta = metadata(table)
    ts, dur = ints(table["ts"]), ints(table["dur"], 0)
    end = ts + np.maximum(dur, 0)
    launch_ts = ints(table["launch_ts"])
    launch_end = np.where(launch_ts >= 0, launch_ts + ints(table["launch_dur"], 0), -1)
    iteration = ints(table["iteration"])
    stream = ints(table["stream"])
    name, names = codes_of(table["name"])
    cat_code, cat_names = codes_of(table["cat"])
    cat = np.array([{"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}[c] for c in cat_names]
                   + [0], dtype=np.int64)[cat_code]
    if options.hta_compat:
        kind = np.array([hta_kind(n) for n in names] + [OTHER], dtype=np.int64)[name]
    else:
        kind_code, kind_names = codes_of(table["kind"])
        kind = np.array([CATS.index(k) for k in kind_names] + [OTHER],
                        dtype=np.int64)[kind_code]
    keep = np.ones(ts.shape[0], dtype=bool)
    steps = sorted(s["ts"] for s in meta.get("steps", []))
    if options.drop_last_step and len(steps) >= 2:
        keep &= (launch_ts >= 0) & (launch_ts < steps[-1])
    if options.iterations is not None:
        keep &= np.isin(iteration, options.iterations)
    if options.streams is not None:
        keep &= np.isin(stream, options.streams)
    # HTA rounds only when its ts column is float: some ts has a fraction of a µs
    if options.hta_compat and ((ts % US != 0).any() or (launch_ts[launch_ts >= 0] % US).any()):
        ts, end = _hta_round(ts, dur)
        launched = launch_ts >= 0
        round_ts, round_end = _hta_round(launch_ts, launch_end - launch_ts)
        launch_ts = np.where(launched, round_ts, -1)
        launch_end = np.where(launched, round_end, -1)
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(ts[rows], kind="stable")]
    launch_name, launch_names = codes_of(table["launch_name"])
    nbytes = ints(table["bytes"])
    with np.errstate(divide="ignore", invalid="ignore"):
        bandwidth = np.where((nbytes >= 0) & (dur > 0), nbytes / np.maximum(dur, 1), np.nan)
    if "memory_bw_gbps" in table.column_names:
        given = table["memory_bw_gbps"].to_numpy(zero_copy_only=False).astype(np.float64)
        bandwidth = np.where(np.isnan(given), bandwidth, given)
    return Activities(
        rank=int(meta.get("rank", -1)), ts=ts[rows], end=end[rows], kind=kind[rows],
        name=name[rows], names=names, device=ints(table["device"])[rows],
        stream=stream[rows], iteration=iteration[rows],
        launch_ts=launch_ts[rows], launch_end=launch_end[rows],
        launch_name=launch_name[rows], launch_names=launch_names, cat=cat[rows],
        bytes=nbytes[rows], bandwidth=bandwidth[rows], meta=meta)
