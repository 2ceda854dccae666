"""The job's critical path: every rank's graph joined through its collectives, on one
clock, with what-if re-timing.

**Joining ranks.** Each rank's graph (:mod:`.rank_graph`, exact ns) is moved onto the
common clock (``ts - offset``, offsets from the collectives' ends, :mod:`..clocks`). The
members of one call (:mod:`..diagnose.waits`: a collective's kernels of one process group
and ``Seq``; a send and its receive by their peers, as PyTorch writes them) are joined:
the call ends on every member once the last member has started and the data has moved,
so an edge runs from *every* member's kernel start to every other member's kernel end,
its own time that member's transfer (re-timed, whoever arrives last binds). A call of
many members (a data-parallel group's) is joined through one point of its own instead,
its *hub*, with the same times: every member's start into it, out of it to every
member's end (:func:`_collective_edges`: 2 n edges, not n (n - 1)). Sends /
receives that cannot be paired (no peer stated in a group of more than two ranks, the
peer not traced) are not joined, and the result says how many, loudly.

**Synchronising calls.** Traces profiled without ``cuda_sync`` events (PyTorch's
default) do not say what a ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` /
``cudaEventSynchronize`` / blocking ``cudaMemcpy`` (``.item()``) waited for: the device
activity launched before the call that ends last before it returns is taken to be it
(an *inferred* sync edge), so the host's work after the call moves with the GPU's.

**The path.** An edge's *own time* is what the work takes: an operator's or kernel's span,
a launch or kernel-kernel delay, a gap between top-level operators on a thread; 0 for a
blocking sync call (it only waits) and for sync edges; a collective's own time is its
*transfer*: the member's time after the last member arrived (it waits for nobody). A
point is reached through the predecessor whose end plus own time is latest (its
*binding* edge); the path is followed back from the iteration's last point along binding
edges. Its time on the common clock is split per edge into the own time (compute, each
comm group, memory, CPU, launch, kernel-kernel) and *wait*: the rest, time the point was
later than the work before it explains (``wait: other rank`` on an edge from another
rank). The **iteration** is the span of the points the graph joins (an edge in or out:
:func:`iteration_span`): the path, and the time before it where it starts after the
iteration's first point.

**What-if** (:mod:`.what_if`). The own time of chosen edges is multiplied by a factor and
every point is re-timed in topological order: its time is its latest predecessor's plus
own time, plus its measured wait (kept as is); points without predecessors keep their
time. The new iteration time is the span of the re-timed joined points and the new path
follows the new binding edges. With every factor 1 the re-timed job equals the measured
one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc
from numba import njit

from ...errors import TraceVizError, UsageError
from ...table.arrays import index_in, row_texts
from ...table.parked import release_free_memory
from ...table.schema import COLLECTIVES, GROUPS, KINDS
from ..host_device import ACTIVITY
from . import rank_graph as R
from .graph import (
    COLLECTIVE,
    KERNEL_KERNEL,
    LAUNCH,
    MAX_IDS,
    OPERATOR,
    SYNC,
    Graph,
    acyclic,
    csr,
    dedup,
    topo,
)
from .rank_graph import BLOCKING_CALLS, RankGraph, cycle_note, point_text

TRIM_EVERY = 512  # pieces laid out between heap trims (a trim costs ~1 ms)

# the calls that return only when GPU work has ended (a cudaMemcpyAsync returns at once),
# CUDA's and HIP's (ROCm; hipMemcpyWithStream is PyTorch's blocking copy there)
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "hipDeviceSynchronize", "hipStreamSynchronize",
              "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream")

# path categories
CATEGORIES = ("compute", "memory", "cpu", "launch", "kernel_kernel", "wait",
              "wait: other rank", "wait: earlier work") + tuple(f"comm: {g}" for g in GROUPS)
COMPUTE, MEMORY, CPU, LAUNCH_CAT, KK_CAT, WAIT, WAIT_RANK, WAIT_EARLIER = range(8)
COMM0 = 8


@dataclass
class KernelInfo:
    """Per GPU-table row of one rank: what the job join needs (kind code, comm group
    code, kernel name, and the communication call it belongs to)."""

    kind: np.ndarray        # 0 COMP, 1 COMM, 2 MEM (schema order), -1 unknown
    group: np.ndarray       # GROUPS index, -1
    name: list[str]
    call: np.ndarray        # the call's id in the job (:mod:`..diagnose.waits`), -1 none
    p2p: np.ndarray         # bool: a point-to-point kernel (SendRecv) launched in the trace
    # the further calls of rows that carry several transfers (a coalesced block of sends
    # and receives): (row, call) pairs
    more_calls: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64),
                                                 np.zeros(0, np.int64))


@dataclass
class JobGraph:
    """The joined graph, per node its rank and common-clock time (``node_rank`` /
    ``node_event`` int32), and per edge its own time and category."""

    graph: Graph
    ranks: list[RankGraph]
    own: np.ndarray         # ns per edge
    category: np.ndarray    # CATEGORIES index per edge (int8)
    node_base: np.ndarray   # first node id of each rank
    offsets: dict[int, int]
    notes: list[str] = field(default_factory=list)
    edge_comm_group: np.ndarray | None = None   # GROUPS index per edge (-1; int8)
    edge_name: np.ndarray | None = None         # kernel name id per edge (-1; int32) ...
    names: list[str] = field(default_factory=list)  # ... into this list
    # per node: an activity start queued behind device work launched before the window
    queued: np.ndarray | None = None
    # per hub (the nodes from ``node_base[-1]`` on, joining a large call: see
    # :func:`_collective_edges`), the start node of the member it stands for
    hub_source: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def point(self, v: int) -> int:
        """The node ``v`` stands for: itself, or a hub's member's start."""
        n_rank = int(self.node_base[-1])
        return int(self.hub_source[v - n_rank]) if v >= n_rank else v


def join(ranks: list[RankGraph], infos: list[KernelInfo], offsets: dict[int, int]
         ) -> JobGraph:
    """The job graph of ``ranks`` (see the module doc)."""
    joiner = Joiner()
    for rg, info in zip(ranks, infos):
        joiner.add(rg, info)
    return joiner.finish(offsets)


@dataclass
class JoinPiece:
    """What the job graph takes of one rank's graph, made where the rank's tables were
    read (:func:`join_piece`; a worker): its nodes (times on its own clock, event rows
    as int32, whether a start), its edges each once (in the order first added, with the
    kind and event last given, as :class:`~.graph.Graph` keeps them; node ids of
    the rank as int32) with their own time, category, comm group and kernel name (ids
    into ``names``, this rank's own list), the nodes queued behind earlier work, and per
    communication kernel its GPU-table row, start and end node, group, name id and
    whether it is point-to-point. Compact (int32 ids, no per-node rank): a job's
    thousands of pieces are held at once before the join. ``rank`` is the rank's graph,
    released (:meth:`RankGraph.release`)."""

    rank: RankGraph
    node_ts: np.ndarray
    node_event: np.ndarray    # int32
    node_start: np.ndarray
    src: np.ndarray           # int32
    dst: np.ndarray           # int32
    kind: np.ndarray          # int8
    attr: np.ndarray          # int32, -1 none
    own: np.ndarray
    cat: np.ndarray           # int8
    grp: np.ndarray           # int8
    nm: np.ndarray            # int32 into ``names``; -1 none
    names: list[str]
    queued: np.ndarray
    member_rows: np.ndarray
    member_start: np.ndarray
    member_end: np.ndarray
    member_group: np.ndarray
    member_name: np.ndarray   # into ``names``
    p2p: np.ndarray

    @property
    def n_nodes(self) -> int:
        return self.node_ts.size


def join_piece(rg: RankGraph, info: KernelInfo) -> JoinPiece:
    """The :class:`JoinPiece` of a rank's graph (``info``: its GPU table's kernels; their
    calls are not read). The piece shares ``rg``'s arrays: release ``rg``
    (:meth:`RankGraph.release`) where only the job's graph is to hold them."""
    g, ev = rg.graph, rg.events
    names: dict[str, int] = {}
    own, cat, grp, nm = _own_times(rg, info, names)
    x_src, x_dst, x_kind, x_own = _device_order(rg)
    queued = _queued_behind_earlier(rg)
    rows = np.flatnonzero((rg.start_node >= 0) & (ev.cls == ACTIVITY))
    trow = ev.table_row[rows]
    comm = info.kind[trow] == 1
    rows, trow = rows[comm], trow[comm]
    ids = np.array([names.setdefault(info.name[t], len(names)) for t in trow.tolist()],
                   np.int32)
    # the rank's graph's edges, then the device-order edges: each edge once (a
    # device-order edge the graph has takes its place), as the job's graph would keep it
    src, dst = np.r_[g.src, x_src], np.r_[g.dst, x_dst]
    keep, last = dedup(src, dst, g.n_nodes)
    x_cat = np.select([x_kind == LAUNCH, x_kind == SYNC], [LAUNCH_CAT, WAIT], KK_CAT)
    return JoinPiece(
        rg, g.node_ts, g.node_event.astype(np.int32), g.node_start,
        src[keep].astype(np.int32), dst[keep].astype(np.int32),
        np.r_[g.kind, x_kind.astype(np.int8)][last],
        np.r_[g.attr, np.full(x_src.size, -1, np.int64)][last].astype(np.int32),
        np.r_[own, x_own][last].astype(np.int64), np.r_[cat, x_cat][last].astype(np.int8),
        np.r_[grp, np.full(x_src.size, -1)][last].astype(np.int8),
        np.r_[nm, np.full(x_src.size, -1)][last].astype(np.int32),
        sorted(names, key=lambda n: names[n]), queued, trow, rg.start_node[rows],
        rg.end_node[rows], info.group[trow], ids, info.p2p[trow])


