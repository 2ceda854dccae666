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
  pair's transfers. A coalesced block's kernel (``batch_isend_irecv``) carries several
  transfers (``src_rank`` / ``dst_rank`` lists, in the block's order): it is a member of
  each of their calls and waits until the last of its peers arrives; that transfer's
  call and peer are the kernel's (``call`` / ``peer``, each transfer's in ``op_call``).
* A member **arrives** when its first kernel of the call starts, on synced clocks. A
  kernel **waits** from its own start to the last member's arrival (clipped to the
  kernel) and **transfers** from there to its end: ``wait + transfer = duration``. It
  **waited for** the last member to arrive (nobody, for that member itself).
* Unknown (null, never 0) where the call's members are not all in the job (fewer ranks
  seen than the group has, or one rank alone; a send / receive whose peer is not traced
  is named in a warning), the kernel states no process group and no peer, or the ranks'
  clocks are not synced.
* A kernel that moves no payload (collective ``Barrier`` / ``Handshake``, or in and out
  messages of 0 bytes) is all wait, matched or not; it waited for the last member when
  its call is matched.

Times are int64 ns on the synced clock of :class:`~..activities.RankActivities` built
with the clock offsets.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from ...intervals import grouped_top_times
from ...table.arrays import codes_of, ints, unique_rows
from ...table.schema import (
    COLLECTIVES,
    COMM,
    GROUPS,
    NO_PAYLOAD,
    PHASES,
    collective,
    metadata,
)
from ..activities import RankActivities, activities
from ..calls import operation_bytes, rank_calls
from ..clocks import (
    ClockSync,
    CollectiveEnds,
    ends_of,
    host_of,
    joined_ends,
    offsets_of,
    synchronize,
)

META_COLUMNS = ("pg_name", "seq", "src_rank", "dst_rank", "group_size", "group_ranks",
                "msg_in_bytes", "msg_out_bytes")
