"""Who hangs the job: PyTorch's NCCL Flight Recorder dumps of every rank, read as one.

Each rank's dump (:mod:`traceviz.ingest.flight_recorder` reads it) lists its last
collectives and point-to-point ops per process group, each with its group's sequence
number and state (``scheduled``: enqueued, ``started``, ``completed``), and per group the
last sequence number enqueued / started / completed. Definitions:

* A **collective** is (process group, ``collective_seq_id``) on every member of the group
  (the dumps' ``pg_config``: name, description, ranks). A member with a dump **entered**
  it when its dump holds it or its group's last enqueued number reaches it; it **never
  entered** it when its last enqueued number is below it. A point-to-point op is (group,
  sender, receiver, position among the sender's ops to that receiver), sender and
  receiver from the op's name (``nccl:send 0->1`` / ``nccl:recv 1<-0``: positions in the
  group).
* A member **without a dump** is unknown, never a cause on its own: where another member
  completed the op, it took part (an op completes on no member until every member
  entered it); where no member completed it, it is a **suspect** ("no dump from rank 3:
  possibly ...").
* A rank **waits in** its earliest op that is not completed, **for** the other members
  of that op that have not completed it: one that never entered it is a **cause** where
  it waits in nothing itself (it stopped issuing: a stuck data loader, a crash, an
  exception on one rank), else the wait follows it (rank 1 waits in DP for rank 3, which
  waits in TP for rank 2; a rank that never entered the op because it waits in an
  earlier one is followed the same way, never named a cause). Where every member
  entered the op and some members' GPUs started it (``started``, recorded with
  ``TORCH_NCCL_ENABLE_TIMING``), those still ``scheduled`` are causes too: their GPU
  never started it (a GPU fault, or a kernel before it that never ends). Waits that
  come back to a rank are a **deadlock** (members entered collectives in different
  orders). Where no cause is found and some rank waits (not in an op every member is
  in) or has no dump, the ranks that wait in nothing are suspects.
* The first line of the verdict names the causes and the ops they stopped before, and
  how many of the other ranks wait on them (``hang: rank 2 stopped before
  DATA_PARALLEL_GROUP all_reduce seq 4, ...; every other rank waits on it``).
* A **mismatch**: members of one collective that disagree on its op, sizes or types (a
  scatter's outputs, the others' inputs); a send whose input and its receive's output
  disagree on sizes or types (an all-to-all's sizes differ by design: only its op and
  types are compared).

The verdict is bounded whatever the job's size: ranks in the same state (waiting in the
same kind of op for the same cause) are one line, with their ranks as ranges; every rank
is in the tables. Everything here is plain data: the records and the verdict are frozen
dataclasses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

COMPLETED, STARTED, SCHEDULED = "completed", "started", "scheduled"
MAX_OP_NAME = 256        # characters of an op's name kept (its peers are in the first)
_P2P_NAME = re.compile(r"(send|recv)\D{0,32}?(\d{1,7})\s{0,4}(->|<-)\s{0,4}(\d{1,7})")
_UNEQUAL_SIZES = ("all_to_all", "alltoall")  # ops whose members' sizes differ by design
_SHOWN = 6               # causes, ops or ranks listed in one line before "..."


@dataclass(frozen=True, slots=True)
class Group:
    """A process group as a dump's ``pg_config`` states it; ``ranks`` ascending (a
    member's position in them is its rank in the group, as torch numbers it)."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    def label(self) -> str:
        return f"{self.desc} {ranges(self.ranks, brackets=True)}"


@dataclass(frozen=True, slots=True)
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
    end: str = ""            # where the chain ends, in words (the same for a whole group)

    def what(self) -> str:
        """The op it waits in, in words: ``DATA_PARALLEL_GROUP all_reduce seq 4``."""
        return f"{self.desc} {self.op}" + (f" seq {self.seq}" if self.seq is not None else "")


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
    suspects: tuple[int, ...] = ()  # possibly the cause (no dump, or stopped unopposed)

    def rank_table(self) -> pa.Table:
        """One row per rank (``hang.csv``)."""
        rows = [{"rank": r.rank, "state": r.state, "group": r.group,
                 "group_desc": r.desc, "seq": r.seq, "op": r.op,
                 "waits_for": ",".join(map(str, r.waits_for)) or None,
                 "never_entered": ",".join(map(str, r.never_entered)) or None,
                 "cause": r.rank in self.causes, "suspect": r.rank in self.suspects,
                 "chain": r.chain, "where": r.where}
                for r in self.ranks]
        return pa.Table.from_pylist(rows, schema=RANK_SCHEMA)

    def group_table(self) -> pa.Table:
        """One row per group and member (``hang_groups.csv``); the group's members as
        ranges (:func:`ranges`: at a glance, not a list a thousand ranks long;
        ``hang.json`` lists them once per group)."""
        return pa.Table.from_pylist([{
            "group": g.group, "desc": g.desc, "ranks": ranges(g.ranks),
            "rank": g.rank, "last_enqueued": g.last_enqueued,
            "last_started": g.last_started if g.last_started >= 0 else None,
            "last_completed": g.last_completed} for g in self.groups], schema=GROUP_SCHEMA)