class Joiner:
    """The job graph built one rank at a time: :meth:`add` takes what the job's graph
    needs of a rank's graph (whose arrays may then be released, :meth:`RankGraph.
    release`), :meth:`finish` joins the collectives and moves the ranks onto one clock.
    The pieces are kept as they come (compact) and laid out once, in :meth:`finish`."""

    def __init__(self) -> None:
        self.ranks: list[RankGraph] = []
        self.pieces: list[JoinPiece] = []
        self.base = [0]
        self.names: dict[str, int] = {}
        self.luts: list[np.ndarray] = []  # per piece: its name ids in the job's list
        # per communication kernel (and call it is a member of): call, start node, end
        # node, group, name id, unique key, point-to-point
        self.members: dict[str, list[np.ndarray]] = {k: [] for k in (
            "call", "start", "end", "group", "name", "key", "p2p")}
        self.p2p_seen = 0

    def add(self, rg: RankGraph, info: KernelInfo) -> None:
        """One rank's graph (``info``: its GPU table's kernels, their calls)."""
        self.add_piece(join_piece(rg, info), info.call, info.more_calls)

    def add_piece(self, piece: JoinPiece, call: np.ndarray,
                  more_calls: tuple[np.ndarray, np.ndarray]) -> None:
        """One rank's :class:`JoinPiece` (made where its tables were read), ``call``:
        the call id of each row of its GPU table (-1 none) and ``more_calls`` the
        further (row, call) pairs of rows that carry several transfers
        (:func:`call_rows`)."""
        k = len(self.ranks)
        self.ranks.append(piece.rank)
        self.pieces.append(piece)
        b = self.base[-1]
        self.base.append(b + piece.n_nodes)
        # the piece's kernel names numbered in the job's list, in the piece's order
        lut = np.array([self.names.setdefault(n, len(self.names)) for n in piece.names]
                       + [-1], np.int32)
        self.luts.append(lut)
        trow = piece.member_rows
        self.p2p_seen += int(piece.p2p.sum())
        # a row of several transfers is a member of each of their calls
        more_row, more_call = more_calls
        where = {t: i for i, t in enumerate(trow.tolist())}
        found = [j for j, r in enumerate(more_row.tolist()) if r in where]
        each = np.array(list(range(trow.size)) + [where[int(more_row[j])] for j in found],
                        np.int64)
        for key, values in (("call", np.concatenate([call[trow], more_call[found]])),
                            ("start", piece.member_start[each] + b),
                            ("end", piece.member_end[each] + b),
                            ("group", piece.member_group[each]),
                            ("name", lut[piece.member_name][each].astype(np.int64)),
                            ("key", trow[each] + (k << 40)), ("p2p", piece.p2p[each])):
            self.members[key].append(values)

    def _nodes(self, offsets: dict[int, int], room: int) -> tuple[np.ndarray, ...]:
        """Every piece's nodes in one set of arrays (node ids of the job, the ranks'
        times on the common clock) with ``room`` more nodes left unset at the end (the
        hubs): ts, event, start, rank, and the queued nodes."""
        n = self.base[-1] + room
        ts = np.empty(n, np.int64)
        event = np.empty(n, np.int32)
        start = np.empty(n, bool)
        rank = np.empty(n, np.int32)
        queued = []
        for b, p in zip(self.base, self.pieces):
            r = int(p.rank.events.rank)
            v = slice(b, b + p.n_nodes)
            np.subtract(p.node_ts, offsets.get(r, 0), out=ts[v])
            event[v], start[v], rank[v] = p.node_event, p.node_start, r
            queued.append(p.queued + b)
        return ts, event, start, rank, np.concatenate(queued + [np.zeros(0, np.int64)])

    def _edges(self, room: int) -> tuple[np.ndarray, ...]:
        """Every piece's edges in one set of arrays (node ids of the job) with ``room``
        more rows left unset at the end: src, dst, kind, attr, own, category, comm
        group, name id. Each piece is let go once copied, and every
        :data:`TRIM_EVERY` pieces the heap they held goes back to the system: the
        pieces and the job's arrays are not all held at once."""
        n = sum(p.src.size for p in self.pieces) + room
        src, dst, own = (np.empty(n, np.int64) for _ in range(3))
        kind, cat, grp = (np.empty(n, np.int8) for _ in range(3))
        attr, nm = np.empty(n, np.int32), np.empty(n, np.int32)
        e = 0
        self.pieces.reverse()  # let go from the front: each piece once copied
        for k, (b, lut) in enumerate(zip(self.base, self.luts)):
            p = self.pieces.pop()
            x = slice(e, e + p.src.size)
            np.add(p.src, b, out=src[x])
            np.add(p.dst, b, out=dst[x])
            kind[x], attr[x], own[x] = p.kind, p.attr, p.own
            cat[x], grp[x], nm[x] = p.cat, p.grp, lut[p.nm]
            e += p.src.size
            del p
            if k % TRIM_EVERY == TRIM_EVERY - 1:
                release_free_memory()
        self.luts = []
        return src, dst, kind, attr, own, cat, grp, nm

    def finish(self, offsets: dict[int, int]) -> JobGraph:
        """The job graph of the ranks added, ``offsets`` (ns per rank) putting them on
        one clock."""
        notes: list[str] = []
        ranks = self.ranks
        members = {k: np.concatenate(v) if v else np.zeros(0, bool if k == "p2p"
                                                            else np.int64)
                   for k, v in self.members.items()}
        self.members = {}
        n_rank = self.base[-1]
        calls = _calls_of(members)  # room for a hub per call that may have one
        del members
        ts, event, start, rank, queued = self._nodes(
            offsets, int((calls[2] >= HUB_MIN_MEMBERS).sum()))
        c_src, c_dst, c_own, c_grp, c_nm, p2p_joined, hub_ts, hub_source = \
            _collective_edges(calls, ts, n_rank)
        del calls
        # each hub the member it stands for (the call's last to start), at its time; the
        # room of calls left pairwise unused
        n = n_rank + hub_ts.size
        ts, event, start, rank = ts[:n], event[:n], start[:n], rank[:n]
        hubs = slice(n_rank, n)
        ts[hubs], event[hubs] = hub_ts, event[hub_source]
        start[hubs], rank[hubs] = True, rank[hub_source]
        # the collective edges each once; one the ranks' graphs have (a kernel that is
        # two members of one call) takes that edge's place, as a second add does
        keep, last = dedup(c_src, c_dst, ts.size)
        c_own, c_grp, c_nm = c_own[last], c_grp[last], c_nm[last]
        c_src, c_dst = c_src[keep], c_dst[keep]
        n_edges = sum(p.src.size for p in self.pieces)
        src, dst, kind, attr, own, cat, grp, nm = self._edges(c_src.size)
        again = _edges_of(src[:n_edges], dst[:n_edges], c_src, c_dst, ts.size, self.base)
        had = again >= 0
        at, new = again[had], np.flatnonzero(~had)
        c_cat = (COMM0 + np.maximum(c_grp, 0)).astype(np.int8)
        for x, y in ((at, had), (slice(n_edges, n_edges + new.size), new)):
            src[x], dst[x] = c_src[y], c_dst[y]
            kind[x], attr[x] = COLLECTIVE, -1
            own[x], cat[x], grp[x], nm[x] = c_own[y], c_cat[y], c_grp[y], c_nm[y]
        m = n_edges + new.size  # the room of collective edges the ranks had: unused
        if max(m, n) >= MAX_IDS:  # int32 ids (the timing's binding edges, its order)
            raise TraceVizError(f"the job's graph has {n:,} points and {m:,} edges: more "
                                f"than {MAX_IDS - 1:,}; analyse fewer ranks or a shorter "
                                "window (--annotation / --iteration)")
        graph = Graph(ts, event, start, rank, src[:m], dst[:m], kind[:m], None, attr[:m])
        own, cat, grp, nm = own[:m], cat[:m], grp[:m], nm[:m]
        if self.p2p_seen and len(ranks) > 1:
            notes.append(f"pipeline sends / receives: {p2p_joined} of {self.p2p_seen} "
                         "joined with their peer's kernel")
        if p2p_joined < self.p2p_seen and len(ranks) > 1:
            notes.append(f"WARNING: {self.p2p_seen - p2p_joined} send / receive kernel(s) "
                         "could not be paired with their peer's (the peer is not traced "
                         "in this window, or the kernel states none: see the notes on "
                         "sends / receives): the path and what-ifs do not follow them "
                         "across ranks")
        names = self.names
        jg = JobGraph(graph, ranks, own, cat, np.array(self.base, np.int64), offsets, notes,
                      grp, nm, sorted(names, key=lambda g: names[g]),
                      np.zeros(ts.size, bool), hub_source)
        jg.queued[queued] = True  # type: ignore[index]
        _transfer_spans(jg.own, graph.kind, graph.dst, graph.n_nodes)
        return _consistent(jg)


