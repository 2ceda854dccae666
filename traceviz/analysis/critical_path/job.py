"""The job's critical path: every rank's graph joined through its collectives, on one
clock, with what-if re-timing.

**Joining ranks.** Each rank's graph (:mod:`.rank_graph`, exact ns) is moved onto the
common clock (``ts - offset``, offsets from the collectives' ends, :mod:`..clocks`). The
members of one collective call (same process group and ``Seq``, else the same position
in the group's calls) are joined: the call ends on every member once the last member has
started and the data has moved, so an edge runs from the last member's kernel start to
every member's kernel end. A point-to-point kernel (pipeline send / receive) is joined
the same way to the kernel in the same position of the same peer pair on the peer (NCCL
runs the operations of one communicator in the same order on both sides); where the peer
cannot be told (groups of more than two ranks without ``Src Rank`` / ``Dst Rank``), it is
not joined, and the result says so.

**The path.** An edge's *own time* is what the work takes: an operator's or kernel's span,
a launch or kernel-kernel delay, a gap between top-level operators on a thread; 0 for a
blocking sync call (it only waits) and for sync edges; a collective's own time is its
*transfer*: the last member's kernel time (it waits for nobody). A point is reached
through the predecessor whose end plus own time is latest (its *binding* edge); the path
is followed back from the iteration's last point along binding edges. Its time on the
common clock is split per edge into the own time (compute, each comm group, memory,
CPU, launch, kernel-kernel) and *wait*: the rest, time the point was later than the work
before it explains (``wait: other rank`` on an edge from another rank). The parts add
up to the iteration's span.

**What-if.** The own time of chosen edges is multiplied by a factor and every point is
re-timed in topological order: its time is its latest predecessor's plus own time, plus
its measured wait (kept as is); points without predecessors keep their time. The new
iteration time is the span of the re-timed points and the new path follows the new
binding edges. With every factor 1 the re-timed job equals the measured one.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ...errors import UsageError
from ...table.arrays import index_in, ints, row_texts
from ...table.schema import COLLECTIVES, GROUPS, KINDS
from ..host_device import ACTIVITY, RankEvents
from .graph import COLLECTIVE, KERNEL_KERNEL, LAUNCH, OPERATOR, SYNC, EdgeList, Graph, csr, dedup
from .rank_graph import BLOCKING_CALLS, RankGraph

# path categories
CATEGORIES = ("compute", "memory", "cpu", "launch", "kernel_kernel", "wait",
              "wait: other rank") + tuple(f"comm: {g}" for g in GROUPS)
COMPUTE, MEMORY, CPU, LAUNCH_CAT, KK_CAT, WAIT, WAIT_RANK = range(7)
COMM0 = 7


@dataclass
class KernelInfo:
    """Per GPU-table row of one rank: what the job join needs (kind code, comm group
    code, process group, call number, peer)."""

    kind: np.ndarray        # 0 COMP, 1 COMM, 2 MEM (schema order), -1 unknown
    group: np.ndarray       # GROUPS index, -1
    pg: list[str]           # per row process group name ("" unknown)
    seq: np.ndarray         # -1 unknown
    p2p: np.ndarray         # bool
    peer: np.ndarray        # -1 unknown
    name: list[str]
    members: dict[int, list[int]] = field(default_factory=dict)  # P2P rows, peer unknown



@dataclass
class JobGraph:
    """The joined graph, per node its rank and common-clock time, and per edge its own
    time and category."""

    graph: Graph
    ranks: list[RankGraph]
    own: np.ndarray         # ns per edge
    category: np.ndarray    # CATEGORIES index per edge
    node_base: np.ndarray   # first node id of each rank
    offsets: dict[int, int]
    notes: list[str] = field(default_factory=list)
    edge_comm_group: np.ndarray | None = None   # GROUPS index per edge (-1)
    edge_name: np.ndarray | None = None         # kernel name id per edge (-1) ...
    names: list[str] = field(default_factory=list)  # ... into this list


def join(ranks: list[RankGraph], infos: list[KernelInfo], offsets: dict[int, int]
         ) -> JobGraph:
    """The job graph of ``ranks`` (see the module doc)."""
    notes: list[str] = []
    node_ts, node_event, node_start, node_rank = [], [], [], []
    base = np.zeros(len(ranks) + 1, np.int64)
    edges = EdgeList()
    own_parts, cat_parts, grp_parts, name_parts = [], [], [], []
    names: dict[str, int] = {}
    members = []  # (key, rank index, start node, end node, dur)
    unjoined = 0
    for k, (rg, info) in enumerate(zip(ranks, infos)):
        g, ev = rg.graph, rg.events
        b = base[k]
        off = offsets.get(ev.rank, 0)
        node_ts.append(g.node_ts - off)
        node_event.append(g.node_event)
        node_start.append(g.node_start)
        node_rank.append(g.node_rank)
        base[k + 1] = b + g.n_nodes
        own, cat, grp, nm = _own_times(rg, info, names)
        edges.add(g.src + b, g.dst + b, g.kind, g.weight, g.attr)
        own_parts.append(own)
        cat_parts.append(cat)
        grp_parts.append(grp)
        name_parts.append(nm)
        x_src, x_dst, x_kind, x_own = _device_order(rg)
        edges.add(x_src + b, x_dst + b, x_kind, 0, -1)
        own_parts.append(x_own)
        cat_parts.append(np.select([x_kind == LAUNCH, x_kind == SYNC], [LAUNCH_CAT, WAIT],
                                   KK_CAT))
        grp_parts.append(np.full(x_src.size, -1))
        name_parts.append(np.full(x_src.size, -1))
        rows = np.flatnonzero((rg.start_node >= 0) & (ev.cls == ACTIVITY))
        trow = ev.table_row[rows]
        comm = info.kind[trow] == 1
        rows, trow = rows[comm], trow[comm]
        keys, lost = _call_keys(ev.rank, info, trow, ev.ts[rows])
        unjoined += lost
        for r, key in zip(rows.tolist(), keys):
            if key is not None:
                t = ev.table_row[r]
                members.append((key, rg.start_node[r] + b, rg.end_node[r] + b,
                                int(info.group[t]), names.setdefault(info.name[t], len(names))))
    ts = np.concatenate(node_ts) if node_ts else np.empty(0, np.int64)
    src, dst, own_c, grp_c, nm_c = _collective_edges(members, ts)
    edges.add(src, dst, COLLECTIVE, 0, -1)
    graph = Graph.build(ts, np.concatenate(node_event), np.concatenate(node_start),
                        np.concatenate(node_rank), edges)
    # own time / category per deduplicated edge: rank edges keep theirs, in order
    own = np.concatenate(own_parts + [own_c])
    cat = np.concatenate(cat_parts + [COMM0 + np.maximum(grp_c, 0)])
    grp = np.concatenate(grp_parts + [grp_c])
    nm = np.concatenate(name_parts + [nm_c])
    raw = edges.arrays()
    _, last = dedup(raw[0], raw[1], ts.size)
    if unjoined:
        notes.append(f"{unjoined} point-to-point kernel(s) could not be paired with their "
                     "peer (no Src / Dst Rank in a group of more than two ranks): the path "
                     "does not follow them across ranks")
    jg = JobGraph(graph, ranks, own[last], cat[last], base, offsets, notes, grp[last],
                  nm[last], sorted(names, key=names.get))
    jg.own = _transfer_spans(jg)
    return jg


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
    same = np.r_[False, ev.stream[rows][1:] == ev.stream[rows][:-1]]
    prev = np.r_[-1, rows[:-1]]
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
    ok = (src >= 0) & (dst >= 0)
    return src[ok], dst[ok], kind[ok], own[ok]


def _own_times(rg: RankGraph, info: KernelInfo, names: dict[str, int]):
    """Own time, category, comm group and kernel name id of each edge of a rank graph,
    in the order the edges were added (see the module doc)."""
    g, ev = rg.graph, rg.events
    measured = g.node_ts[g.dst] - g.node_ts[g.src]
    a = np.maximum(g.attr, 0)
    is_act = (g.attr >= 0) & (ev.cls[a] == ACTIVITY)
    trow = np.where(is_act, ev.table_row[a], 0)
    kind = np.where(is_act, info.kind[trow], -1)
    grp = np.where(is_act & (kind == 1), info.group[trow], -1)
    blocking = ev.is_named(*BLOCKING_CALLS)[a] & (g.attr >= 0)
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


def _call_keys(rank: int, info: KernelInfo, trow: np.ndarray, ts: np.ndarray):
    """Join key per COMM kernel (None: not joined) and how many P2P kernels had no
    known peer. Collectives: (pg, Seq) else (pg, position in the group); P2P: (pg, peer
    pair, position among this pair's kernels)."""
    order = np.argsort(ts, kind="stable")
    keys: list = [None] * trow.size
    count: dict = {}
    lost = 0
    for i in order.tolist():
        r = trow[i]
        pg = info.pg[r]
        if not pg:
            continue
        if info.p2p[r]:
            peer = int(info.peer[r])
            if peer < 0:
                lost += 1
                continue
            pair = (min(rank, peer), max(rank, peer))
            n = count.get((pg, pair), 0)
            count[(pg, pair)] = n + 1
            keys[i] = ("p2p", pg, pair, n)
        elif info.seq[r] >= 0:
            keys[i] = ("c", pg, int(info.seq[r]))
        else:
            n = count.get(pg, 0)
            count[pg] = n + 1
            keys[i] = ("o", pg, n)
    return keys, lost


def _collective_edges(members, ts):
    """Edges from the last member's kernel start to every other member's kernel end, the
    transfer time of each call (own time of these edges), and their comm group."""
    by_key: dict = {}
    for key, s, e, grp, nm in members:
        by_key.setdefault(key, []).append((s, e, grp, nm))
    src, dst, own, grp_out, nm_out = [], [], [], [], []
    for ms in by_key.values():
        if len(ms) < 2:
            continue
        last = max(ms, key=lambda m: ts[m[0]])
        transfer = max(0, min(ts[m[1]] for m in ms) - ts[last[0]])
        for m in ms:
            if m is not last:
                src.append(last[0])
                dst.append(m[1])
                own.append(transfer)
                grp_out.append(m[2])
                nm_out.append(m[3])
    return tuple(np.asarray(x, np.int64) for x in (src, dst, own, grp_out, nm_out))


def _transfer_spans(jg: JobGraph) -> np.ndarray:
    """Own times with each joined collective kernel's own span set to the call's
    transfer time (so that the last member, not a waiting one, binds)."""
    g = jg.graph
    own = jg.own.copy()
    cross = g.kind == COLLECTIVE
    # kernel spans whose end has a collective edge: own = that edge's transfer
    ends = g.dst[cross]
    transfer = np.full(g.n_nodes, -1, np.int64)
    transfer[ends] = own[cross]
    span = (g.kind == OPERATOR) & (transfer[g.dst] >= 0)
    own[span] = transfer[g.dst[span]]
    return own


@dataclass
class Timing:
    """Times of every node (ns, common clock), each node's binding edge (-1: none) and
    wait (ns), for one set of own times."""

    ts: np.ndarray
    binding: np.ndarray
    wait: np.ndarray   # measured time minus the binding edge's arrival
    order: np.ndarray  # topological


def measure(jg: JobGraph, own: np.ndarray) -> Timing:
    """Binding edges and waits of the measured times."""
    g = jg.graph
    order, ok = _topo(g.n_nodes, g.src, g.dst)
    if not ok:
        raise UsageError("the critical-path graph has a cycle (clock offsets or a trace's "
                         "nesting contradict each other); try --no-clock-sync or one rank")
    _, binding, arrival = _sweep(order, g.n_nodes, g.src, g.dst, g.node_ts, own,
                                 np.zeros(g.n_nodes, np.int64), False)
    # negative where the trace's times contradict an edge (a child ending after its
    # parent, a lock chain out of order): kept, so that re-timing reproduces the trace
    wait = np.where(binding >= 0, g.node_ts - arrival, 0)
    return Timing(g.node_ts.copy(), binding, wait, order)


def retime(jg: JobGraph, base: Timing, own: np.ndarray) -> Timing:
    """Forward re-timing with new own times (see the module doc)."""
    g = jg.graph
    ts, binding, _ = _sweep(base.order, g.n_nodes, g.src, g.dst, g.node_ts, own, base.wait,
                            True)
    return Timing(ts, binding, base.wait, base.order)


def path(jg: JobGraph, t: Timing) -> np.ndarray:
    """Edge ids of the critical path, first to last: back from the latest point along
    binding edges."""
    g = jg.graph
    has = np.zeros(g.n_nodes, bool)
    has[g.src] = True
    has[g.dst] = True
    cand = np.flatnonzero(has)
    if cand.size == 0:
        return np.empty(0, np.int64)
    v = cand[np.argmax(t.ts[cand])]
    out = []
    while t.binding[v] >= 0:
        e = t.binding[v]
        out.append(e)
        v = g.src[e]
    return np.array(out[::-1], np.int64)


def path_times(jg: JobGraph, t: Timing, edges: np.ndarray, own: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(own part, wait part) in ns of each path edge; they add up to the path's span."""
    g = jg.graph
    span = t.ts[g.dst[edges]] - t.ts[g.src[edges]]
    mine = np.minimum(np.maximum(own[edges], 0), np.maximum(span, 0))
    return mine, span - mine


@njit(cache=True)
def _topo(n, src, dst):
    """Kahn's topological order of the nodes (by node id among the ready ones) and
    whether every node got one (False: a cycle)."""
    so, start = csr(n, src)
    indeg = np.zeros(n, np.int64)
    for e in range(src.size):
        indeg[dst[e]] += 1
    queue = np.empty(n, np.int64)
    qt = 0
    for v in range(n):
        if indeg[v] == 0:
            queue[qt] = v
            qt += 1
    qh = 0
    while qh < qt:
        v = queue[qh]
        qh += 1
        for k in range(start[v], start[v + 1]):
            c = dst[so[k]]
            indeg[c] -= 1
            if indeg[c] == 0:
                queue[qt] = c
                qt += 1
    return queue, qt == n


@njit(cache=True)
def _sweep(order, n, src, dst, ts0, own, wait, retime):
    """In topological ``order``: each node's binding edge (latest predecessor time plus
    own time; -1 without predecessors) and that arrival; with ``retime`` the node's time
    becomes the arrival plus its ``wait`` (else the times stay ``ts0``). Returns (times,
    binding edges, arrivals)."""
    po, start = csr(n, dst)
    ts = ts0.copy()
    arrival = ts0.copy()
    binding = np.full(n, -1, np.int64)
    for v in order:
        best = np.int64(-(2 ** 62))
        for k in range(start[v], start[v + 1]):
            e = po[k]
            a = ts[src[e]] + own[e]
            if a > best:
                best = a
                binding[v] = e
        if binding[v] >= 0:
            arrival[v] = best
            if retime:
                ts[v] = best + wait[v]
    return ts, binding, arrival


# ---- what-if ---------------------------------------------------------------------------
_WHAT_IF = re.compile(r"^\s*(?P<what>[^=]+?)\s*=\s*(?P<factor>[0-9.eE+-]+)\s*$")


def what_if_scale(jg: JobGraph, specs: list[str]) -> tuple[np.ndarray, list[str]]:
    """Per edge, the factor its own time is multiplied by, from ``specs`` such as
    ``COMM:TP=0.5`` (a comm group's kernels and joins), ``COMM=0.5``, ``COMP=0.8`` /
    ``compute``, ``MEM``, ``cpu``, ``launch``, ``kernel:flash*=0.8`` (kernel name glob),
    ``rank:3=0.5`` (every own time on rank 3); and the specs as understood."""
    g = jg.graph
    scale = np.ones(g.src.size)
    done = []
    node_rank = g.node_rank
    for spec in specs:
        m = _WHAT_IF.match(spec)
        if not m:
            raise UsageError(f"--what-if {spec!r}: expected WHAT=FACTOR, e.g. COMM:TP=0.5")
        what, factor = m["what"], float(m["factor"])
        if not factor >= 0:
            raise UsageError(f"--what-if {spec!r}: the factor must be >= 0")
        sel = _selection(jg, what, node_rank)
        if sel is None:
            raise UsageError(f"--what-if {spec!r}: unknown target {what!r}; use COMM[:GROUP], "
                             "COMP, MEM, cpu, launch, kernel:GLOB or rank:N")
        scale[sel] *= factor
        done.append(f"{what} x{factor:g} ({int(sel.sum())} edges)")
    return scale, done


def _selection(jg: JobGraph, what: str, node_rank: np.ndarray) -> np.ndarray | None:
    cat = jg.category
    low = what.lower()
    comm = cat >= COMM0
    if low in ("comm", "communication"):
        return comm
    if low.startswith("comm:"):
        grp = what.split(":", 1)[1].strip().upper()
        if grp not in GROUPS:
            return None
        return cat == COMM0 + GROUPS.index(grp)
    if low in ("comp", "compute"):
        return cat == COMPUTE
    if low in ("mem", "memory"):
        return cat == MEMORY
    if low == "cpu":
        return cat == CPU
    if low == "launch":
        return cat == LAUNCH_CAT
    if low.startswith("kernel:"):
        pat = what.split(":", 1)[1].strip()
        hit = np.array([fnmatch.fnmatchcase(t, pat) for t in jg.names] + [False])
        return hit[jg.edge_name]
    if low.startswith("rank:"):
        try:
            r = int(what.split(":", 1)[1])
        except ValueError:
            return None
        return node_rank[jg.graph.src] == r
    return None


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


def kernel_info(table, rank: int) -> KernelInfo:
    """What the join needs of a rank's GPU activity table (see :class:`KernelInfo`)."""
    n = table.num_rows

    def col(name):
        return ints(table[name]) if name in table.column_names else np.full(n, -1, np.int64)

    def texts(name):
        return row_texts(table, name, "").tolist()

    kind = index_in(table["kind"], KINDS) if "kind" in table.column_names else col("")
    group = index_in(table["comm_group"], GROUPS) if "comm_group" in table.column_names \
        else np.full(n, -1, np.int64)
    coll = index_in(table["collective"], COLLECTIVES) if "collective" in table.column_names \
        else np.full(n, -1, np.int64)
    p2p = coll == COLLECTIVES.index("SendRecv")
    peer = np.full(n, -1, np.int64)
    src, dst = col("src_rank"), col("dst_rank")
    peer = np.where((src >= 0) & (src != rank), src, np.where((dst >= 0) & (dst != rank),
                                                              dst, -1))
    need = np.flatnonzero(p2p & (peer < 0))
    known: dict[int, list[int]] = {}
    listed = table["group_ranks"].take(need).to_pylist() \
        if need.size and "group_ranks" in table.column_names else []
    for i, got in zip(need.tolist(), listed):
        members = [int(x) for x in (got if isinstance(got, list)
                                    else re.findall(r"-?\d+", str(got or "")))]
        others = [m for m in members if m != rank]
        if len(members) == 2 and len(others) == 1:
            peer[i] = others[0]
        else:
            known[i] = members
    return KernelInfo(kind=np.asarray(kind, np.int64), group=np.asarray(group, np.int64),
                      pg=texts("pg_name"), seq=col("seq"), p2p=p2p, peer=peer,
                      name=texts("name"), members=known)


P2P_TITLE = re.compile(r"^nccl:(send|recv) (\d+)(?:->|<-)(\d+)$")


def annotated_peers(ev: RankEvents, info: KernelInfo) -> None:
    """Fill the unknown peers of P2P kernels from the ``nccl:send A->B`` / ``nccl:recv
    A<-B`` range PyTorch records around the call (group-local ranks, mapped through the
    group's ranks)."""
    rows = np.flatnonzero((ev.cls == ACTIVITY) & (ev.link >= 0))
    rows = rows[np.isin(ev.table_row[rows], list(info.members))]
    if not rows.size:
        return
    title = np.array([bool(P2P_TITLE.match(t)) for t in ev.names] + [False])
    ann = np.flatnonzero(title[ev.name] & ~ev.gpu)
    if not ann.size:
        return
    ann = ann[np.lexsort((ev.ts[ann], ev.tid[ann]))]
    launch = ev.link[rows]
    for r, call in zip(rows.tolist(), launch.tolist()):
        same = ann[ev.tid[ann] == ev.tid[call]]
        at = np.searchsorted(ev.ts[same], ev.ts[call], side="right") - 1
        if at < 0 or ev.end[same[at]] < ev.ts[call]:
            continue
        m = P2P_TITLE.match(ev.names[ev.name[same[at]]])
        members = info.members[int(ev.table_row[r])]
        local = int(m[3])
        if local < len(members):
            info.peer[int(ev.table_row[r])] = members[local]