RANK_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("state", pa.string()), ("group", pa.string()),
    ("group_desc", pa.string()), ("seq", pa.int64()), ("op", pa.string()),
    ("waits_for", pa.string()), ("never_entered", pa.string()), ("cause", pa.bool_()),
    ("suspect", pa.bool_()), ("chain", pa.string()), ("where", pa.string())])
GROUP_SCHEMA = pa.schema([
    ("group", pa.string()), ("desc", pa.string()), ("ranks", pa.string()),
    ("rank", pa.int32()), ("last_enqueued", pa.int64()), ("last_started", pa.int64()),
    ("last_completed", pa.int64())])


def ranges(ranks, brackets: bool = False) -> str:
    """``ranks`` (sorted or not) as ``0-3, 8, 10-11``; ``[...]`` around with
    ``brackets`` (a group's members); at most 12 runs, then ``... (N ranks)``."""
    rs = sorted(ranks)
    runs: list[str] = []
    k = 0
    while k < len(rs):
        j = k
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[k]) if j == k else
                    f"{rs[k]}, {rs[j]}" if j == k + 1 else f"{rs[k]}-{rs[j]}")
        k = j + 1
    text = ", ".join(runs[:12]) + (f", ... ({len(rs)} ranks)" if len(runs) > 12 else "")
    return f"[{text}]" if brackets else text


def p2p_peers(op: str, group: Group) -> tuple[int, int] | None:
    """(sender, receiver) global ranks of a point-to-point op's name (``send 0->1`` /
    ``recv 1<-0``: positions in the group); None when the name says neither."""
    m = _P2P_NAME.search(op[:MAX_OP_NAME])
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
    # (members not completed, of those the ones with a dump that never entered it, those
    # without a dump), once asked (:meth:`_Job.pending`)
    pending: tuple[tuple[int, ...], frozenset[int], tuple[int, ...]] | None = None