def _edges_of(src: np.ndarray, dst: np.ndarray, c_src: np.ndarray, c_dst: np.ndarray,
              n: int, base: list[int]) -> np.ndarray:
    """Per edge (``c_src``, ``c_dst``), the id of the same edge among (``src``, ``dst``),
    -1 none. The edges of ``src`` / ``dst`` run within a rank (``base``: each rank's
    first node id): only an edge within one rank is looked for, among the edges leaving
    its source."""
    out = np.full(c_src.size, -1, np.int64)
    b = np.asarray(base, np.int64)
    inside = np.flatnonzero(np.searchsorted(b, c_src, side="right")
                            == np.searchsorted(b, c_dst, side="right"))
    if inside.size == 0:
        return out
    sources = np.zeros(n, bool)  # a mask, not np.isin: no sort of a job's edges
    sources[c_src[inside]] = True
    cand = np.flatnonzero(sources[src])
    if cand.size == 0:
        return out
    key = src[cand] * np.int64(n) + dst[cand]  # distinct: each rank's edges are
    order = np.argsort(key)
    want = c_src[inside] * np.int64(n) + c_dst[inside]
    pos = np.minimum(np.searchsorted(key[order], want), key.size - 1)
    found = key[order][pos] == want
    out[inside[found]] = cand[order[pos[found]]]
    return out


