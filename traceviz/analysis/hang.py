"""Who hangs the job: PyTorch's NCCL Flight Recorder dumps of every rank, read as one.

Each rank's dump (:mod:`traceviz.ingest.flight_recorder` reads it) lists its last
collectives and point-to-point ops per process group, each with its group's sequence
number and state (``scheduled``: enqueued, ``started``, ``completed``), and per group the
last sequence number enqueued / started / completed. Definitions:

* A **collective** is (process group, ``collective_seq_id``) on every member of the group
  (the dumps' ``pg_config``: name, description, ranks). A member **entered** it when its
  dump holds it or its group's last enqueued number reaches it; it **never entered** it
  when its last enqueued number is below it. A point-to-point op is (group, sender,
  receiver, position among the sender's ops to that receiver), sender and receiver from
  the op's name (``nccl:send 0->1`` / ``nccl:recv 1<-0``: positions in the group).
* A rank **waits in** its earliest op that is not completed, **for** the other members
  of that op that have not completed it: one that never entered it is a **cause** where
  it waits in nothing itself (it stopped issuing: a stuck data loader, a crash, an
  exception on one rank), else the wait follows it (rank 1 waits in DP for rank 3, which
  waits in TP for rank 2). Waits that come back to a rank are a **deadlock** (members
  entered collectives in different orders).
* A **mismatch**: members of one collective that disagree on its op or sizes.
* A rank without a dump is named; what the others say of it stands (it may be the one
  that stopped, or its dump was not written).

Everything here is plain data: the records and the verdict are frozen dataclasses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

COMPLETED = "completed"
_P2P_NAME = re.compile(r"(send|recv)\D*(\d+)\s*(->|<-)\s*(\d+)")


@dataclass(frozen=True)
class Group:
    """A process group as a dump's ``pg_config`` states it."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    def label(self) -> str:
        return f"{self.desc} {list(self.ranks)}"


@dataclass(frozen=True)
class Entry:
    """One op of a rank's dump."""

    record_id: int
    group: str               # process group name
    seq: int                 # collective_seq_id (0: none)
    p2p_seq: int             # p2p_seq_id (0: none)
    op: str                  # profiling_name without ``nccl:``
    state: str               # scheduled / started / completed
    is_p2p: bool
    input_sizes: tuple
    output_sizes: tuple
    dtypes: tuple
    where: str               # the user's frame that issued it (file:line function)


@dataclass(frozen=True)
class Dump:
    """One rank's Flight Recorder dump."""

    rank: int
    source: str
    version: str
    groups: dict[str, Group]
    entries: tuple[Entry, ...]
    # per group name: (last enqueued, last started, last completed) collective sequence
    # numbers (-1 unknown), from pg_status
    status: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class RankState:
    """What one rank was doing when the job hung."""

    rank: int
    state: str               # "waiting", "stopped" (issued nothing it waits on), "no dump"
    group: str | None        # the group of the op it waits in
    desc: str | None         # that group's description
    seq: int | None
    op: str | None
    waits_for: tuple[int, ...]
    never_entered: tuple[int, ...]  # of those, the ones that never entered that op
    chain: str               # the waits followed to their cause, in words
    where: str | None


@dataclass(frozen=True)
class GroupRank:
    """One member's progress in one group."""

    group: str
    desc: str
    ranks: tuple[int, ...]
    rank: int
    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True)
class Hang:
    """The verdict on a set of dumps (see the module doc)."""

    verdict: list[str]
    causes: tuple[int, ...]
    ranks: tuple[RankState, ...]
    groups: tuple[GroupRank, ...]
    missing: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...]], ...]  # group, seq,
    #                        entered, never entered
    mismatches: tuple[str, ...]
    deadlock: tuple[int, ...]
    notes: tuple[str, ...]

    def rank_table(self) -> pa.Table:
        """One row per rank (``hang.csv``)."""
        rows = [{"rank": r.rank, "state": r.state, "group": r.group,
                 "group_desc": r.desc, "seq": r.seq, "op": r.op,
                 "waits_for": ",".join(map(str, r.waits_for)) or None,
                 "never_entered": ",".join(map(str, r.never_entered)) or None,
                 "cause": r.rank in self.causes, "chain": r.chain, "where": r.where}
                for r in self.ranks]
        return pa.Table.from_pylist(rows, schema=RANK_SCHEMA)

    def group_table(self) -> pa.Table:
        """One row per group and member (``hang_groups.csv``)."""
        return pa.Table.from_pylist([{
            "group": g.group, "desc": g.desc, "ranks": ",".join(map(str, g.ranks)),
            "rank": g.rank, "last_enqueued": g.last_enqueued,
            "last_started": g.last_started if g.last_started >= 0 else None,
            "last_completed": g.last_completed} for g in self.groups], schema=GROUP_SCHEMA)