class _Job:
    """The dumps read as one: every op keyed across its members, each group's members'
    progress (see the module doc)."""

    def __init__(self, dumps: list[Dump], world: int | None):
        self.groups: dict[str, Group] = {}
        for d in dumps:
            self.groups.update(d.groups)
        self.by_rank = {d.rank: d for d in dumps}
        self.ranks = sorted(set(self.by_rank)
                            | {r for g in self.groups.values() for r in g.ranks}
                            | set(range(world or 0)))
        self.ops: dict[tuple, _Op] = {}
        self.first: dict[int, _Op | None] = {}  # rank -> the op it waits in
        self.last: dict[tuple[str, int], list[int]] = {}  # (group, rank) -> enq, st, done
        # (rank, group) -> the lowest p2p_seq_id its dump holds: 1 (or none stated) where
        # the ring buffer still holds every send / receive it made in the group
        self.p2p_from: dict[tuple[int, str], int] = {}
        for d in dumps:
            for e in d.entries:
                if e.is_p2p and e.p2p_seq > 0:
                    k = (d.rank, e.group)
                    self.p2p_from[k] = min(self.p2p_from.get(k, e.p2p_seq), e.p2p_seq)
        for d in dumps:
            self._add(d)

    def _add(self, d: Dump) -> None:
        for name, st in d.status.items():
            self.last[(name, d.rank)] = list(st)
        p2p_count: dict[tuple, int] = {}
        first = None
        for e in sorted(d.entries, key=lambda e: e.record_id):
            g = self.groups.get(e.group)
            if g is None:
                continue
            if e.is_p2p:
                pair = p2p_peers(e.op, g)
                if pair is None:
                    continue
                key: tuple = (e.group, pair, self._p2p_place(d.rank, e, g, pair, p2p_count))
                members: tuple[int, ...] = pair
            else:
                key = (e.group, e.seq)
                members = g.ranks
                if e.group not in d.status:
                    mine = self.last.setdefault((e.group, d.rank), [-1, -1, -1])
                    mine[0] = max(mine[0], e.seq)
                    if e.state == COMPLETED:
                        mine[2] = max(mine[2], e.seq)
            op = self.ops.get(key)
            if op is None:
                op = self.ops[key] = _Op(e.group, key, members)
            op.state[d.rank] = e.state
            op.entry[d.rank] = e
            if first is None and e.state != COMPLETED:
                first = op
        self.first[d.rank] = first

    def _p2p_place(self, rank: int, e: Entry, g: Group, pair: tuple[int, int],
                   count: dict[tuple, int]) -> int | tuple:
        """Which transfer between ``pair`` a send / receive is, the same on both sides:
        in a group of two, its ``p2p_seq_id`` (both count every transfer between them
        in one order); else its position among the sender's to that receiver, where
        both dumps hold all of them; else unknown (``("rank", rank, record)``: the ring
        buffer dropped earlier ones, and pairing by position would pair wrong ops)."""
        if len(g.ranks) == 2 and e.p2p_seq > 0:
            return ("seq", e.p2p_seq)
        if all(self.p2p_from.get((m, e.group), 1) <= 1 for m in pair):
            n = count.get((e.group, pair), 0)
            count[(e.group, pair)] = n + 1
            return n
        return ("rank", rank, e.record_id)

    def entered(self, op: _Op, rank: int) -> bool:
        """Whether ``rank`` (with a dump, absent from ``op``) entered it all the same: a
        collective its group's last enqueued number reaches (older than its ring); a
        send / receive whose place is unknown, unless ``rank`` waits in nothing (then it
        certainly never entered it)."""
        if len(op.key) == 3:
            return _unplaced(op) and self.first.get(rank) is not None
        return self.last.get((op.group, rank), [-1, -1, -1])[0] >= op.key[1]

    def pending(self, op: _Op) -> tuple[tuple[int, ...], frozenset[int], tuple[int, ...]]:
        """(members that have not completed ``op``, those of them with a dump that never
        entered it, those without a dump): nothing where a member completed it (then
        every member took part; one whose dump shows it running is about to see it
        complete)."""
        if op.pending is None:
            if COMPLETED in op.state.values():
                op.pending = ((), frozenset(), ())
            else:
                others = tuple(m for m in op.members if op.state.get(m) != COMPLETED)
                never = frozenset(m for m in others if m not in op.state
                                  and m in self.by_rank and not self.entered(op, m))
                op.pending = (others, never,
                              tuple(m for m in others if m not in self.by_rank))
        return op.pending

    def name(self, op: _Op) -> str:
        g = self.groups[op.group]
        if len(op.key) == 2:
            return f"{g.label()} seq {op.key[1]}"
        (s, r), place = op.key[1], op.key[2]
        which = (f"#{place + 1}" if isinstance(place, int) else
                 f"p2p seq {place[1]}" if place[0] == "seq" else "(earlier ones dropped)")
        return f"{g.label()} send {s} -> {r} {which}"


def _unplaced(op: _Op) -> bool:
    """Whether ``op`` is a send / receive whose place among its pair's is unknown."""
    return len(op.key) == 3 and isinstance(op.key[2], tuple) and op.key[2][0] == "rank"


def _same_transfer(a: _Op, b: _Op) -> bool:
    """Whether ``a`` and ``b`` are one op, or sends / receives of one sender and receiver
    whose places are unknown (the same transfer as far as the dumps tell)."""
    return a is b or (_unplaced(a) and _unplaced(b) and a.group == b.group
                      and a.key[1] == b.key[1])