CONTRADICTION_NS = 1_000  # an edge arriving this much after its point: out of order


def _consistent(jg: JobGraph) -> JobGraph:
    """``jg`` without the edges its measured times contradict: an edge whose source plus
    own time comes more than :data:`CONTRADICTION_NS` after its destination's measured
    time (CPU spans the profiler recorded overlapping, not nested, make the call-stack
    walk chain a later point before an earlier one). Kept, re-timing would move the
    earlier point with the later one; without it the point keeps its other
    predecessors, or its measured time."""
    g = jg.graph
    keep = _not_contradicted(g.node_ts, g.src, g.dst, jg.own, CONTRADICTION_NS)
    if not keep.all():
        jg.notes.append(f"{int((~keep).sum())} edge(s) the trace's times contradict (spans "
                        "recorded overlapping, not nested) left out of the graph")
        _keep(jg, keep)
    keep = acyclic(jg.graph)
    if not keep.all():
        g = jg.graph

        def point(v: int) -> str:
            v = jg.point(v)
            k = int(np.searchsorted(jg.node_base, v, side="right") - 1)
            return point_text(jg.ranks[k], v - int(jg.node_base[k]))

        removed = np.flatnonzero(~keep)
        jg.notes.append(cycle_note([(point(int(g.src[e])), point(int(g.dst[e])))
                                    for e in removed[:2].tolist()], int(removed.size)))
        _keep(jg, keep)
    return jg


@njit(cache=True)
def _not_contradicted(ts, src, dst, own, slack):
    """Per edge: its source's time plus its own time is at most ``slack`` ns after its
    destination's time."""
    keep = np.empty(src.size, np.bool_)
    for e in range(src.size):
        keep[e] = ts[src[e]] + own[e] <= ts[dst[e]] + slack
    return keep


def _keep(jg: JobGraph, keep: np.ndarray) -> None:
    """Keep only the edges where ``keep`` (their own times and labels too)."""
    jg.graph = jg.graph.subset(keep)
    jg.own, jg.category = jg.own[keep], jg.category[keep]
    assert jg.edge_comm_group is not None and jg.edge_name is not None  # made with the graph
    jg.edge_comm_group = jg.edge_comm_group[keep]
    jg.edge_name = jg.edge_name[keep]


INFERRED_WAIT_NS = 20_000  # another stream's activity ending this close before: waited on