RANK_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("state", pa.string()), ("group", pa.string()),
    ("group_desc", pa.string()), ("seq", pa.int64()), ("op", pa.string()),
    ("waits_for", pa.string()), ("never_entered", pa.string()), ("cause", pa.bool_()),
    ("chain", pa.string()), ("where", pa.string())])
GROUP_SCHEMA = pa.schema([
    ("group", pa.string()), ("desc", pa.string()), ("ranks", pa.string()),
    ("rank", pa.int32()), ("last_enqueued", pa.int64()), ("last_started", pa.int64()),
    ("last_completed", pa.int64())])


def p2p_peers(op: str, group: Group) -> tuple[int, int] | None:
    """(sender, receiver) global ranks of a point-to-point op's name (``send 0->1`` /
    ``recv 1<-0``: positions in the group); None when the name says neither."""
    m = _P2P_NAME.search(op)
    if not m:
        return None
    a, b = int(m.group(2)), int(m.group(4))
    sender, receiver = (a, b) if m.group(3) == "->" else (b, a)
    if max(sender, receiver) >= len(group.ranks):
        return None
    return group.ranks[sender], group.ranks[receiver]


@dataclass
class _Op:
    """One op on every member: who entered it, in which state, with what."""

    group: str
    key: tuple
    members: tuple[int, ...]
    state: dict[int, str] = field(default_factory=dict)
    entry: dict[int, Entry] = field(default_factory=dict)


def analyze(dumps: list[Dump], world: int | None = None) -> Hang:
    """The verdict on ``dumps`` (one per rank; ``world``: the job's ranks when known,
    else those the groups name)."""
    groups: dict[str, Group] = {}
    for d in dumps:
        groups.update(d.groups)
    by_rank = {d.rank: d for d in dumps}
    ranks = sorted(set(by_rank) | {r for g in groups.values() for r in g.ranks}
                   | set(range(world or 0)))
    ops: dict[tuple, _Op] = {}
    op_of: dict[tuple[int, int], _Op] = {}  # (rank, record id) -> its op
    last: dict[tuple[str, int], list[int]] = {}  # (group, rank) -> enq, started, completed
    p2p_count: dict[tuple, int] = {}
    for d in dumps:
        for name, st in d.status.items():
            last[(name, d.rank)] = list(st)
        for e in sorted(d.entries, key=lambda e: e.record_id):
            g = groups.get(e.group)
            if g is None:
                continue
            if e.is_p2p:
                pair = p2p_peers(e.op, g)
                if pair is None:
                    continue
                n = p2p_count.get((e.group, d.rank, pair), 0)
                p2p_count[(e.group, d.rank, pair)] = n + 1
                key: tuple = (e.group, "p2p", pair, n)
                members: tuple[int, ...] = pair
            else:
                key = (e.group, "coll", e.seq)
                members = g.ranks
                mine = last.setdefault((e.group, d.rank), [-1, -1, -1])
                if not d.status or e.group not in d.status:
                    mine[0] = max(mine[0], e.seq)
                    if e.state == COMPLETED:
                        mine[2] = max(mine[2], e.seq)
            op = ops.setdefault(key, _Op(e.group, key, members))
            op.state[d.rank] = e.state
            op.entry[d.rank] = e
            op_of[(d.rank, e.record_id)] = op
    missing, mismatches = [], []
    for key, op in sorted(ops.items(), key=lambda kv: str(kv[0])):
        absent = tuple(r for r in op.members if r not in op.state and _never(op, r, last,
                                                                             by_rank))
        if absent:
            missing.append((op.group, key[2] if key[1] == "coll" else -1,
                            tuple(sorted(op.state)), absent))
        said = {(e.op, e.input_sizes, e.dtypes) for e in op.entry.values()}
        if len(said) > 1:
            mismatches.append(f"{_name(op, groups)}: " + "; ".join(
                f"rank {r} {e.op} {list(map(list, e.input_sizes))} {list(e.dtypes)}"
                for r, e in sorted(op.entry.items())))
    waiting = {d.rank: _first_incomplete(d, op_of) for d in dumps}
    states: list[RankState] = []
    causes: set[int] = set()
    loop: set[int] = set()
    for r in ranks:
        if r not in by_rank:
            states.append(RankState(r, "no dump", None, None, None, None, (), (), "no dump",
                                    None))
            continue
        first = waiting[r]
        if first is None:
            states.append(RankState(r, "stopped", None, None, None, None, (), (),
                                    "waits in nothing: it issued no op it had not finished",
                                    None))
            continue
        waits_for, never = _waits_for(first, r, last, by_rank)
        chain, cause, cycle = _follow(r, first, waiting, groups, last, by_rank)
        causes |= cause
        loop |= cycle
        e = first.entry[r]
        states.append(RankState(r, "waiting", first.group, groups[first.group].desc,
                                e.seq if not e.is_p2p else None, e.op, waits_for, never,
                                chain, e.where or None))
    never_entered = {r for _, _, _, absent in missing for r in absent}
    stopped = {s.rank for s in states if s.state in ("stopped", "no dump")}
    causes |= never_entered & stopped
    groups_rows = tuple(GroupRank(g.name, g.desc, g.ranks, r, *last[(g.name, r)])
                        for g in sorted(groups.values(), key=lambda g: g.name)
                        for r in g.ranks if (g.name, r) in last)
    notes = [f"rank {s.rank}: no dump (its file is missing or could not be read); what the "
             "others' dumps say of it stands" for s in states if s.state == "no dump"]
    verdict = _verdict(states, sorted(causes), missing, mismatches, sorted(loop), groups,
                       last)
    return Hang(verdict, tuple(sorted(causes)), tuple(states), groups_rows, tuple(missing),
                tuple(mismatches), tuple(sorted(loop)), tuple(notes))