def analyze(dumps: list[Dump], world: int | None = None) -> Hang:
    """The verdict on ``dumps`` (one per rank; ``world``: the job's ranks when known,
    else those the groups name)."""
    job = _Job(dumps, world)
    missing, mismatches = [], []
    mismatched: set[tuple] = set()
    for key, op in sorted(job.ops.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))):
        others, never, _ = job.pending(op)
        if never:
            missing.append((op.group, key[1] if len(key) == 2 else -1,
                            tuple(sorted(op.state)), tuple(sorted(never))))
        said = {_signature(e) for e in op.entry.values()}
        if len(said) > 1:
            mismatches.append(_mismatch(job.name(op), op))
            mismatched.add(key)
    states: list[RankState] = []
    causes: set[int] = set()
    loop: set[int] = set()
    unknown: set[int] = set()
    waits_on: dict[int, set[int]] = {}  # rank -> the causes its chain of waits ends at
    stalled: dict[tuple, tuple[_Op, set[int]]] = {}  # ops every member is in, none ends
    for r in job.ranks:
        if r not in job.by_rank:
            states.append(RankState(r, "no dump", None, None, None, None, (), (), "no dump",
                                    None, "no dump"))
            continue
        first = job.first[r]
        if first is None:
            states.append(RankState(r, "stopped", None, None, None, None, (), (),
                                    "waits in nothing: it issued no op it had not finished",
                                    None, "stopped"))
            continue
        chain = _follow(job, r, first)
        waits_on[r] = chain.causes
        causes |= chain.causes
        loop |= chain.cycle
        unknown |= chain.suspects
        if chain.stalled is not None and chain.stalled[0].key not in mismatched:
            stalled.setdefault(chain.stalled[0].key, chain.stalled)
        e = first.entry[r]
        others, never, _ = job.pending(first)
        states.append(RankState(r, "waiting", first.group, job.groups[first.group].desc,
                                e.seq if not e.is_p2p else None, e.op,
                                tuple(m for m in others if m != r), tuple(sorted(never)),
                                " ".join(chain.words), e.where or None, chain.end))
    never_entered = {r for _, _, _, absent in missing for r in absent}
    stopped = {s.rank for s in states if s.state == "stopped"}
    causes |= never_entered & stopped
    suspects = unknown - causes
    if not causes and not loop and not stalled and (
            unknown or any(s.state != "stopped" for s in states)):
        suspects |= stopped  # it waits in nothing while others wait unexplained
    groups_rows = tuple(GroupRank(g.name, g.desc, g.ranks, r, *job.last[(g.name, r)])
                        for g in sorted(job.groups.values(), key=lambda g: g.name)
                        for r in g.ranks if (g.name, r) in job.last)
    no_dump = [s.rank for s in states if s.state == "no dump"]
    notes = ([f"no dump from rank(s) {ranges(no_dump)} (missing or unreadable): what "
              "the others' dumps say of them stands; where another member completed an "
              "op they took part"] if no_dump else [])
    verdict = _verdict(job, states, sorted(causes), sorted(suspects), missing, mismatches,
                       sorted(loop))
    if causes:
        verdict.insert(0, _headline(job, states, sorted(causes), waits_on))
    elif stalled and not loop and not suspects:
        verdict.insert(0, _stalled(job, list(stalled.values())))
    return Hang(verdict, tuple(sorted(causes)), tuple(states), groups_rows, tuple(missing),
                tuple(mismatches), tuple(sorted(loop)), tuple(notes),
                tuple(sorted(suspects)))


def _signature(e: Entry) -> tuple:
    """What the members of one op must agree on (see the module doc): a send's input is
    its receive's output; a scatter's members agree on their outputs, the rest on their
    inputs; a coalesced block on being one."""
    if e.is_p2p:
        return (e.input_sizes if e.op.startswith("send") else e.output_sizes, e.dtypes)
    kind = e.op.split(" ", 1)[0]
    if kind == "coalesced":
        return (kind,)
    if any(k in kind for k in _UNEQUAL_SIZES):
        return (kind, e.dtypes)
    return (kind, e.output_sizes if kind == "scatter" else e.input_sizes, e.dtypes)


def _mismatch(name: str, op: _Op) -> str:
    """One line: the op, then each distinct signature with the ranks that state it."""
    by: dict[tuple, list[int]] = {}
    for r, e in sorted(op.entry.items()):
        by.setdefault((e.op, e.input_sizes, e.dtypes), []).append(r)
    parts = []
    for (opname, sizes, dtypes), rs in list(by.items())[:_SHOWN]:
        shown = [list(s) for s in sizes[:4]] + (["..."] if len(sizes) > 4 else [])
        who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {ranges(rs)}"
        parts.append(f"{who} {opname} {shown} {list(dtypes[:4])}")
    more = f"; ... ({len(by) - _SHOWN} more)" if len(by) > _SHOWN else ""
    return f"{name}: " + "; ".join(parts) + more