SEND, RECV, BOTH = 1, 2, 3  # BOTH: a kernel that sends and receives
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
    the activities' clock; ``ts <= wait_end <= end``), meaningful where ``known``.

    A point-to-point kernel carries one or more transfers (``op_*``: a coalesced block
    of sends and receives is one kernel); ``peer`` / ``direction`` per kernel are its
    only peer and direction, or, of several, those of the transfer it waited for last
    (BOTH: it sends and receives)."""

    rank: int
    pos: np.ndarray         # int64 positions into the rank's RankActivities
    pg: np.ndarray          # process group: index into the job's pg names, -1 none
    seq: np.ndarray         # Seq, -1 none
    peer: np.ndarray        # P2P: the peer's global rank, -1 unknown / not P2P
    direction: np.ndarray   # SEND / RECV / BOTH / 0 unknown or not P2P
    size: np.ndarray        # ranks in the process group, -1 unknown
    no_payload: np.ndarray  # bool
    kind: np.ndarray        # index into CALL_KINDS, -1 unknown
    op_kernel: np.ndarray   # per transfer: its kernel (index into ``pos``)
    op_peer: np.ndarray     # per transfer: the peer's global rank
    op_direction: np.ndarray  # per transfer: SEND / RECV
    nbytes: np.ndarray      # nccl-tests' operation size S (bytes; -1 unknown)
    wait_end: np.ndarray = None  # type: ignore[assignment]
    known: np.ndarray = None     # type: ignore[assignment]
    waited_for: np.ndarray = None  # type: ignore[assignment]  # rank, -1 nobody / unknown
    members: np.ndarray = None   # type: ignore[assignment]  # ranks seen in the call
    expected: np.ndarray = None  # type: ignore[assignment]  # ranks the call needs, -1
    call: np.ndarray = None  # type: ignore[assignment]  # the call's id in the job, -1 none
    op_call: np.ndarray = None  # type: ignore[assignment]  # per transfer: its call, -1

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

    coll = acts.collective[pos]
    p2p = coll == collective("SendRecv")
    at = np.flatnonzero(p2p)

    def lists(name):  # of the point-to-point kernels only (few)
        return (sub[name].take(pa.array(at, pa.int64())).to_pylist() if name in have
                else [None] * at.size)

    codes, names = codes_of(sub["pg_name"]) if "pg_name" in have else (
        np.full(rows.size, -1, np.int64), [])
    lut = np.array([pg_names.setdefault(str(n), len(pg_names)) for n in names] + [-1],
                   np.int64)
    pg = lut[codes]
    size = col("group_size")
    members = lists("group_ranks")
    op_kernel, op_peer, op_direction = _transfers(acts.rank, at, lists("src_rank"),
                                                  lists("dst_rank"), members)
    peer, direction = _kernel_peers(p2p, op_kernel, op_peer, op_direction, at, members,
                                    acts.rank)
    in_b, out_b = col("msg_in_bytes"), col("msg_out_bytes")
    no_payload = np.isin(coll, [collective(c) for c in NO_PAYLOAD]) | (
        (in_b == 0) & (out_b == 0))
    kind = np.select([p2p & (direction == SEND), p2p & (direction == RECV),
                      p2p & (direction == BOTH)],
                     [CALL_KINDS.index("Send"), CALL_KINDS.index("Recv"),
                      CALL_KINDS.index("SendRecv")], coll)
    return RankComm(acts.rank, pos, pg, col("seq"), peer, direction, size, no_payload,
                    kind.astype(np.int64), op_kernel, op_peer, op_direction,
                    operation_bytes(coll, in_b, out_b, size))


def _transfers(rank: int, at: np.ndarray, recv_from: list, send_to: list,
               group_ranks: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transfers of the point-to-point kernels (kernel indexes ``at``; the lists are
    theirs): (kernel index, peer's global rank, SEND / RECV), a kernel's sends before its
    receives, each in the order stated. A peer that is not in the group's ranks but
    indexes them is the peer's position in the group (older writers); a peer equal to
    the rank itself is none (older writers state the sender on a send too)."""
    kernel, peer, direction = [], [], []
    for j, i in enumerate(at.tolist()):
        members = group_ranks[j] or []
        for d, listed in ((SEND, send_to[j]), (RECV, recv_from[j])):
            for p in listed or ():
                if members and p not in members and 0 <= p < len(members):
                    p = members[p]
                if p != rank:
                    kernel.append(i)
                    peer.append(p)
                    direction.append(d)
    return (np.asarray(kernel, np.int64), np.asarray(peer, np.int64),
            np.asarray(direction, np.int64))