def _device_order(rg: RankGraph):
    """Edges HTA leaves out that the job's timing needs, (src, dst, kind, own) in node
    ids of the rank graph:

    - every activity's launch edge, own time the launch delay, at most the launch
      call's duration when the activity was queued behind the previous one on its
      stream (launched before that one ended) or started late for another reason;
    - its stream-order edge from the previous activity on its stream, own time the gap
      when it was queued and started within 20 µs of the previous one's end, else 0;
    - an *inferred* cross-stream wait (a ``sync`` edge, own time the gap) when its start
      is explained by neither (queued but started > 20 µs after the previous activity
      ended, or its stream was idle and it was launched more than its launch call's
      duration + 20 µs earlier) and an activity on another stream of the device ended
      at most 20 µs before it started: the event wait the trace does not record. What
      stays unexplained is wait.
    """
    ev = rg.events
    rows = np.flatnonzero((rg.start_node >= 0) & (ev.cls == ACTIVITY) & (ev.link >= 0))
    rows = rows[np.lexsort((ev.ts[rows], ev.stream[rows]))]
    launch = ev.link[rows]
    has_launch = rg.start_node[launch] >= 0
    same = np.zeros(rows.size, bool)  # the previous activity is on the same stream
    same[1:] = ev.stream[rows][1:] == ev.stream[rows][:-1]
    prev = np.r_[-1, rows[:-1]][:rows.size]
    prev_end = np.where(same, ev.end[np.maximum(prev, 0)], np.iinfo(np.int64).min)
    queued = same & (ev.ts[launch] < prev_end)
    delay = np.maximum(ev.ts[rows] - ev.ts[launch], 0)
    gap = np.maximum(ev.ts[rows] - prev_end, 0)
    late = np.where(queued, gap > INFERRED_WAIT_NS, delay > ev.dur[launch] + INFERRED_WAIT_NS)
    # the other-stream activity that ended last before each late start
    by_end = rows[np.argsort(ev.end[rows], kind="stable")]
    ends = ev.end[by_end]
    at = np.searchsorted(ends, ev.ts[rows], side="right") - 1
    other = by_end[np.maximum(at, 0)]
    inferred = (late & (at >= 0) & (ev.stream[other] != ev.stream[rows])
                & (ev.pid[other] == ev.pid[rows])
                & (ev.ts[rows] - ev.end[other] <= INFERRED_WAIT_NS))
    src = np.concatenate([rg.start_node[launch[has_launch]], rg.end_node[prev[same]],
                          rg.end_node[other[inferred]]])
    dst = np.concatenate([rg.start_node[rows[has_launch]], rg.start_node[rows[same]],
                          rg.start_node[rows[inferred]]])
    kind = np.concatenate([np.full(int(has_launch.sum()), LAUNCH, np.int8),
                           np.full(int(same.sum()), KERNEL_KERNEL, np.int8),
                           np.full(int(inferred.sum()), SYNC, np.int8)])
    own = np.concatenate([np.where(queued | late, np.minimum(delay, ev.dur[launch]),
                                   delay)[has_launch],
                          np.where(queued & ~late, gap, 0)[same],
                          (ev.ts[rows] - ev.end[other])[inferred]])
    s_src, s_dst = _inferred_syncs(rg)
    h_src, h_dst = _handoffs(rg)
    s_src, s_dst = np.r_[s_src, h_src], np.r_[s_dst, h_dst]
    src = np.concatenate([src, s_src])
    dst = np.concatenate([dst, s_dst])
    kind = np.concatenate([kind, np.full(s_src.size, SYNC, np.int8)])
    own = np.concatenate([own, np.zeros(s_src.size, np.int64)])
    ok = (src >= 0) & (dst >= 0)
    return src[ok], dst[ok], kind[ok], own[ok]


def _queued_behind_earlier(rg: RankGraph) -> np.ndarray:
    """Node ids of the activity starts in the window that follow, on their stream and
    within :data:`INFERRED_WAIT_NS`, an activity the window does not hold (launched
    before it): the device was still busy with earlier work (the previous step's, when
    the GPU runs behind the CPU), which is what they waited for."""
    ev = rg.events
    acts = np.flatnonzero((ev.cls == ACTIVITY) & (ev.stream >= 0))
    acts = acts[np.lexsort((ev.ts[acts], ev.stream[acts], ev.pid[acts]))]
    if acts.size < 2:
        return np.zeros(0, np.int64)
    cur, prev = acts[1:], acts[:-1]
    same = (ev.stream[cur] == ev.stream[prev]) & (ev.pid[cur] == ev.pid[prev])
    hit = (same & (rg.start_node[cur] >= 0) & (rg.start_node[prev] < 0)
           & (ev.ts[cur] - ev.end[prev] <= INFERRED_WAIT_NS) & (ev.end[prev] > ev.ts[prev]))
    return rg.start_node[cur[hit]]