@dataclass
class _Chain:
    """The waits followed from one rank (:func:`_follow`)."""

    words: list[str]                   # the chain, in words
    end: str = ""                      # where it ends, without the ranks on the way
    causes: set[int] = field(default_factory=set)    # stopped, or GPU never started
    cycle: set[int] = field(default_factory=set)     # the ranks of a deadlock
    suspects: set[int] = field(default_factory=set)  # ranks without a dump it ends at
    stalled: tuple[_Op, set[int]] | None = None  # an op every member is in, none ends


def _follow(job: _Job, rank: int, op: _Op) -> _Chain:
    """The chain of waits from ``rank`` waiting in ``op`` (see the module doc)."""
    chain = _Chain([f"rank {rank} waits in {job.name(op)}"])
    seen = [rank]
    cur, cur_op = rank, op
    for _ in range(len(job.first) + 1):
        others, never, no_dump = job.pending(cur_op)
        others = tuple(m for m in others if m != cur)
        idle = sorted(m for m in never if job.first.get(m) is None)
        if idle:  # they stopped issuing before it
            chain.causes.update(idle)
            chain.end = f"for rank(s) {ranges(idle)}, which never entered it"
            chain.words.append(chain.end)
            break
        # one that never entered it waits in an earlier op: the wait follows it
        nxt = min(never) if never else next(
            (m for m in others if (f := job.first.get(m)) is not None
             and not _same_transfer(f, cur_op)), None)
        if nxt is None:
            lagging = _unstarted(cur_op)
            if no_dump:
                chain.suspects.update(no_dump)
                chain.end = (f"for rank(s) {ranges(no_dump)}: no dump (possibly never "
                             "entered it)")
            elif lagging:  # the others' GPUs run it, theirs never began
                chain.causes.update(lagging)
                chain.end = (f"for rank(s) {ranges(lagging)}, whose GPU never started it "
                             "(a GPU fault, or a kernel before it that never ends)")
            elif others:  # in it too: it does not complete (a GPU, the network)
                chain.stalled = (cur_op, {cur, *others})
                chain.end = f"for rank(s) {ranges(others)}, in it too: it does not complete"
            if chain.end:
                chain.words.append(chain.end)
            break
        if nxt in seen:
            chain.cycle.update(seen[seen.index(nxt):])
            chain.end = "a cycle (deadlock)"
            chain.words.append(f"for rank {nxt}: {chain.end}")
            break
        nxt_op = job.first[nxt]
        assert nxt_op is not None  # it never entered this op only by waiting in another
        chain.words.append(f"for rank {nxt}, which " + (
            "never entered it and " if nxt in never else "") + f"waits in {job.name(nxt_op)}")
        seen.append(nxt)
        cur, cur_op = nxt, nxt_op
    return chain


def _unstarted(op: _Op) -> list[int]:
    """The members of ``op`` whose GPU never started it while another member's did (its
    state ``scheduled`` beside a ``started``: the dumps record starts where
    ``TORCH_NCCL_ENABLE_TIMING`` is on); none where no member shows a start."""
    if STARTED not in op.state.values():
        return []
    return sorted(m for m, st in op.state.items() if st == SCHEDULED)


def _headline(job: _Job, states: list[RankState], causes: list[int],
              waits_on: dict[int, set[int]]) -> str:
    """The verdict in one line: who stopped (or whose GPU never started) before which
    ops, and how many of the other ranks wait on them."""
    by_state = {s.rank: s for s in states}
    parts = []
    for stopped in (True, False):
        who = [c for c in causes if (by_state[c].state == "stopped") == stopped]
        if not who:
            continue
        ops: dict[str, int] = {}
        for s in states:  # the ops they never entered that others wait in, most first
            if s.state == "waiting" and s.rank not in causes and set(who) & set(
                    s.never_entered):
                what = s.what()
                ops[what] = ops.get(what, 0) + 1
        if not stopped:
            for c in who:
                what = by_state[c].what()
                ops[what] = ops.get(what, 0) + len(states)
        named = sorted(ops, key=lambda w: -ops[w])
        listed = ", ".join(named[:3]) + (f" (and {len(named) - 3} more)" if len(named) > 3
                                         else "")
        ranks = f"rank {who[0]}" if len(who) == 1 else f"ranks {ranges(who)}"
        parts.append(f"{ranks} stopped before {listed}" if stopped else
                     f"{ranks} never started {listed} on the GPU")
    others = [s for s in states if s.rank not in causes and s.state != "no dump"]
    on = [s for s in others if waits_on.get(s.rank, set()) & set(causes)]
    them = "it" if len(causes) == 1 else "them"
    tail = (f"every other rank waits on {them}" if others and len(on) == len(others) else
            f"{len(on)} of the {len(others)} other ranks with a dump wait on {them}")
    return "hang: " + "; ".join(parts) + "; " + tail