def _never(op: _Op, rank: int, last: dict, by_rank: dict) -> bool:
    """Whether ``rank`` (a member of ``op`` absent from it) never entered it: its dump
    shows its group's last enqueued number below the op's (a rank without a dump: it is
    not in the others' ... it never entered as far as the dumps tell)."""
    if rank not in by_rank:
        return True
    if op.key[1] != "coll":
        return True  # point-to-point: the ring buffer holds every op after the oldest
    enq = last.get((op.group, rank), [-1, -1, -1])[0]
    return enq < op.key[2]


def _first_incomplete(d: Dump, op_of: dict[tuple[int, int], _Op]) -> _Op | None:
    """The op ``d``'s rank waits in: its earliest not completed (by record)."""
    for e in sorted(d.entries, key=lambda e: e.record_id):
        if e.state != COMPLETED and (d.rank, e.record_id) in op_of:
            return op_of[(d.rank, e.record_id)]
    return None


def _waits_for(op: _Op, rank: int, last: dict, by_rank: dict
               ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the other members that have not completed ``op``, those of them that never
    entered it)."""
    others = [m for m in op.members if m != rank and op.state.get(m) != COMPLETED]
    never = [m for m in others if m not in op.state and _never(op, m, last, by_rank)]
    return tuple(others), tuple(never)


def _name(op: _Op, groups: dict) -> str:
    g = groups[op.group]
    if op.key[1] == "coll":
        return f"{g.label()} seq {op.key[2]}"
    s, r = op.key[2]
    return f"{g.label()} send {s} -> {r} #{op.key[3] + 1}"


def _follow(rank: int, op: _Op, waiting: dict, groups: dict, last: dict, by_rank: dict
            ) -> tuple[str, set[int], set[int]]:
    """The chain of waits from ``rank`` (in words), the ranks it ends at that never
    entered what was waited for, and the ranks of a cycle (deadlock) if it comes back."""
    words = [f"rank {rank} waits in {_name(op, groups)}"]
    seen = [rank]
    causes: set[int] = set()
    cycle: set[int] = set()
    cur, cur_op = rank, op
    for _ in range(len(waiting) + 1):
        others, never = _waits_for(cur_op, cur, last, by_rank)
        if never:
            causes.update(never)
            words.append(f"for rank(s) {', '.join(map(str, never))}, which never entered it")
            break
        nxt = next((m for m in others if waiting.get(m) is not None
                    and waiting[m] is not cur_op), None)
        if nxt is None:
            if others:  # in it too: it does not complete (a mismatch, the network)
                words.append(f"for rank(s) {', '.join(map(str, others))}, in it too: it "
                             "does not complete")
            break
        if nxt in seen:
            cycle.update(seen[seen.index(nxt):])
            words.append(f"for rank {nxt}: a cycle (deadlock)")
            break
        words.append(f"for rank {nxt}, which waits in {_name(waiting[nxt], groups)}")
        seen.append(nxt)
        cur, cur_op = nxt, waiting[nxt]
    return " ".join(words), causes, cycle


def _verdict(states: list[RankState], causes: list[int], missing: list, mismatches: list,
             loop: list[int], groups: dict, last: dict) -> list[str]:
    """The first lines: who stopped the job, then what every other rank waits in."""
    out = []
    for c in causes:
        never = [(g, seq) for g, seq, _, absent in missing if c in absent]
        listed = "; ".join(
            f"{groups[g].label()} " + (f"seq {seq}" if seq >= 0 else "a send / receive")
            + (f" (its last completed: {last[(g, c)][2]})"
               if seq >= 0 and (g, c) in last else "")
            for g, seq in never[:6])
        out.append(f"rank {c} never entered {len(never)} op(s) its peers entered: {listed}"
                   + (" ..." if len(never) > 6 else ""))
    if loop:
        out.append(f"deadlock: ranks {', '.join(map(str, loop))} wait for each other "
                   "(they entered collectives in different orders)")
    for m in mismatches[:5]:
        out.append(f"mismatch: {m}")
    if not out:
        out.append("no hang found: every rank's ops completed, or none waits for another")
    out += [s.chain for s in states if s.state == "waiting"]
    return out