def _handoffs(rg: RankGraph) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) node ids of *hand-off* edges: a CPU thread whose work starts inside the
    window (PyTorch's autograd engine thread when the backward begins, a data-loader or
    a communication thread) is taken to start from the point just before on another
    CPU thread of its process, so that the path runs on through what led to it instead
    of stopping there."""
    ev = rg.events
    thread = R.threads(ev, R.clip(ev, rg.window))
    rows = np.flatnonzero((thread >= 0) & (rg.start_node >= 0))
    if rows.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    nodes = np.r_[rg.start_node[rows], rg.end_node[rows]]
    owner = np.r_[thread[rows], thread[rows]]
    pid = np.r_[ev.pid[rows], ev.pid[rows]]
    ok = nodes >= 0
    nodes, owner, pid = nodes[ok], owner[ok], pid[ok]
    order = np.argsort(nodes, kind="stable")
    nodes, owner, pid = nodes[order], owner[order], pid[order]
    src, dst = [], []
    for t in np.unique(owner).tolist():
        first = int(np.flatnonzero(owner == t)[0])
        k = first - 1
        while k >= 0 and pid[k] != pid[first]:
            k -= 1
        if k >= 0 and rg.graph.node_ts[nodes[k]] < rg.graph.node_ts[nodes[first]]:
            src.append(int(nodes[k]))
            dst.append(int(nodes[first]))
    return np.asarray(src, np.int64), np.asarray(dst, np.int64)


SYNC_RETURN_NS = 50_000  # GPU work ending up to this much after a synchronize returns
# copies that block the host when their destination is pageable memory
COPY_CALLS = ("cudaMemcpyAsync", "hipMemcpyAsync", "hipMemcpyWithStream", "cudaMemcpy",
              "hipMemcpy")


def _inferred_syncs(rg: RankGraph) -> tuple[np.ndarray, np.ndarray]:
    """The GPU work each synchronising call waited for, which traces profiled without
    ``cuda_sync`` events do not say (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
    ``cudaEventSynchronize``, a blocking ``cudaMemcpy``; ``.item()`` is a copy and a
    stream synchronize): the device activity launched before the call began that ends
    last before it returned (within :data:`SYNC_RETURN_NS`) on the rank. An edge from
    that activity's end to the call's end (own time 0): re-timed, the call returns when
    that work ends, and the host's work after it moves with it. A copy call that returned
    only after its own copy on the device ended (a copy to pageable memory blocks the
    host) gets the edge from that copy. Returns (src, dst) node ids of the rank graph."""
    ev = rg.events
    calls = np.flatnonzero(ev.is_named(*SYNC_CALLS) & (rg.end_node >= 0) & ~ev.gpu)
    acts = np.flatnonzero((rg.end_node >= 0) & (ev.cls == ACTIVITY) & (ev.link >= 0))
    if not calls.size or not acts.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    acts = acts[np.argsort(ev.end[acts], kind="stable")]
    ends = ev.end[acts]
    launched = ev.ts[ev.link[acts]]
    src, dst = [], []
    for c in calls.tolist():
        k = int(np.searchsorted(ends, ev.end[c] + SYNC_RETURN_NS, side="right")) - 1
        while k >= 0 and launched[k] > ev.ts[c]:  # launched meanwhile: not waited for
            k -= 1
        if k >= 0:
            src.append(rg.end_node[acts[k]])
            dst.append(rg.end_node[c])
    # a copy call (cudaMemcpyAsync to pageable memory, .to("cpu")) that returned only
    # after its own copy ended waited for it, and the copy for the work before it
    copies = np.flatnonzero(ev.is_named(*COPY_CALLS) & (rg.end_node >= 0) & ~ev.gpu
                            & (ev.link >= 0))
    mine = ev.link[copies]
    blocked = (rg.end_node[mine] >= 0) & (ev.end[mine] <= ev.end[copies]) & \
        (ev.end[mine] > ev.ts[copies])
    src += rg.end_node[mine[blocked]].tolist()
    dst += rg.end_node[copies[blocked]].tolist()
    return np.asarray(src, np.int64), np.asarray(dst, np.int64)


def _own_times(rg: RankGraph, info: KernelInfo, names: dict[str, int]):
    """Own time, category, comm group and kernel name id of each edge of a rank graph,
    in the order the edges were added (see the module doc)."""
    g, ev = rg.graph, rg.events
    measured = g.node_ts[g.dst] - g.node_ts[g.src]
    a = np.maximum(g.attr, 0)
    is_act = (g.attr >= 0) & (ev.cls[a] == ACTIVITY)
    trow = np.where(is_act, ev.table_row[a], -1)  # -1: the padding row below
    kind = np.where(is_act, np.r_[info.kind, -1][trow], -1)
    grp = np.where(is_act & (kind == 1), np.r_[info.group, -1][trow], -1)
    blocking = ev.is_named(*BLOCKING_CALLS, *SYNC_CALLS)[a] & (g.attr >= 0)
    own = np.where((g.kind == SYNC) | ((g.kind == OPERATOR) & blocking), 0,
                   np.maximum(measured, 0))
    cat = np.full(g.src.size, CPU, np.int64)
    cat[(g.kind == OPERATOR) & is_act & (kind == 0)] = COMPUTE
    cat[(g.kind == OPERATOR) & is_act & (kind == 2)] = MEMORY
    comm = (g.kind == OPERATOR) & is_act & (kind == 1)
    cat[comm] = COMM0 + np.maximum(grp[comm], 0)
    cat[(g.kind == OPERATOR) & is_act & (kind < 0)] = COMPUTE
    cat[g.kind == LAUNCH] = LAUNCH_CAT
    cat[g.kind == KERNEL_KERNEL] = KK_CAT
    cat[g.kind == SYNC] = WAIT
    ids = np.array([names.setdefault(t, len(names)) for t in info.name] + [-1], np.int64)
    nm = np.where(is_act, ids[trow], -1)
    return own, cat, grp, nm


HUB_MIN_MEMBERS = 9  # a call of this many members or more is joined through one point


def _calls_of(members: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray,
                                                        np.ndarray]:
    """The memberships of a call (``call`` >= 0) ordered by call, members in the order
    given; each call's first membership and size."""
    keep = members["call"] >= 0
    m = {k: v[keep] for k, v in members.items()}
    order = np.argsort(m["call"], kind="stable")
    m = {k: v[order] for k, v in m.items()}
    _, first, size = np.unique(m["call"], return_index=True, return_counts=True)
    return m, first, size