def _stalled(job: _Job, stalled: list[tuple[_Op, set[int]]]) -> str:
    """The verdict where the waits end in ops every member entered and none completed,
    and the dumps do not say whose GPU never started them."""
    ranks = sorted({r for _, rs in stalled for r in rs})
    ops = ", ".join(job.name(op) for op, _ in stalled[:3]) + (
        f" (and {len(stalled) - 3} more)" if len(stalled) > 3 else "")
    if all(st == STARTED for op, _ in stalled for st in op.state.values()):
        why = ("every member's GPU started it: the network, or a GPU stuck inside it")
    else:
        why = ("a GPU fault, a kernel before it that never ends, or the network; the dumps "
               "do not say whose GPU never started it (dump with TORCH_NCCL_ENABLE_TIMING=1 "
               "to name it)")
    return f"hang: ranks {ranges(ranks)} are all in {ops}, which none of them completes: {why}"


def _verdict(job: _Job, states: list[RankState], causes: list[int], suspects: list[int],
             missing: list, mismatches: list, loop: list[int]) -> list[str]:
    """The first lines: who stopped the job, who may have, then what the other ranks
    wait in: each rank's chain where at most :data:`_SHOWN` wait, else ranks in the same
    state as one line (bounded at any size)."""
    out = []
    never_of: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
    for g, seq, entered, absent in missing:
        for c in absent:
            if c in causes:
                never_of.setdefault(c, []).append((g, seq, entered))
    alike: dict[tuple, list[int]] = {}  # causes that never entered the same ops
    for c in causes:
        alike.setdefault(tuple(never_of.get(c, [])), []).append(c)
    for never, cs in alike.items():
        listed = "; ".join(
            f"{job.groups[g].label()} " + (
                f"seq {seq}" if seq >= 0 else
                f"a send / receive with rank(s) {ranges(entered)}")
            + (f" (its last completed: {job.last[(g, cs[0])][2]})"
               if seq >= 0 and (g, cs[0]) in job.last and len(cs) == 1 else "")
            for g, seq, entered in never[:_SHOWN])
        who = f"rank {cs[0]}" if len(cs) == 1 else f"ranks {ranges(cs)}"
        out.append(f"{who} never entered {len(never)} op(s) its peers entered: {listed}"
                   + (" ..." if len(never) > _SHOWN else ""))
    by_state = {s.rank: s for s in states}
    no_dump = [r for r in suspects if by_state[r].state == "no dump"]
    idle = [r for r in suspects if by_state[r].state == "stopped"]
    if no_dump:
        out.append(f"no dump from rank(s) {ranges(no_dump)}: possibly the cause (ops no "
                   "member completed wait for them; their dumps would tell)")
    if idle:
        out.append(f"rank(s) {ranges(idle)} wait in nothing (every op they issued "
                   "completed): possibly the cause, stopped before the op the others wait "
                   "in")
    if loop:
        out.append(f"deadlock: ranks {ranges(loop)} wait for each other (they entered "
                   "collectives in different orders)")
    for m in mismatches[:5]:
        out.append(f"mismatch: {m}")
    if len(mismatches) > 5:
        out.append(f"... and {len(mismatches) - 5} more mismatches (hang.json)")
    if not out and not any(s.state == "waiting" for s in states):
        out.append("no hang found: every rank's ops completed, or none waits for another")
    waiting = [s for s in states if s.state == "waiting"]
    if len(waiting) <= _SHOWN:  # few: every rank's chain
        return out + [s.chain for s in waiting]
    groups: dict[tuple, list[RankState]] = {}
    for s in waiting:
        groups.setdefault((s.what(), s.end), []).append(s)
    for (what, end), ss in groups.items():
        if len(ss) == 1:
            out.append(ss[0].chain)
            continue
        out.append(f"ranks {ranges([s.rank for s in ss])} ({len(ss)}) wait in {what}"
                   + (f", ending {end}" if end else "") + f"; e.g. {ss[0].chain}")
    return out
