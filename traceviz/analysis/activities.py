"""The one per-rank model every analysis reads: a rank's GPU activities as numpy arrays,
in ``ts`` order, with their enum columns as codes of :mod:`traceviz.table.schema`.

:func:`activities` builds it from a parsed table (any subset of its columns: a column
that was not read is all -1). :class:`Options` say which activities to keep, mirroring
HTA's: ``drop_last_step`` (HTA's default: when a rank has at least two ProfilerSteps,
drop every activity not launched before the last step starts, and every activity
without a launch), ``iterations``, ``streams``. ``hta_compat`` reproduces HTA's µs
rounding and its kernel types by name (:mod:`.hta_compat`), and leaves out the device
activities that state no stream (HTA does); without it times are exact
ns and kinds are traceviz's. ``offset_ns`` moves the rank's times onto a common clock
(``ts - offset``, see :mod:`.clocks`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from ..table.arrays import codes_of, index_in, ints
from ..table.schema import COLLECTIVES, GROUPS, KINDS, PHASES, cut_groups, metadata
from .hta_compat import HTA_OTHER, hta_kind, hta_round

# every column :func:`activities` reads (a table without one reads as all unknown)
COLUMNS = ("ts", "dur", "launch_ts", "launch_dur", "iteration", "stream", "name", "kind",
           "phase", "microbatch", "chunk", "comm_group", "collective", "device",
           "launch_name", "bytes", "memory_bw_gbps", "correlation")

# kinds the sweeps tell apart: the schema's, plus HTA's OTHER (``hta_compat`` only)
SWEEP_KINDS = KINDS + ("OTHER",)
assert SWEEP_KINDS.index("OTHER") == HTA_OTHER


@dataclass(frozen=True)
class Options:
    """Which activities to keep; see the module doc."""

    drop_last_step: bool = False
    iterations: tuple[int, ...] | None = None
    streams: tuple[int, ...] | None = None
    hta_compat: bool = False


@dataclass
class RankActivities:
    """One rank's selected activities, in ``ts`` order. Times in ns (on the rank's clock
    minus ``offset_ns``); codes index the schema's enums, -1 unknown (or not read). The
    arrays can be read-only views of the table's buffers (a column not read is one -1
    broadcast): analyses never write into them; copy one to change it."""

    rank: int
    meta: dict
    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray        # index into SWEEP_KINDS (OTHER only with hta_compat)
    phase: np.ndarray       # index into PHASES
    microbatch: np.ndarray  # -1: not in a micro-batch
    chunk: np.ndarray
    group: np.ndarray       # index into GROUPS (COMM rows)
    collective: np.ndarray  # index into COLLECTIVES (COMM rows)
    iteration: np.ndarray   # ProfilerStep number, -1 outside
    name: np.ndarray        # index into ``names``
    names: list[str]
    device: np.ndarray      # the GPU's pid in the trace
    stream: np.ndarray
    launch_ts: np.ndarray   # -1: no launch
    launch_end: np.ndarray  # -1: no launch
    launch_name: np.ndarray  # index into ``launch_names``; -1: no launch
    launch_names: list[str]
    bandwidth: np.ndarray   # GB/s: the trace's own value (Kineto's, from its ns duration),
    #                         else bytes / duration; NaN without either
    correlation: np.ndarray  # the trace's correlation id, -1: none
    offset_ns: int = 0
    # the table rows kept, in this order
    rows: slice | np.ndarray = field(default_factory=lambda: slice(None))
    # communication split (:mod:`.diagnose.waits`; None: not matched across ranks): per
    # activity where its wait ends and its transfer begins (same clock as ``ts``; -1: not
    # communication, or the split is unknown) and the rank it waited for (-1 none)
    wait_end: np.ndarray | None = None
    waited_for: np.ndarray | None = None

    def __len__(self) -> int:
        return self.ts.shape[0]


def _column(table: pa.Table, name: str, read) -> np.ndarray:
    """``read(table[name])``, or -1 per row (no memory) when the column was not read."""
    if name in table.column_names:
        return read(table[name])
    return np.broadcast_to(np.int64(-1), (table.num_rows,))


def _names(table: pa.Table, name: str) -> tuple[np.ndarray, list[str]]:
    if name in table.column_names:
        return codes_of(table[name])
    return np.broadcast_to(np.int64(-1), (table.num_rows,)), []


def kept_meta(meta: dict) -> dict:
    """What analyses read of a rank's metadata (its ``meta``): every fact but the
    trace's ``distributed`` info, and the process groups cut to the pipeline groups
    (:func:`~traceviz.table.schema.cut_groups`: ~1 MB of objects per rank at 4,096 ranks
    otherwise) with the distinct descriptions of all (``pg_descs``)."""
    kept = cut_groups(meta)
    kept.pop("distributed", None)
    return kept


def activities(table: pa.Table, options: Options = Options(), offset_ns: int = 0,
               rank: int | None = None) -> RankActivities:
    """The activities of one rank's table that ``options`` keep (see the module doc);
    ``rank`` overrides the rank the table's metadata states."""
    meta = metadata(table)
    ts, dur = ints(table["ts"]), ints(table["dur"], 0)
    end = ts + np.maximum(dur, 0)
    launch_ts = _column(table, "launch_ts", ints)
    launch_end = np.where(launch_ts >= 0,
                          launch_ts + _column(table, "launch_dur", lambda c: ints(c, 0)), -1)
    iteration = _column(table, "iteration", ints)
    stream = _column(table, "stream", ints)
    name, names = _names(table, "name")
    if options.hta_compat:
        kind = np.array([hta_kind(n) for n in names] + [HTA_OTHER], dtype=np.int64)[name]
    else:
        kind = index_in(table["kind"], KINDS)
        kind[kind < 0] = HTA_OTHER  # a kind the schema does not name sweeps as OTHER
    keep = np.ones(ts.shape[0], dtype=bool)
    steps = sorted(s["ts"] for s in meta.get("steps", []))
    if options.drop_last_step and len(steps) >= 2:
        keep &= (launch_ts >= 0) & (launch_ts < steps[-1])
    if options.iterations is not None:
        keep &= np.isin(iteration, options.iterations)
    if options.streams is not None:
        keep &= np.isin(stream, options.streams)
    if options.hta_compat and meta.get("streams_unstated"):
        # HTA keeps only the device activities that state their stream
        keep &= ~np.isin(stream, meta["streams_unstated"])
    # HTA rounds only when its ts column is float: some ts has a fraction of a µs
    if options.hta_compat and ((ts % 1000 != 0).any()
                               or (launch_ts[launch_ts >= 0] % 1000).any()):
        ts, end = hta_round(ts, dur)
        launched = launch_ts >= 0
        round_ts, round_end = hta_round(launch_ts, launch_end - launch_ts)
        launch_ts = np.where(launched, round_ts, -1)
        launch_end = np.where(launched, round_end, -1)
    if keep.all() and (ts[1:] >= ts[:-1]).all():  # a parsed table: kept whole, in order
        rows: slice | np.ndarray = slice(None)  # views, no copies
    else:
        rows = np.flatnonzero(keep)
        rows = rows[np.argsort(ts[rows], kind="stable")]
    del keep
    launch_name, launch_names = _names(table, "launch_name")
    nbytes = _column(table, "bytes", ints)
    with np.errstate(divide="ignore", invalid="ignore"):
        bandwidth = np.where((nbytes >= 0) & (dur > 0), nbytes / np.maximum(dur, 1), np.nan)
    if "memory_bw_gbps" in table.column_names:
        given = table["memory_bw_gbps"].to_numpy(zero_copy_only=False).astype(np.float64)
        bandwidth = np.where(np.isnan(given), bandwidth, given)
    return RankActivities(
        rank=int(meta.get("rank", -1)) if rank is None else rank, meta=kept_meta(meta),
        ts=_moved(ts[rows], offset_ns), end=_moved(end[rows], offset_ns), kind=kind[rows],
        phase=_column(table, "phase", lambda c: index_in(c, PHASES))[rows],
        microbatch=_column(table, "microbatch", ints)[rows],
        chunk=_column(table, "chunk", ints)[rows],
        group=_column(table, "comm_group", lambda c: index_in(c, GROUPS))[rows],
        collective=_column(table, "collective", lambda c: index_in(c, COLLECTIVES))[rows],
        iteration=iteration[rows], name=name[rows], names=names,
        device=_column(table, "device", ints)[rows], stream=stream[rows],
        launch_ts=launch_ts[rows], launch_end=launch_end[rows],
        launch_name=launch_name[rows], launch_names=launch_names,
        bandwidth=bandwidth[rows], correlation=_column(table, "correlation", ints)[rows],
        offset_ns=offset_ns, rows=rows)


def on_clock(acts: RankActivities, offset_ns: int) -> RankActivities:
    """``acts`` (made on the rank's own clock) moved onto a common clock by
    ``offset_ns``: what :func:`activities` gives with that offset."""
    if acts.offset_ns:
        raise ValueError(f"rank {acts.rank}'s activities are already moved")
    return replace(acts, ts=_moved(acts.ts, offset_ns), end=_moved(acts.end, offset_ns),
                   offset_ns=offset_ns)


def _moved(times: np.ndarray, offset_ns: int) -> np.ndarray:
    """``times - offset_ns`` (the same array when there is no offset)."""
    return times - offset_ns if offset_ns else times