def _kernel_peers(p2p: np.ndarray, op_kernel: np.ndarray, op_peer: np.ndarray,
                  op_direction: np.ndarray, at: np.ndarray, group_ranks: list, rank: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(peer, direction) per kernel before matching: its transfers' peer where they have
    one (-1 where several), SEND / RECV / BOTH; a point-to-point kernel (``at``, with
    ``group_ranks`` of each) without transfers in a two-rank group has the other member
    as its peer, direction unknown."""
    n = p2p.shape[0]
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, -1, np.int64)
    np.minimum.at(lo, op_kernel, op_peer)
    np.maximum.at(hi, op_kernel, op_peer)
    peer = np.where(lo == hi, hi, -1)
    direction = np.zeros(n, np.int64)
    np.bitwise_or.at(direction, op_kernel, op_direction)
    for j, i in enumerate(at.tolist()):
        members = group_ranks[j]
        if hi[i] < 0 and members and len(members) == 2 and rank in members:
            peer[i] = members[1 - members.index(rank)]  # a pair: the other one
    return peer, direction


def _ordinal(keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Position of each row among the rows with the same ``keys`` (2-D), by ``ts`` (ties
    in row order)."""
    if not ts.size:
        return np.zeros(0, np.int64)
    order = np.lexsort((np.arange(ts.size), ts)
                       + tuple(keys[:, c] for c in range(keys.shape[1] - 1, -1, -1)))
    k = keys[order]
    new = np.r_[True, (k[1:] != k[:-1]).any(axis=1)]
    first = np.maximum.accumulate(np.where(new, np.arange(order.size), 0))
    out = np.empty(order.size, np.int64)
    out[order] = np.arange(order.size) - first
    return out


def _rank_rows(acts: RankActivities, rc: RankComm) -> dict[str, np.ndarray]:
    """What one rank contributes to matching: a row per kernel matched as a whole
    (collectives, a pair's transfer of unknown direction) and a row per transfer of a
    point-to-point kernel, each with its kernel, how it is matched, and its key."""
    n = len(rc)
    ts = acts.ts[rc.pos]
    it = acts.iteration[rc.pos].astype(np.int64)
    how = np.full(n, -1, np.int64)
    has_pg = rc.pg >= 0
    how[has_pg] = np.where(rc.seq[has_pg] >= 0, _COLL, _ORD)
    whole = np.ones(n, bool)
    whole[rc.op_kernel] = False  # matched by its transfers
    pair = whole & (rc.peer >= 0)
    how[pair] = _PAIR
    kernel = np.concatenate([np.flatnonzero(whole), rc.op_kernel])
    k_how = np.concatenate([how[whole], np.full(rc.op_kernel.size, _P2P)])
    peer = np.concatenate([rc.peer[whole], rc.op_peer])
    direction = np.concatenate([np.zeros(int(whole.sum()), np.int64), rc.op_direction])
    pg, seq, t, i = rc.pg[kernel], rc.seq[kernel], ts[kernel], it[kernel]
    rank = np.full(kernel.size, acts.rank, np.int64)
    sender = np.where(direction == RECV, peer, rank)
    receiver = np.where(direction == RECV, rank, peer)
    lo, hi = np.minimum(rank, peer), np.maximum(rank, peer)
    z = np.zeros(kernel.size, np.int64)
    p2p = k_how >= _P2P
    # the rank-local grouping each ordinal counts within (a kernel's transfers in order)
    ordinal = _ordinal(np.stack([k_how, pg, i, direction, np.where(p2p, peer, 0)], axis=1), t)
    key = np.stack([
        k_how, pg,
        np.select([k_how == _COLL, k_how == _ORD, k_how == _P2P], [seq, i, sender], lo),
        np.select([k_how == _ORD, k_how == _P2P], [ordinal, receiver],
                  np.where(k_how == _PAIR, hi, z)),
        np.where(p2p, i, z), np.where(p2p, ordinal, z)], axis=1)
    expected = np.where(p2p, 2, rc.size[kernel])
    return {"key": key, "rank": rank, "ts": t, "kernel": kernel, "expected": expected,
            "transfer": np.concatenate([np.full(int(whole.sum()), -1),
                                        np.arange(rc.op_kernel.size)])}


def match(ranks: list[RankActivities], comms: list[RankComm], synced: bool) -> None:
    """Match every communication kernel of the job into calls and fill in each
    :class:`RankComm`'s split (see the module doc). ``synced``: the activities' clocks
    are synced (else every cross-rank wait is unknown). A kernel of several transfers
    waits until the last of its peers arrives (its call is that transfer's)."""
    parts = [_rank_rows(acts, rc) for acts, rc in zip(ranks, comms)]

    def joined(name: str, width: int = 0) -> np.ndarray:
        if parts:
            return np.concatenate([p[name] for p in parts])
        return np.zeros((0, width) if width else 0, np.int64)

    keys, rank, ts = joined("key", 6), joined("rank"), joined("ts")
    call = np.full(keys.shape[0], -1, np.int64)
    matched = keys[:, 0] >= 0
    n_calls = 0
    if matched.any():
        _, inv = unique_rows(keys[matched])
        call[matched] = inv
        n_calls = int(inv.max()) + 1
    # each rank's arrival per call: its first kernel's start
    mem = np.flatnonzero(call >= 0)
    pair = unique_rows(np.stack([call[mem], rank[mem]], axis=1))[0]
    members = np.bincount(pair[:, 0], minlength=n_calls)
    arrive = np.full(pair.shape[0], np.iinfo(np.int64).max)
    np.minimum.at(arrive, _row_of(pair, call[mem], rank[mem]), ts[mem])
    last = np.full(n_calls + 1, np.iinfo(np.int64).min)  # [n_calls]: no call
    np.maximum.at(last, pair[:, 0], arrive)
    is_last = arrive == last[pair[:, 0]]
    last_rank = np.full(n_calls + 1, -1, np.int64)
    first_last = np.full(n_calls, np.iinfo(np.int64).max)
    np.minimum.at(first_last, pair[is_last, 0], pair[is_last, 1])
    last_rank[:n_calls] = first_last
    expected = np.full(n_calls + 1, -1, np.int64)
    np.maximum.at(expected, call[mem], joined("expected")[mem])
    complete = np.zeros(n_calls + 1, bool)
    complete[:n_calls] = np.where(expected[:n_calls] > 0, members >= expected[:n_calls],
                                  members >= 2) & synced
    members = np.r_[members, 1]
    at = 0
    for p, acts, rc in zip(parts, ranks, comms):
        m = p["kernel"].size
        c = np.where(call[at:at + m] >= 0, call[at:at + m], n_calls)
        at += m
        n, k = len(rc), p["kernel"]
        t, end = acts.ts[rc.pos], acts.end[rc.pos]
        # per kernel: its latest-arriving call; known when every one of its calls is
        rows_of = np.zeros(n, np.int64)
        np.add.at(rows_of, k, 1)
        done = np.zeros(n, np.int64)
        np.add.at(done, k, complete[c])
        ok = (rows_of > 0) & (done == rows_of)
        latest = np.full(n, np.iinfo(np.int64).min)
        np.maximum.at(latest, k, last[c])
        hit = np.flatnonzero(last[c] == latest[k])  # the first row reaching ``latest``
        first = np.full(n, m, np.int64)
        np.minimum.at(first, k[hit], hit)
        first = np.minimum(first, max(m - 1, 0))
        pick = c[first] if m else np.full(n, n_calls, np.int64)
        lst = np.where(ok, latest, t)
        rc.wait_end = np.where(rc.no_payload, end, np.clip(lst, t, end))
        rc.known = ok | rc.no_payload
        who = np.where(ok, last_rank[pick], -1)
        rc.waited_for = np.where((who != acts.rank) & (rc.wait_end > t) & ok, who, -1)
        rc.call = np.where(pick < n_calls, pick, -1)
        rc.members = members[pick]
        rc.expected = np.where(pick < n_calls, expected[pick],
                               np.where(rc.peer >= 0, 2, rc.size))
        op = p["transfer"] >= 0
        rc.op_call = np.full(rc.op_kernel.size, -1, np.int64)
        rc.op_call[p["transfer"][op]] = np.where(c[op] < n_calls, c[op], -1)
        # a kernel of transfers to several peers: the peer of the one it waited for last
        several = (rc.peer < 0) & (rows_of > 1) & (m > 0)
        tr = p["transfer"][first] if m else np.full(n, -1, np.int64)
        rc.peer = np.where(several & (tr >= 0), rc.op_peer[np.maximum(tr, 0)]
                           if rc.op_peer.size else -1, rc.peer)


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
    sync: ClockSync | None = None  # the clocks solved here (None: offsets were given)
    _index: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    def index_of(self, rank: int) -> int:
        """The position of ``rank`` in :attr:`acts` / :attr:`comms` (ValueError: not
        there)."""
        if len(self._index) != len(self.acts):
            self._index = {a.rank: k for k, a in enumerate(self.acts)}
        if rank not in self._index:
            raise ValueError(f"rank {rank} is not in the job")
        return self._index[rank]


@dataclass
class CommPart:
    """What the job's matching needs of one rank's GPU table, made where the table is
    read (a worker): its activities (on its own clock), its communication kernels (their
    process groups numbered in ``pg_names``, this rank's own order), the ends of its
    collectives (the clock sync's input; None where the offsets are given) and its
    host. A few arrays per kernel of the rank: no table."""

    acts: RankActivities
    comm: RankComm
    pg_names: list[str]
    ends: CollectiveEnds | None
    host: str | None


def comm_part(table: pa.Table, rank: int, with_ends: bool = True) -> CommPart:
    """One rank's :class:`CommPart` (``with_ends``: the clocks are to be solved)."""
    names: dict[str, int] = {}
    a = activities(table, rank=rank)
    rc = rank_comm(table, a, names)
    return CommPart(a, rc, sorted(names, key=lambda g: names[g]),
                    ends_of(rank_calls(table, rank)) if with_ends else None,
                    host_of(metadata(table)) if with_ends else None)


def job_comm(tables: Mapping[int, pa.Table | Callable[[], pa.Table]],
             offsets: dict[int, int] | None = None, synced: bool = True) -> JobComm:
    """Sync the clocks of ``tables`` (rank -> activity table, or what reads it: each is
    read and held in turn, only its activities and communication kept) on their
    collectives' and point-to-point pairs' ends (:mod:`..clocks`; or take ``offsets``:
    ns per rank, ``synced`` whether they sync the ranks), then match and split every
    communication kernel (see the module doc)."""
    parts = []
    for r in sorted(tables):  # each table read (where it is a reader) and held once
        source = tables[r]
        parts.append(comm_part(source() if callable(source) else source, r,
                               offsets is None))
    return job_comm_of(parts, offsets, synced)


def job_comm_of(parts: list[CommPart], offsets: dict[int, int] | None = None,
                synced: bool = True) -> JobComm:
    """:func:`job_comm` of the ranks' parts (:func:`comm_part`, made in any process; the
    list is consumed). The process groups are numbered in rank order, each rank's in
    its own order: the numbers do not depend on where the parts were made."""
    notes: list[str] = []
    parts.sort(key=lambda p: p.acts.rank)
    ranks = [p.acts.rank for p in parts]
    names: dict[str, int] = {}
    acts, comms, ends, hosts = [], [], {}, {}
    for p in parts:
        lut = np.array([names.setdefault(n, len(names)) for n in p.pg_names] + [-1],
                       np.int64)
        p.comm.pg = lut[p.comm.pg]
        acts.append(p.acts)
        comms.append(p.comm)
        if offsets is None:  # the parts were made with their ends (comm_part)
            if p.ends is None:
                raise ValueError(f"rank {p.acts.rank}'s part has no collective ends to "
                                 "sync the clocks on")
            ends[p.acts.rank] = p.ends
            hosts[p.acts.rank] = p.host
    parts.clear()
    sync = None
    if offsets is None:
        pairs = pair_ends(acts, comms)
        sync = synchronize({r: joined_ends(ends[r], pairs.get(r)) for r in ranks}, hosts)
        offsets, method = offsets_of(sync, notes)
        synced = method != "none"
    for a in acts:  # onto the common clock
        a.offset_ns = offsets.get(a.rank, 0)
        if a.offset_ns:
            a.ts, a.end = a.ts - a.offset_ns, a.end - a.offset_ns
    match(acts, comms, synced)
    if len(ranks) > 1:
        notes += p2p_notes(acts, comms)
    for a, rc in zip(acts, comms):
        a.wait_end = np.full(len(a), -1, np.int64)
        a.wait_end[rc.pos[rc.known]] = rc.wait_end[rc.known]
        a.waited_for = np.full(len(a), -1, np.int64)
        a.waited_for[rc.pos] = rc.waited_for
    return JobComm(acts, comms, sorted(names, key=lambda g: names[g]), offsets, synced, notes,
                   sync)


def pair_ends(acts: list[RankActivities], comms: list[RankComm]
              ) -> dict[int, CollectiveEnds]:
    """Per rank, the point-to-point transfers whose kernels end together, as calls the
    clocks are synced on (:mod:`..clocks`): each transfer of a kernel whose transfers
    all have one peer, numbered by its key (process group, sender, receiver, iteration,
    position), so a transfer and its peer's are one call (a kernel carrying transfers
    with several peers ends when its last peer's does: left out; so is the peer's when
    it is). Ends on each rank's own clock."""
    parts = [_rank_rows(a, rc) for a, rc in zip(acts, comms)]
    picked = [np.flatnonzero((p["transfer"] >= 0) & (rc.peer[p["kernel"]] >= 0))
              if len(rc) else np.zeros(0, np.int64) for p, rc in zip(parts, comms)]
    keys = [p["key"][k] for p, k in zip(parts, picked)]
    if not sum(k.shape[0] for k in keys):
        return {}
    _, number = unique_rows(np.concatenate(keys))
    out, at = {}, 0
    for a, rc, p, k in zip(acts, comms, parts, picked):
        n = k.size
        end = (a.end + a.offset_ns)[rc.pos[p["kernel"][k]]]
        out[a.rank] = CollectiveEnds(["(point-to-point)"], np.zeros(n, np.int64),
                                     number[at:at + n], end)
        at += n
    return out


def p2p_notes(acts: list[RankActivities], comms: list[RankComm]) -> list[str]:
    """What leaves point-to-point kernels unpaired, specifically: transfers whose peer is
    not among the job's ranks (not traced, or not in this window), and point-to-point
    kernels that state no peer (no ``Src Rank`` / ``Dst Rank``, no coalesced ops, not a
    two-rank group); those launched before the trace began (no launch in it: no peer
    can be known) are said once, apart."""
    traced = {a.rank for a in acts}
    missing: dict[int, int] = {}
    silent = before = 0
    for a, rc in zip(acts, comms):
        for peer in rc.op_peer.tolist():
            if peer not in traced:
                missing[peer] = missing.get(peer, 0) + 1
        p2p = a.collective[rc.pos] == collective("SendRecv")
        stated = np.zeros(len(rc), bool)
        stated[rc.op_kernel] = True
        unknown = p2p & ~stated & (rc.peer < 0)
        early = unknown & (a.launch_ts[rc.pos] < 0)
        before += int(early.sum())
        silent += int((unknown & ~early).sum())
    out = []
    if missing:
        peers = sorted(missing)
        shown = ", ".join(map(str, peers[:8])) + (f" and {len(peers) - 8} more"
                                                  if len(peers) > 8 else "")
        out.append(f"WARNING: {sum(missing.values())} send / receive transfer(s) name a peer "
                   f"that is not traced here (rank(s) {shown}): their wait / transfer split "
                   "is unknown and the path does not follow them; trace those ranks too")
    if before:
        out.append(f"{before} send / receive kernel(s) were launched before the trace began "
                   "(their launch is not in it, so no peer can be known): left unpaired")
    if silent:
        out.append(f"WARNING: {silent} send / receive kernel(s) state no peer (no Src / Dst "
                   "Rank, no coalesced send / receive ops before their launch, not a two-rank "
                   "group): their wait / transfer split is unknown")
    return out


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


def own_clock(acts: RankActivities) -> RankActivities:
    """A copy of ``acts`` (matched on synced clocks: :func:`job_comm_of`) on the rank's
    own clock, its split with it: what :func:`attach` gives of the rank's table."""
    off = acts.offset_ns
    wait_end = None
    if acts.wait_end is not None:  # -1: unknown, and (as in attach) before the clock's 0
        wait_end = acts.wait_end + off
        wait_end[(acts.wait_end < 0) | (wait_end < 0)] = -1
    return replace(acts, ts=acts.ts + off, end=acts.end + off, offset_ns=0,
                   wait_end=wait_end)


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
    return split_times(acts.kind, acts.ts, acts.end, acts.wait_end, keys, n_keys, only)


def split_times(kind: np.ndarray, ts: np.ndarray, end: np.ndarray,
                wait_end: np.ndarray | None, keys: np.ndarray, n_keys: int,
                only: np.ndarray | None = None) -> np.ndarray:
    """:func:`comm_split` of activities given as arrays (kind, start, end, where the
    wait ends: -1 unknown; None: no split attached)."""
    comm = np.flatnonzero((kind == COMM) & (True if only is None else only))
    if wait_end is None:
        out = np.zeros((n_keys, 2), np.int64)
        out[np.unique(keys[comm])] = -1
        return out
    we = wait_end[comm]
    known = we >= 0
    ts, end = ts[comm][known], end[comm][known]
    starts = np.concatenate([we[known], ts])
    ends = np.concatenate([end, we[known]])
    levels = np.repeat([0, 1], known.sum())
    k = keys[comm][known]
    out = grouped_top_times(starts, ends, levels, np.concatenate([k, k]), n_keys, 2)
    unknown = np.zeros(n_keys, bool)
    unknown[keys[comm][~known]] = True
    out[unknown] = -1
    return out