def _collective_edges(calls: tuple[dict[str, np.ndarray], np.ndarray, np.ndarray],
                      ts: np.ndarray, n_rank: int):
    """Every member of a call joined to every other: re-timed, a member ends its
    transfer (its end - the last member's start, measured) after the latest re-timed
    arrival, whoever arrives last. A call of fewer than :data:`HUB_MIN_MEMBERS` members
    has an edge from each member's kernel start to each other member's kernel end, its
    own time that member's transfer (n (n - 1) edges). A larger one (a data-parallel
    group's: thousands of members, millions of such edges) is joined through a point of
    its own, its *hub* (node ``n_rank`` + k for the k-th: its time the last member's
    start): an edge from each member's start to the hub (own time 0) and from the hub to
    each member's end (that member's transfer): 2 n edges, the same times. The hub
    stands for the member whose start is the call's last (the first such, as the
    pairwise edges would bind it): its rank, event and time. Not where a member ended
    before the last one started (clocks apart): that call keeps its pairwise edges.

    Returns the edges, own times, comm groups, name ids (-1 into a hub), how many
    point-to-point kernels were joined, and per hub its time and the start node it
    stands for (``calls``: :func:`_calls_of` of the memberships, arrays call, start
    node, end node, group, name id, the
    kernel's unique key, point-to-point, one entry per membership; a kernel of several
    transfers is a member of each of their calls; ``ts``: node times, the ranks' nodes
    below ``n_rank``)."""
    m, first, size = calls
    ok = size >= 2
    joined = np.unique(m["key"][(np.repeat(ok, size)) & m["p2p"]]).size
    starts = ts[m["start"]]
    last = np.maximum.reduceat(starts, first) if first.size else np.zeros(0, np.int64)
    member_call = np.repeat(np.arange(size.size), size)
    transfer = np.maximum(0, ts[m["end"]] - last[member_call])
    # a large call is joined through a hub; not where a member ended more than
    # CONTRADICTION_NS before the last one started (clocks apart): the pairwise edges
    # from the members that started before it ended hold there, the hub's would not
    soonest = (np.minimum.reduceat(ts[m["end"]], first) if first.size
               else np.zeros(0, np.int64))
    large = (size >= HUB_MIN_MEMBERS) & (soonest >= last - CONTRADICTION_NS)
    # per member v of a small joined call: an edge from each other member u of its call
    pairwise = ok & ~large
    v = np.flatnonzero(pairwise[member_call])
    n_of_v = size[member_call[v]]
    dst_v = np.repeat(v, n_of_v)                               # v, once per member u
    start_of = first[member_call[dst_v]]                       # its call's first member
    pos = np.arange(dst_v.size) - np.repeat(np.cumsum(n_of_v) - n_of_v, n_of_v)
    u = start_of + pos
    other = u != dst_v
    u, dst_v = u[other], dst_v[other]
    # a large call: every member into its hub, the hub out to every member
    hubbed = np.flatnonzero(large)
    hub_of = np.full(size.size, -1, np.int64)
    hub_of[hubbed] = n_rank + np.arange(hubbed.size)
    w = np.flatnonzero(hub_of[member_call] >= 0)
    hub = hub_of[member_call[w]]
    latest = np.flatnonzero((starts == last[member_call]) & (hub_of[member_call] >= 0))
    _, at = np.unique(member_call[latest], return_index=True)  # each hub's first latest
    src = np.concatenate([m["start"][u], m["start"][w], hub]).astype(np.int64)
    dst = np.concatenate([m["end"][dst_v], hub, m["end"][w]]).astype(np.int64)
    own = np.concatenate([transfer[dst_v], np.zeros(w.size, np.int64), transfer[w]])
    grp = np.concatenate([m["group"][dst_v], m["group"][w], m["group"][w]])
    name = np.concatenate([m["name"][dst_v], np.full(w.size, -1), m["name"][w]])
    return (src, dst, own.astype(np.int64), grp.astype(np.int64), name.astype(np.int64),
            int(joined), last[hubbed], m["start"][latest[at]].astype(np.int64))


@njit(cache=True)
def _transfer_spans(own, kind, dst, n):
    """Each joined collective kernel's own span set to the call's transfer time (so that
    the last member, not a waiting one, binds): a kernel span (``kind`` OPERATOR) whose
    end has a collective edge takes that edge's own time (the last such edge's where
    several end there). ``own`` changed in place (a job's millions of edges: no
    copies)."""
    transfer = np.full(n, -1, np.int64)
    for e in range(kind.size):
        if kind[e] == COLLECTIVE:
            transfer[dst[e]] = own[e]
    for e in range(kind.size):
        if kind[e] == OPERATOR and transfer[dst[e]] >= 0:
            own[e] = transfer[dst[e]]


@dataclass
class Timing:
    """Times of every node (ns, common clock), each node's binding edge (-1: none) and
    wait (ns), for one set of own times. Measured (:func:`measure`), ``ts`` is the
    graph's own ``node_ts`` array: read, never written."""

    ts: np.ndarray
    binding: np.ndarray
    wait: np.ndarray   # measured time minus the binding edge's arrival
    order: np.ndarray  # topological


def measure(jg: JobGraph, own: np.ndarray) -> Timing:
    """Binding edges and waits of the measured times."""
    g = jg.graph
    order, ok = topo(g.n_nodes, g.src, g.dst)
    if not ok:
        raise UsageError("the critical-path graph has a cycle (clock offsets or a trace's "
                         "nesting contradict each other); try --no-clock-sync or one rank")
    _, binding, arrival = _sweep(order, *g.into, g.src, g.node_ts, own,
                                 np.zeros(g.n_nodes, np.int64), False)
    # negative where the trace's times contradict an edge (a child ending after its
    # parent, a lock chain out of order): kept, so that re-timing reproduces the trace
    wait = np.where(binding >= 0, g.node_ts - arrival, 0)
    return Timing(g.node_ts, binding, wait, order)  # the graph's times, not a copy


def retime(jg: JobGraph, base: Timing, own: np.ndarray) -> Timing:
    """Forward re-timing with new own times (see the module doc)."""
    g = jg.graph
    ts, binding, _ = _sweep(base.order, *g.into, g.src, g.node_ts, own, base.wait, True)
    return Timing(ts, binding, base.wait, base.order)


def iteration_span(jg: JobGraph, t: Timing) -> tuple[int, int]:
    """(first, last) time of the points joined to the graph (an edge in or out: points
    no edge explains keep their measured time and say nothing of a re-timed job); the
    iteration's span is their difference, measured and re-timed alike."""
    first, last, _ = _extremes(t.ts, jg.graph.joined)
    return int(first), int(last)


