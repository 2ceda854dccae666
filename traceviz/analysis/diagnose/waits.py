"""Who waits for whom: every communication kernel of a job split into **wait** and
**transfer**, with the member it waited for.

Definitions (README, "Who waits for whom"):

* A **call** is one communication operation on every member it involves. Collectives:
  the kernels of one process group with one ``Seq`` (else the same position among the
  group's kernels of the iteration on each rank). Point-to-point transfers (``SendRecv``
  kernels with a known peer): a send on one rank and the receive on its peer, matched by
  process group, sender, receiver and position among the sender's transfers to that
  receiver in the iteration (NCCL delivers them in order). PyTorch's profiler writes the
  peer's *global* rank (``Dst Rank`` of a send, ``Src Rank`` of a receive: the group's
  ``groupRanks[peer]``); a value that is not in the group's ranks but indexes them is
  read as the peer's position in the group (older writers). Where no direction is stated
  but the peer is known (a two-rank group), a transfer is matched by position among the
  pair's transfers.
* A member **arrives** when its first kernel of the call starts, on synced clocks. A
  kernel **waits** from its own start to the last member's arrival (clipped to the
  kernel) and **transfers** from there to its end: ``wait + transfer = duration``. It
  **waited for** the last member to arrive (nobody, for that member itself).
* Unknown (null, never 0) where the call's members are not all in the job (fewer ranks
  seen than the group has, or one rank alone), the kernel states no process group and no
  peer, or the ranks' clocks are not synced.
* A kernel that moves no payload (collective ``Barrier`` / ``Handshake``, or in and out
  messages of 0 bytes) is all wait, matched or not; it waited for the last member when
  its call is matched.

Times are int64 ns on the synced clock of :class:`~..activities.RankActivities` built
with the clock offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...intervals import grouped_top_times
from ...table.arrays import codes_of, ints
from ...table.schema import COLLECTIVES, COMM, GROUPS, NO_PAYLOAD, PHASES, collective
from ..activities import RankActivities, activities
from ..calls import rank_calls
from ..clocks import offsets_from_calls

META_COLUMNS = ("pg_name", "seq", "src_rank", "dst_rank", "group_size", "group_ranks",
                "msg_in_bytes", "msg_out_bytes")
SEND, RECV = 1, 2
# the kind of a call in comm_calls: the collective, a point-to-point kernel by direction
CALL_KINDS = COLLECTIVES + ("Send", "Recv")
_COLL, _ORD, _P2P, _PAIR = range(4)  # how a kernel is matched
_NULLABLE = ("wait_ns", "transfer_ns", "waited_for_rank", "peer_rank", "expected_members")

COMM_CALLS_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("iteration", pa.int32()), ("group", pa.string()),
    ("kind", pa.string()), ("process_group", pa.string()), ("phase", pa.string()),
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("wait_ns", pa.int64()),
    ("transfer_ns", pa.int64()), ("waited_for_rank", pa.int32()),
    ("peer_rank", pa.int32()), ("members", pa.int32()), ("expected_members", pa.int32()),
    ("name", pa.string())])


@dataclass
class RankComm:
    """One rank's communication kernels (positions into its activities, in time order)
    with their split. ``wait_end`` is where the wait ends and the transfer begins (ns,
    the activities' clock; ``ts <= wait_end <= end``), meaningful where ``known``."""

    rank: int
    pos: np.ndarray         # int64 positions into the rank's RankActivities
    pg: np.ndarray          # process group: index into the job's pg names, -1 none
    seq: np.ndarray         # Seq, -1 none
    peer: np.ndarray        # P2P: the peer's global rank, -1 unknown / not P2P
    direction: np.ndarray   # SEND / RECV / 0 unknown or not P2P
    size: np.ndarray        # ranks in the process group, -1 unknown
    no_payload: np.ndarray  # bool
    kind: np.ndarray        # index into CALL_KINDS, -1 unknown
    wait_end: np.ndarray = None  # type: ignore[assignment]
    known: np.ndarray = None     # type: ignore[assignment]
    waited_for: np.ndarray = None  # type: ignore[assignment]  # rank, -1 nobody / unknown
    members: np.ndarray = None   # type: ignore[assignment]  # ranks seen in the call
    expected: np.ndarray = None  # type: ignore[assignment]  # ranks the call needs, -1
    call: np.ndarray = None  # type: ignore[assignment]  # the call's id in the job, -1 none

    def __len__(self) -> int:
        return self.pos.shape[0]

    def wait(self, acts: RankActivities) -> np.ndarray:
        """Wait per kernel (ns; -1 unknown)."""
        return np.where(self.known, self.wait_end - acts.ts[self.pos], -1)

    def transfer(self, acts: RankActivities) -> np.ndarray:
        """Transfer per kernel (ns; -1 unknown)."""
        return np.where(self.known, acts.end[self.pos] - self.wait_end, -1)


def rank_comm(table: pa.Table, acts: RankActivities, pg_names: dict[str, int]) -> RankComm:
    """The communication kernels of one rank's table (``acts`` built from it), their
    process groups numbered in ``pg_names`` (shared by the job's ranks, extended here)."""
    pos = np.flatnonzero(acts.kind == COMM)
    rows = np.arange(table.num_rows)[acts.rows][pos]
    have = [c for c in META_COLUMNS if c in table.column_names]
    sub = table.select(have).take(rows) if have else pa.table({"x": np.zeros(rows.size)})

    def col(name):
        return ints(sub[name]) if name in have else np.full(rows.size, -1, np.int64)

    codes, names = codes_of(sub["pg_name"]) if "pg_name" in have else (
        np.full(rows.size, -1, np.int64), [])
    lut = np.array([pg_names.setdefault(str(n), len(pg_names)) for n in names] + [-1],
                   np.int64)
    pg = lut[codes]
    size = col("group_size")
    coll = acts.collective[pos]
    p2p = coll == collective("SendRecv")
    peer, direction = _peers(acts.rank, p2p, col("src_rank"), col("dst_rank"),
                             sub["group_ranks"] if "group_ranks" in have else None)
    in_b, out_b = col("msg_in_bytes"), col("msg_out_bytes")
    no_payload = np.isin(coll, [collective(c) for c in NO_PAYLOAD]) | (
        (in_b == 0) & (out_b == 0))
    kind = np.where(p2p & (direction == SEND), CALL_KINDS.index("Send"),
                    np.where(p2p & (direction == RECV), CALL_KINDS.index("Recv"), coll))
    return RankComm(acts.rank, pos, pg, col("seq"), peer, direction, size, no_payload,
                    kind.astype(np.int64))


def _peers(rank: int, p2p: np.ndarray, src: np.ndarray, dst: np.ndarray,
           group_ranks: pa.ChunkedArray | None) -> tuple[np.ndarray, np.ndarray]:
    """(peer global rank, direction) of each kernel (see the module doc)."""
    mine = (-1, rank)
    send = p2p & ~np.isin(dst, mine) & np.isin(src, mine)
    recv = p2p & ~np.isin(src, mine) & np.isin(dst, mine)
    peer = np.where(send, dst, np.where(recv, src, -1)).astype(np.int64)
    direction = np.where(send, SEND, np.where(recv, RECV, 0)).astype(np.int64)
    check = np.flatnonzero(p2p)
    if group_ranks is None or not check.size:
        return peer, direction
    lists = group_ranks.take(pa.array(check)).to_pylist()
    for i, members in zip(check.tolist(), lists):
        if not members:
            continue
        if peer[i] >= 0 and peer[i] not in members and peer[i] < len(members):
            peer[i] = members[peer[i]]  # a group-local rank (older writers)
        elif peer[i] < 0 and len(members) == 2 and rank in members:
            peer[i] = members[1 - members.index(rank)]  # a pair: the other one
    return peer, direction


def _ordinal(keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Position of each row among the rows with the same ``keys`` (2-D), by ``ts``."""
    if not ts.size:
        return np.zeros(0, np.int64)
    order = np.lexsort((ts,) + tuple(keys[:, c] for c in range(keys.shape[1] - 1, -1, -1)))
    k = keys[order]
    new = np.r_[True, (k[1:] != k[:-1]).any(axis=1)]
    first = np.maximum.accumulate(np.where(new, np.arange(order.size), 0))
    out = np.empty(order.size, np.int64)
    out[order] = np.arange(order.size) - first
    return out


def match(ranks: list[RankActivities], comms: list[RankComm], synced: bool) -> None:
    """Match every communication kernel of the job into calls and fill in each
    :class:`RankComm`'s split (see the module doc). ``synced``: the activities' clocks
    are synced (else every cross-rank wait is unknown)."""
    parts = []
    for acts, rc in zip(ranks, comms):
        n = len(rc)
        ts = acts.ts[rc.pos]
        it = acts.iteration[rc.pos].astype(np.int64)
        rank = np.full(n, acts.rank, np.int64)
        how = np.full(n, -1, np.int64)
        has_pg = rc.pg >= 0
        how[has_pg] = np.where(rc.seq[has_pg] >= 0, _COLL, _ORD)
        how[rc.peer >= 0] = np.where(rc.direction[rc.peer >= 0] > 0, _P2P, _PAIR)
        sender = np.where(rc.direction == RECV, rc.peer, rank)
        receiver = np.where(rc.direction == RECV, rank, rc.peer)
        lo, hi = np.minimum(rank, rc.peer), np.maximum(rank, rc.peer)
        # the rank-local grouping each ordinal counts within
        local = np.stack([how, rc.pg, it, np.select([how == _P2P, how == _PAIR],
                                                    [rc.direction, 0], 0),
                          np.where(how >= _P2P, rc.peer, 0)], axis=1)
        ordinal = _ordinal(local, ts)
        z = np.zeros(n, np.int64)
        key = np.stack([
            how, rc.pg,
            np.select([how == _COLL, how == _ORD, how == _P2P], [rc.seq, it, sender], lo),
            np.select([how == _ORD, how == _P2P], [ordinal, receiver], np.where(
                how == _PAIR, hi, z)),
            np.where(how >= _P2P, it, z), np.where(how >= _P2P, ordinal, z)], axis=1)
        parts.append((key, rank, ts, rc, acts))
    keys = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 6), np.int64)
    rank = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    ts = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
    matched = keys[:, 0] >= 0
    call = np.full(keys.shape[0], -1, np.int64)
    n_calls = 0
    if matched.any():
        _, inv = np.unique(keys[matched], axis=0, return_inverse=True)
        call[matched] = inv.ravel()
        n_calls = int(inv.max()) + 1
    # each rank's arrival per call: its first kernel's start
    mem = np.flatnonzero(call >= 0)
    pair = np.unique(np.stack([call[mem], rank[mem]], axis=1), axis=0)
    members = np.bincount(pair[:, 0], minlength=n_calls) if n_calls else np.zeros(0, np.int64)
    arrive = np.full(pair.shape[0], np.iinfo(np.int64).max)
    where = _row_of(pair, call[mem], rank[mem])
    np.minimum.at(arrive, where, ts[mem])
    last = np.full(n_calls, np.iinfo(np.int64).min)
    np.maximum.at(last, pair[:, 0], arrive)
    is_last = arrive == last[pair[:, 0]]
    last_rank = np.full(n_calls, np.iinfo(np.int64).max)
    np.minimum.at(last_rank, pair[is_last, 0], pair[is_last, 1])
    size = np.concatenate([p[3].size for p in parts]) if parts else np.zeros(0, np.int64)
    how = keys[:, 0]
    expected = np.full(n_calls, -1, np.int64)
    coll = (how == _COLL) | (how == _ORD)
    np.maximum.at(expected, call[coll & (call >= 0)], size[coll & (call >= 0)])
    np.maximum.at(expected, call[~coll & (call >= 0)], 2)
    complete = np.where(expected > 0, members >= expected, members >= 2) & synced
    at = 0
    for key, rk, t, rc, acts in parts:
        n = len(rc)
        c = call[at:at + n]
        at += n
        end = acts.end[rc.pos]
        if not n_calls:  # nothing matched: a zero-length lookup would index nothing
            c = np.full(n, -1, np.int64)
        at_c = np.maximum(c, 0)
        ok = (c >= 0) & (complete[at_c] if n_calls else False)
        lst = np.where(ok, last[at_c] if n_calls else t, t)
        rc.wait_end = np.where(rc.no_payload, end, np.clip(lst, t, end))
        rc.known = ok | rc.no_payload
        who = np.where(ok, last_rank[at_c] if n_calls else -1, -1)
        rc.waited_for = np.where((who != acts.rank) & (rc.wait_end > t) & ok, who, -1)
        rc.call = c
        rc.members = np.where(c >= 0, members[at_c] if n_calls else 1, 1)
        rc.expected = np.where(c >= 0, expected[at_c] if n_calls else -1,
                               np.where(rc.peer >= 0, 2, rc.size))


def _row_of(pairs: np.ndarray, call: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Row of each (call, rank) in the sorted unique ``pairs``."""
    width = int(rank.max()) + 1 if rank.size else 1
    flat = pairs[:, 0] * width + pairs[:, 1]
    return np.searchsorted(flat, call * width + rank)


def comm_calls(ranks: list[RankActivities], comms: list[RankComm], pg_names: list[str]
               ) -> pa.Table:
    """``comm_calls``: one row per communication kernel of the job (see the module doc
    and :data:`COMM_CALLS_SCHEMA`; ``pg_names``: the names :func:`rank_comm` numbered);
    times on the synced clock, unknowns null."""
    cols: dict[str, list] = {f.name: [] for f in COMM_CALLS_SCHEMA}
    for acts, rc in zip(ranks, comms):
        p = rc.pos
        wait, transfer = rc.wait(acts), rc.transfer(acts)
        grp = acts.group[p]
        cols["rank"].append(np.full(p.size, acts.rank, np.int64))
        cols["iteration"].append(acts.iteration[p])
        cols["group"].append(np.array(GROUPS, object)[np.where(grp >= 0, grp,
                                                               GROUPS.index("OTHER"))])
        cols["kind"].append(np.array(CALL_KINDS + (None,), object)[rc.kind])
        cols["process_group"].append(np.array(pg_names + [None], object)[rc.pg])
        cols["phase"].append(np.array(PHASES + (None,), object)[acts.phase[p]])
        cols["start_ns"].append(acts.ts[p])
        cols["end_ns"].append(acts.end[p])
        cols["wait_ns"].append(wait)
        cols["transfer_ns"].append(transfer)
        cols["waited_for_rank"].append(rc.waited_for)
        cols["peer_rank"].append(rc.peer)
        cols["members"].append(rc.members)
        cols["expected_members"].append(rc.expected)
        cols["name"].append(np.array(acts.names + [None], object)[acts.name[p]])
    arrays = []
    for f in COMM_CALLS_SCHEMA:
        v = np.concatenate(cols[f.name]) if cols[f.name] else np.zeros(0)
        if pa.types.is_string(f.type):
            arrays.append(pa.array(v.tolist(), f.type))
        else:
            v = v.astype(np.int64)
            arrays.append(pa.array(v, f.type, mask=(v < 0) if f.name in _NULLABLE else None))
    return pa.Table.from_arrays(arrays, schema=COMM_CALLS_SCHEMA)




@dataclass
class JobComm:
    """A job's ranks on synced clocks (``offsets``: ns per rank, empty when not synced),
    their communication kernels matched and split (also attached to the activities:
    ``wait_end`` / ``waited_for``)."""

    acts: list[RankActivities]
    comms: list[RankComm]
    pg_names: list[str]
    offsets: dict[int, int]
    synced: bool
    notes: list[str]


def job_comm(tables: dict[int, pa.Table], offsets: dict[int, int] | None = None,
             synced: bool = True) -> JobComm:
    """Sync the clocks of ``tables`` (rank -> activity table) on their collectives' ends
    (or take ``offsets``: ns per rank, ``synced`` whether they sync the ranks), then
    match and split every communication kernel (see the module doc)."""
    notes: list[str] = []
    ranks = sorted(tables)
    if offsets is None:
        offsets, synced = offsets_from_calls([rank_calls(tables[r], r) for r in ranks],
                                             notes)
    acts = [activities(tables[r], rank=r, offset_ns=offsets.get(r, 0)) for r in ranks]
    names: dict[str, int] = {}
    comms = [rank_comm(tables[a.rank], a, names) for a in acts]
    match(acts, comms, synced)
    for a, rc in zip(acts, comms):
        a.wait_end = np.full(len(a), -1, np.int64)
        a.wait_end[rc.pos[rc.known]] = rc.wait_end[rc.known]
        a.waited_for = np.full(len(a), -1, np.int64)
        a.waited_for[rc.pos] = rc.waited_for
    return JobComm(acts, comms, sorted(names, key=lambda g: names[g]), offsets, synced, notes)


def split_rows(jc: JobComm, rank: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(wait end on the rank's own clock, waited-for rank) per row of its table; -1 where
    the row is not communication or its split is unknown."""
    acts = jc.acts[[a.rank for a in jc.acts].index(rank)]
    rows = np.arange(n_rows)[acts.rows]
    assert acts.wait_end is not None and acts.waited_for is not None  # split attached
    wait_end = np.full(n_rows, -1, np.int64)
    waited_for = np.full(n_rows, -1, np.int64)
    wait_end[rows] = np.where(acts.wait_end >= 0, acts.wait_end + acts.offset_ns, -1)
    waited_for[rows] = acts.waited_for
    return wait_end, waited_for


def attach(acts: RankActivities, wait_end_rows: np.ndarray, waited_for_rows: np.ndarray
           ) -> RankActivities:
    """``acts`` with its communication split (:func:`split_rows` of its table) on its own
    clock basis, clipped into each activity (HTA's rounded times)."""
    we = wait_end_rows[acts.rows]
    known = we >= 0
    acts.wait_end = np.where(known, np.clip(we - acts.offset_ns, acts.ts, acts.end), -1)
    acts.waited_for = waited_for_rows[acts.rows]
    return acts


# what matching and splitting read of a table
SPLIT_COLUMNS = ("ts", "dur", "kind", "collective", "comm_group", "iteration", "phase",
                 "name") + META_COLUMNS


@dataclass
class CommRows:
    """The communication rows of one rank's table (``rows``: their row numbers in the
    table of ``n_rows`` rows), enough to match them across ranks."""

    table: pa.Table
    rows: np.ndarray
    n_rows: int


def comm_rows(table: pa.Table) -> CommRows:
    """The communication rows of ``table`` (the columns :data:`SPLIT_COLUMNS` there are)."""
    kind = table["kind"].to_numpy(zero_copy_only=False) if "kind" in table.column_names \
        else np.array([], object)
    rows = np.flatnonzero(kind == "COMM")
    have = [c for c in SPLIT_COLUMNS if c in table.column_names]
    return CommRows(table.select(have).take(rows), rows, table.num_rows)


def job_split(parts: dict[int, CommRows]) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]],
                                                   JobComm]:
    """Per rank, (wait end on its own clock, waited-for rank) per row of its whole table
    (:func:`split_rows`), from its communication rows alone."""
    jc = job_comm({r: p.table for r, p in parts.items()})
    out = {}
    for r, p in parts.items():
        we, wf = split_rows(jc, r, p.rows.size)
        wait_end = np.full(p.n_rows, -1, np.int64)
        waited_for = np.full(p.n_rows, -1, np.int64)
        wait_end[p.rows], waited_for[p.rows] = we, wf
        out[r] = (wait_end, waited_for)
    return out, jc


def comm_split(acts: RankActivities, keys: np.ndarray, n_keys: int,
               only: np.ndarray | None = None) -> np.ndarray:
    """int64[n_keys, 2]: per group key (one per activity) the communication time in
    transfer and in wait (the union of its communication kernels split, transfer first
    where transfers and waits overlap: the two add up to the union); -1 for a group
    with a communication kernel whose split is unknown (or none attached). ``only``:
    the activities to count (bool; default all)."""
    comm = np.flatnonzero((acts.kind == COMM) & (True if only is None else only))
    if acts.wait_end is None:
        out = np.zeros((n_keys, 2), np.int64)
        out[np.unique(keys[comm])] = -1
        return out
    we = acts.wait_end[comm]
    known = we >= 0
    ts, end = acts.ts[comm][known], acts.end[comm][known]
    starts = np.concatenate([we[known], ts])
    ends = np.concatenate([end, we[known]])
    levels = np.repeat([0, 1], known.sum())
    k = keys[comm][known]
    out = grouped_top_times(starts, ends, levels, np.concatenate([k, k]), n_keys, 2)
    unknown = np.zeros(n_keys, bool)
    unknown[keys[comm][~known]] = True
    out[unknown] = -1
    return out