def path(jg: JobGraph, t: Timing) -> np.ndarray:
    """Edge ids of the critical path, first to last: back from the latest point along
    binding edges."""
    g = jg.graph
    v = int(_extremes(t.ts, g.joined)[2])
    if v < 0:
        return np.empty(0, np.int64)
    n_rank = jg.node_base[-1]
    out = []
    while t.binding[v] >= 0:
        e = t.binding[v]
        out.append(e)
        v = g.src[e]
        if v >= n_rank:  # a hub: the edge out of it runs from the member it binds to
            v = g.src[t.binding[v]]
    return np.array(out[::-1], np.int64)


@njit(cache=True)
def _extremes(ts, joined):
    """(earliest time, latest time, the first node at the latest) of the nodes where
    ``joined``; (0, 0, -1) where none is. No copy of a job's millions of times."""
    first, last, at = np.int64(0), np.int64(0), -1
    for v in range(ts.size):
        if not joined[v]:
            continue
        if at < 0:
            first, last, at = ts[v], ts[v], v
        elif ts[v] > last:
            last, at = ts[v], v
        elif ts[v] < first:
            first = ts[v]
    return first, last, at


def path_times(jg: JobGraph, t: Timing, edges: np.ndarray, own: np.ndarray,
               start: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(own part, wait part) in ns of each path edge, both >= 0; they add up to the
    path's span. An edge the trace's times run back along (by at most
    :data:`CONTRADICTION_NS`) takes no time: each edge spans from the latest point of
    the path so far to its end (or none). From ``start`` on only: the time of an edge
    before it is cut, its wait first (an edge spans its wait, then its own time)."""
    g = jg.graph
    if edges.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    reach = np.maximum.accumulate(t.ts[np.r_[g.src[edges[0]], g.dst[edges]]])
    span = np.diff(reach)
    mine = np.minimum(np.maximum(own[edges], 0), span)
    if start is None:
        return mine, span - mine
    inside = np.diff(np.maximum(reach, start))  # each edge's time from ``start`` on
    wait = np.maximum(span - mine - (span - inside), 0)
    return inside - wait, wait


@njit(cache=True)
def _sweep(order, po, start, src, ts0, own, wait, retime):
    """In topological ``order``: each node's binding edge (latest predecessor time plus
    own time; -1 without predecessors) and that arrival; with ``retime`` the node's time
    becomes the arrival plus its ``wait`` (else the times stay ``ts0``). ``po`` /
    ``start``: the edges grouped by destination (``Graph.into``). Returns (times,
    binding edges, arrivals; re-timed, the arrivals are not kept: empty). The measured
    times are read, not copied (a job's millions of nodes)."""
    n = start.size - 1
    ts = ts0.copy() if retime else ts0
    arrival = ts0[:0].copy() if retime else ts0.copy()
    binding = np.full(n, -1, np.int32)  # edge ids: below MAX_IDS (Joiner.finish)
    for v in order:
        best = np.int64(-(2 ** 62))
        for k in range(start[v], start[v + 1]):
            e = po[k]
            a = ts[src[e]] + own[e]
            if a > best:
                best = a
                binding[v] = e
        if binding[v] >= 0:
            if retime:
                ts[v] = best + wait[v]
            else:
                arrival[v] = best
    return ts, binding, arrival


def slack(jg: JobGraph, t: Timing, own: np.ndarray) -> np.ndarray:
    """Per node, how much later (ns) it could be without making the iteration longer:
    its latest time (backwards from the iteration's end over own times and waits) minus
    its time; 0 on the critical path."""
    g = jg.graph
    return _slack(t.order, g.n_nodes, g.src, g.dst, t.ts, own, t.wait)


@njit(cache=True)
def _slack(order, n, src, dst, ts, own, wait):
    so, start = csr(n, src)
    end = ts.max() if n else 0
    late = np.full(n, end, np.int64)
    for i in range(order.size - 1, -1, -1):
        v = order[i]
        for k in range(start[v], start[v + 1]):
            e = so[k]
            cand = late[dst[e]] - wait[dst[e]] - own[e]
            if cand < late[v]:
                late[v] = cand
    return np.maximum(late - ts, 0)


def kernel_info(table, calls: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
                ) -> KernelInfo:
    """What the join needs of a rank's GPU activity table (see :class:`KernelInfo`);
    ``calls``: the call id of each row and the further (row, call) pairs
    (:func:`call_rows`; None: not joined)."""
    n = table.num_rows
    kind = index_in(table["kind"], KINDS) if "kind" in table.column_names \
        else np.full(n, -1, np.int64)
    group = index_in(table["comm_group"], GROUPS) if "comm_group" in table.column_names \
        else np.full(n, -1, np.int64)
    coll = index_in(table["collective"], COLLECTIVES) if "collective" in table.column_names \
        else np.full(n, -1, np.int64)
    # a kernel launched before the trace began has no launch in it: no peer can be known
    launched = (np.asarray(pc.fill_null(table["launch_ts"], -1)) >= 0
                if "launch_ts" in table.column_names else np.ones(n, bool))
    return KernelInfo(kind=np.asarray(kind, np.int64), group=np.asarray(group, np.int64),
                      name=row_texts(table, "name", "").tolist(),
                      call=np.full(n, -1, np.int64) if calls is None else calls[0],
                      p2p=(coll == COLLECTIVES.index("SendRecv")) & (kind == 1) & launched,
                      **({} if calls is None else {"more_calls": calls[1]}))


def call_rows(jc, rank: int, n_rows: int
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The call id (:mod:`..diagnose.waits`) of each row of ``rank``'s table in the
    matched job ``jc`` (-1 where none), and the (row, call) pairs of the further calls
    of rows that carry several transfers."""
    k = jc.index_of(rank)
    acts, rc = jc.acts[k], jc.comms[k]
    out = np.full(n_rows, -1, np.int64)
    row = np.arange(n_rows)[acts.rows][rc.pos]
    out[row] = rc.call
    more = (rc.op_call >= 0) & (rc.op_call != rc.call[rc.op_kernel])
    return out, (row[rc.op_kernel[more]], rc.op_call[more])
