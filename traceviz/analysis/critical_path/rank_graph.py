"""One rank's critical-path graph, HTA's model (``critical_path_analysis``), on arrays.

The window is one instance of an annotation (``ProfilerStep#N`` by default): from the
earliest start to the latest end of the chosen instances. The graph holds:

- **nodes**: a start and an end point for every CPU operator (``cpu_op``) and runtime /
  driver call that starts in the window and lasts > 0, and every device activity (and
  sync event on a stream) whose launching call does;
- **CPU edges**: per thread, in call-stack order (depth-first over the nesting), from
  each point to the next: ``dependency`` (weight 0) between top-level operators,
  ``operator_kernel`` (weight = the time between the points) inside one; a blocking
  sync call's own span weighs 0 (it only waits). The backward thread is merged into the
  forward thread when each is one thread (HTA's rule). Calls that take CUDA's runtime
  lock (cudaLaunchKernel, cudaMemcpyAsync, cudaHostAlloc) are chained across threads in
  the order they finished;
- **GPU edges**: each activity's span; ``kernel_launch_delay`` from its launch call when
  the stream was empty (queue length 1 at the launch, 0 after the activity started) and
  the previous activity had ended before the launch, else ``kernel_kernel_delay`` from
  the previous activity on the stream when the gap is < 1.5 ms;
- **sync edges** (weight 0): Stream / Context Sync from the last activity on the
  stream(s) to the end of the synchronising call; Event Sync (cudaEventSynchronize)
  from the activity launched on the recorded stream just before ``cudaEventRecord`` to
  the end of the call; Stream Wait Event from that activity to the next activity the
  waiting thread launches on the waiting stream.

Times are the rank's ns; ``hta_compat`` uses HTA's whole µs. Every loop over events is
numba-compiled and linear in the window's events (plus a sort).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ...errors import TraceVizError
from ...table.arrays import row_groups
from ...table.text import middle_cut
from ..host_device import ACTIVITY, CPU_OP, RUNTIME, SYNC, USER_ANNOT, RankEvents
from ..queue import QUEUE_CALLS
from .graph import DEPENDENCY, KERNEL_KERNEL, LAUNCH, OPERATOR, EdgeList, Graph, acyclic
from .graph import SYNC as SYNC_EDGE

LOCK_CALLS = ("cudaHostAlloc", "cudaLaunchKernel", "cudaMemcpyAsync")
BLOCKING_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery",
                  "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")
KERNEL_KERNEL_MAX_NS = 1_500_000  # HTA: a longer gap means a dependency it cannot see
STREAM_WAIT, EVENT_SYNC, CONTEXT_SYNC, STREAM_SYNC = (
    "Stream Wait Event", "Event Sync", "Context Sync", "Stream Sync")
DEFAULT_ANNOTATION = "ProfilerStep"


@dataclass
class Window:
    """The analysed span (ns) and how it was chosen."""

    start: int
    end: int
    annotation: str
    instances: tuple[int, int]
    names: list[str]


def window(ev: RankEvents, annotation: str = DEFAULT_ANNOTATION,
           instance: int | tuple[int, int] = 0, exact: bool = False) -> Window:
    """The span of instances ``instance`` (one index or an inclusive range; negative
    counts from the last) of the events whose name contains ``annotation`` (HTA's
    match; ``exact``: whose name is it), in trace order; ``annotation=""`` is the whole
    trace."""
    first, last = (instance, instance) if isinstance(instance, int) else instance
    if annotation == "":
        return Window(int(ev.ts.min()), int(ev.end.max()), "", (0, 0), [])
    ids = [i for i, t in enumerate(ev.names) if (t == annotation if exact else annotation in t)]
    rows = np.flatnonzero(np.isin(ev.name, ids) & ~ev.gpu)
    if rows.size == 0 and exact:
        steps = sorted({t for t in ev.names if t.startswith(DEFAULT_ANNOTATION + "#")})
        raise TraceVizError(f"no {annotation} in the trace (its steps: "
                            f"{', '.join(steps[:6]) or 'none'}{', ...' if len(steps) > 6 else ''})"
                            "; pick one with --iteration")
    if rows.size == 0:
        raise TraceVizError(f"no annotation named like {annotation!r} in the trace; "
                            "pick one with --annotation (e.g. a record_function name)")
    n = rows.size
    lo, hi = (first + n if first < 0 else first), (last + n if last < 0 else last)
    if not (0 <= lo <= hi < n):
        raise TraceVizError(f"{annotation!r} has instances 0..{n - 1} in the trace, not "
                            f"{instance}; pick one with --instance")
    sel = rows[lo:hi + 1]
    return Window(int(ev.ts[sel].min()), int(ev.end[sel].max()), annotation, (lo, hi),
                  [ev.names[ev.name[r]] for r in sel])


def clip(ev: RankEvents, w: Window, hta_compat: bool = False) -> np.ndarray:
    """HTA's clip: CPU events starting in the window with dur > 0, and device events
    whose launching call does (or that are Stream Wait Events). Bool per row. With
    ``hta_compat`` a call that launched several activities (``cudaGraphLaunch``: a CUDA
    graph's kernels) keeps only its last one, as HTA's correlation join does."""
    ts_in = (ev.ts >= w.start) & (ev.ts <= w.end)
    cpu = (ev.stream < 0) & ts_in & (ev.dur > 0) & (ev.cls != ACTIVITY)
    link = np.maximum(ev.link, 0)
    launched = (ev.link >= 0) & ts_in[link] & (ev.dur[link] > 0)
    device = (ev.stream >= 0) & (launched | ev.is_named(STREAM_WAIT))
    if hta_compat:
        acts = np.flatnonzero(device & (ev.cls == ACTIVITY) & (ev.link >= 0))
        acts = acts[np.lexsort((ev.order[acts], ev.ts[acts], ev.link[acts]))]
        last = np.r_[ev.link[acts][1:] != ev.link[acts][:-1], True]
        device[acts[~last]] = False
    return cpu | device


@dataclass
class RankGraph:
    """A rank's graph, the window, and per event its start / end node (-1: none)."""

    events: RankEvents
    window: Window
    graph: Graph
    start_node: np.ndarray
    end_node: np.ndarray
    notes: list[str] = field(default_factory=list)  # what building it had to change

    def release(self) -> None:
        """Once joined into the job's graph (:class:`.job.Joiner`): keep only what the
        path's tables and figure read of it (its events slimmed); its graph lives on in
        the job's."""
        self.graph = Graph.empty()
        self.events = self.events.slimmed()
        self.start_node = self.end_node = np.zeros(0, np.int64)


def build(ev: RankEvents, w: Window, hta_compat: bool = False) -> RankGraph:
    """HTA's graph of one rank over one window (see the module doc; ``hta_compat``: see
    :func:`clip`)."""
    keep = clip(ev, w, hta_compat)
    has_nodes = keep & (((ev.cls == CPU_OP) | (ev.cls == RUNTIME))
                        | ((ev.stream >= 0) & (ev.correlation >= 0) & ev.gpu))
    rows = np.flatnonzero(has_nodes)
    # nodes sorted by (ts, trace order), a start before its own end
    t = np.concatenate([ev.ts[rows], ev.end[rows]])
    o = np.concatenate([ev.order[rows], ev.order[rows]])
    is_start = np.concatenate([np.ones(rows.size, bool), np.zeros(rows.size, bool)])
    r = np.concatenate([rows, rows])
    order = np.lexsort((~is_start, o, t))
    node_ts, node_event, node_start = t[order], r[order], is_start[order]
    start_node = np.full(len(ev), -1, np.int64)
    end_node = np.full(len(ev), -1, np.int64)
    ids = np.arange(order.size)
    start_node[node_event[node_start]] = ids[node_start]
    end_node[node_event[~node_start]] = ids[~node_start]
    node_lock = ev.is_named(*LOCK_CALLS)[node_event]
    edges = EdgeList()
    src, dst, kind = _lock_pass(node_event, node_start, node_lock)
    edges.add(src, dst, kind, _weights(node_ts, src, dst, kind != OPERATOR),
              np.where(kind == OPERATOR, node_event[dst], -1))
    _stack_edges(edges, ev, keep, node_ts, node_start, node_event, start_node, end_node,
                 node_lock)
    _kernel_edges(edges, ev, keep, node_ts, node_event, start_node, end_node)
    graph = Graph.build(node_ts, node_event, node_start,
                        np.full(order.size, ev.rank, np.int64), edges)
    rg = RankGraph(ev, w, graph, start_node, end_node)
    keep = acyclic(graph)
    if not keep.all():
        removed = np.flatnonzero(~keep)
        rg.notes.append(cycle_note([(point_text(rg, int(graph.src[e])),
                                     point_text(rg, int(graph.dst[e])))
                                    for e in removed[:2].tolist()], int(removed.size)))
        rg.graph = graph.subset(keep)
    return rg


def point_text(rg: RankGraph, v: int) -> str:
    """Node ``v`` of ``rg``'s graph as its event, start or end, and time in the window."""
    g, ev = rg.graph, rg.events
    e = int(g.node_event[v])
    return (f"{_rank(ev.rank)} {middle_cut(ev.names[ev.name[e]], 60)!r} "
            f"{'start' if g.node_start[v] else 'end'} at "
            f"{(g.node_ts[v] - rg.window.start) / 1e6:.3f} ms")


def cycle_note(examples: list[tuple[str, str]], n: int) -> str:
    """What was done about a graph's cycles: ``n`` edges removed, named by ``examples``
    (their points, :func:`point_text`)."""
    shown = "; ".join(f"{a} -> {b}" for a, b in examples[:2])
    return (f"the critical-path graph had a cycle (the trace's nesting or order "
            f"contradicts itself, e.g. {shown}): {n} edge(s) running back in time inside "
            "it removed, the path is over the rest (HTA refuses such a window)")


def _rank(rank: int) -> str:
    return f"rank {rank}" if rank >= 0 else "the rank"


def _weights(node_ts, src, dst, zero):
    """HTA's edge weight: the time between the points, or 0."""
    return np.where(zero, 0, node_ts[dst] - node_ts[src])


@njit(cache=True)
def _lock_pass(node_event, node_start, is_lock):
    """Chain the runtime-lock calls across threads in the order they end."""
    src, dst, kind = [np.int64(0)], [np.int64(0)], [np.int8(0)]
    src.clear()
    dst.clear()
    kind.clear()
    stack = [np.int64(0)]
    stack.clear()
    last = -1
    for v in range(node_event.size):
        if not is_lock[v]:
            continue
        if node_start[v]:
            stack.append(v)
        else:
            while len(stack) > 0:
                p = stack.pop()
                src.append(p)
                dst.append(v)
                kind.append(np.int8(OPERATOR if node_event[p] == node_event[v]
                                    else DEPENDENCY))
            if last >= 0 and not node_start[last]:
                src.append(last)
                dst.append(v)
                kind.append(np.int8(DEPENDENCY))
        last = v
    return np.array(src, np.int64), np.array(dst, np.int64), np.array(kind, np.int8)


def threads(ev: RankEvents, keep: np.ndarray) -> np.ndarray:
    """Call-stack id per row (-1: not on a CPU call stack). Rows are grouped by (pid,
    tid), the backward thread merged into the forward one when each is one thread
    (HTA's rule); a thread is a CPU call stack when none of its rows is on a stream (a
    device's stream 0, as on ROCm, is a stream: HTA's rule too)."""
    tid = ev.tid.copy()
    annot = keep & ((ev.cls == CPU_OP) | (ev.cls == USER_ANNOT))

    def only_thread(word: str):
        ids = [i for i, t in enumerate(ev.names) if word in t]
        tids = np.unique(tid[annot & np.isin(ev.name, ids)])
        return int(tids[0]) if tids.size == 1 else None

    fwd, bwd = only_thread("forward"), only_thread("autograd")
    if fwd is not None and bwd is not None and fwd != bwd:
        tid[tid == bwd] = fwd
    rows = np.flatnonzero(keep)
    key = np.full(len(ev), -1, np.int64)
    if rows.size == 0:
        return key
    _, inv = row_groups(ev.pid[rows], tid[rows])
    device = np.zeros(inv.max() + 1, bool)
    np.logical_or.at(device, inv, ev.stream[rows] >= 0)
    key[rows] = np.where(device[inv], -1, inv)
    return key


def _stack_edges(edges: EdgeList, ev: RankEvents, keep, node_ts, node_start, node_event,
                 start_node, end_node, node_lock) -> None:
    """Edges along each thread's call stack, depth first (see the module doc)."""
    thread = threads(ev, keep)
    rows = np.flatnonzero(thread >= 0)
    if rows.size == 0:
        return
    # HTA's event order within a thread: time; ends before starts; longer starts first
    # (then trace order); shorter ends first (then reverse trace order)
    n = rows.size
    t = np.concatenate([ev.ts[rows], ev.end[rows]])
    typ = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    d, o = ev.dur[rows], ev.order[rows]
    th = np.concatenate([thread[rows], thread[rows]])
    pos = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((np.concatenate([o, -o]), np.concatenate([-d, d]), typ, t, th))
    src, dst, kind, zero, attr = _stack_pass(
        th[order], pos[order], typ[order] == 1, rows, start_node[rows], end_node[rows],
        node_start, node_event, node_lock, ev.is_named(*BLOCKING_CALLS)[rows])
    edges.add(src, dst, kind, _weights(node_ts, src, dst, zero), attr)


@njit(cache=True)
def _stack_pass(th, pos, starts, rows, start_of, end_of, node_start, node_event,
                node_lock, blocking):
    """Per thread: HTA's call stack (push on a start, pop on an end), then a depth-first
    walk adding an edge from each node point to the next."""
    n = rows.size
    parent = np.full(n, -1, np.int64)
    src, dst, kind, zero, attr = ([np.int64(0)], [np.int64(0)], [np.int8(0)], [False],
                                  [np.int64(0)])
    src.clear()
    dst.clear()
    kind.clear()
    zero.clear()
    attr.clear()
    m = th.size
    i = 0
    while i < m:
        j = i
        while j < m and th[j] == th[i]:
            j += 1
        members = np.empty(j - i, np.int64)
        nm = 0
        stack = [np.int64(0)]
        stack.clear()
        for k in range(i, j):
            p = pos[k]
            if starts[k]:
                parent[p] = stack[-1] if len(stack) > 0 else -1
                stack.append(p)
                members[nm] = p
                nm += 1
            elif len(stack) > 0:
                stack.pop()
        _walk(members[:nm], parent, rows, start_of, end_of, node_start, node_event,
              node_lock, blocking, src, dst, kind, zero, attr)
        i = j
    return (np.array(src, np.int64), np.array(dst, np.int64), np.array(kind, np.int8),
            np.array(zero, np.bool_), np.array(attr, np.int64))


@njit(cache=True)
def _attribution(kind, u, v, parent_event, node_start, node_event):
    """The event an edge's time belongs to (HTA's _attribute_edge); -1 for none."""
    if kind == KERNEL_KERNEL:
        return node_event[u]
    if kind != OPERATOR:
        return -1
    if node_start[u]:
        return node_event[u]
    if not node_start[v]:
        return node_event[v]
    return parent_event


@njit(cache=True)
def _walk(members, parent, rows, start_of, end_of, node_start, node_event, node_lock,
          blocking, src, dst, kind, zero, attr):
    """Depth-first over one thread's call tree (children in the order they started)."""
    par = parent[members]
    by_parent = np.argsort(par, kind="mergesort")
    sorted_par = par[by_parent]
    last = -1
    last_parent = -1
    depth = 0
    todo = [np.int64(0)]
    todo.clear()
    lo, hi = np.searchsorted(sorted_par, -1, "left"), np.searchsorted(sorted_par, -1, "right")
    for q in range(hi - 1, lo - 1, -1):
        todo.append(members[by_parent[q]] * 2)
    while len(todo) > 0:
        item = todo.pop()
        p, leaving = item // 2, item % 2 == 1
        par_event = rows[parent[p]] if parent[p] >= 0 else -1
        if not leaving:
            todo.append(p * 2 + 1)
            lo = np.searchsorted(sorted_par, p, "left")
            hi = np.searchsorted(sorted_par, p, "right")
            for q in range(hi - 1, lo - 1, -1):
                todo.append(members[by_parent[q]] * 2)
        a, b = start_of[p], end_of[p]
        if a < 0 or b < 0:
            continue
        v = b if leaving else a
        if last >= 0 and not (node_lock[last] and node_lock[v]
                              and (node_start[last] or not node_start[v])):
            k = OPERATOR if leaving or depth > 0 else DEPENDENCY
            src.append(last)
            dst.append(v)
            kind.append(np.int8(k))
            zero.append(k == DEPENDENCY or (leaving and blocking[p]))
            attr.append(_attribution(k, last, v, last_parent, node_start, node_event))
        last = v
        last_parent = par_event
        depth += -1 if leaving else 1


def _launches(ev: RankEvents) -> tuple[np.ndarray, np.ndarray]:
    """(launch call rows in time order, their device rows): calls of HTA's launch list
    linked to an activity on a stream."""
    is_call = np.array([bool(QUEUE_CALLS.search(t)) for t in ev.names] + [False])
    calls = np.flatnonzero(is_call[ev.name] & (ev.cls == RUNTIME) & (ev.link >= 0))
    calls = calls[(ev.stream[ev.link[calls]] >= 0) & (ev.cls[ev.link[calls]] == ACTIVITY)]
    calls = calls[np.argsort(ev.ts[calls], kind="stable")]
    return calls, ev.link[calls]


def _queue_lengths(ev: RankEvents, calls, acts) -> np.ndarray:
    """Per row: the stream's queue length right after this launch call / activity
    start (HTA's counter: +1 at a launch, -1 at the activity's start); -1 elsewhere."""
    rows = np.concatenate([calls, acts])
    t = ev.ts[rows]
    stream = np.concatenate([ev.stream[acts], ev.stream[acts]])
    step = np.concatenate([np.ones(calls.size, np.int64), -np.ones(acts.size, np.int64)])
    order = np.lexsort((t, stream))  # stable: launches before starts at a tie
    rows, stream, step = rows[order], stream[order], step[order]
    total = np.cumsum(step)
    first = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]])
    before = np.r_[0, total][first]
    q = np.full(len(ev), -1, np.int64)
    q[rows] = total - np.repeat(before, np.diff(np.r_[first, stream.size]))
    return q


def _previous_launch(ev: RankEvents, calls, acts) -> np.ndarray:
    """Per row: for a sync event that waits on a cudaEventRecord (by correlation), the
    launch call made on the recorded stream (same device) just before the record;
    -1 elsewhere."""
    out = np.full(len(ev), -1, np.int64)
    waits = np.flatnonzero(ev.wait_corr >= 0)
    records = np.flatnonzero(ev.is_named("cudaEventRecord") & (ev.correlation >= 0))
    if not waits.size or not records.size or not calls.size:
        return out
    # the stream and device each record was made on (from the sync events naming it)
    rec_corr = ev.correlation[records]
    w_at = {int(c): (int(s), int(p)) for c, s, p in
            zip(ev.wait_corr[waits], ev.wait_stream[waits], ev.pid[waits])}
    prev_of_corr = {}
    key_calls = ev.pid[acts] * 2 ** 20 + ev.stream[acts]
    for r, c in zip(records.tolist(), rec_corr.tolist()):
        if c not in w_at:
            continue
        stream, dev = w_at[c]
        same = np.flatnonzero((key_calls == dev * 2 ** 20 + stream) & (ev.ts[calls] <= ev.ts[r]))
        if same.size:
            prev_of_corr[c] = int(calls[same[-1]])
    for wrow in waits.tolist():
        out[wrow] = prev_of_corr.get(int(ev.wait_corr[wrow]), -1)
    return out


def _next_launch(ev: RankEvents, calls, acts) -> np.ndarray:
    """Per cudaStreamWaitEvent call: the next launch call of the same thread onto the
    stream that waits; -1 elsewhere."""
    out = np.full(len(ev), -1, np.int64)
    waits = np.flatnonzero(ev.is_named("cudaStreamWaitEvent") & (ev.link >= 0))
    for wrow in waits.tolist():
        stream = ev.stream[ev.link[wrow]]
        same = np.flatnonzero((ev.pid[calls] == ev.pid[wrow]) & (ev.tid[calls] == ev.tid[wrow])
                              & (ev.stream[acts] == stream) & (ev.ts[calls] >= ev.ts[wrow]))
        if same.size:
            out[wrow] = calls[same[0]]
    return out


def _kernel_edges(edges: EdgeList, ev: RankEvents, keep, node_ts, node_event, start_node,
                  end_node) -> None:
    """Activity spans, launch / kernel-kernel delays and sync edges (module doc)."""
    calls, acts = _launches(ev)
    q = _queue_lengths(ev, calls, acts)
    prev_launch = _previous_launch(ev, calls, acts)
    next_launch = _next_launch(ev, calls, acts)
    sync_kind = np.full(len(ev), -1, np.int8)
    for k, name in enumerate((STREAM_WAIT, EVENT_SYNC, CONTEXT_SYNC, STREAM_SYNC)):
        sync_kind[ev.is_named(name) & (ev.cls == SYNC)] = k
    rows = np.flatnonzero(keep & ((ev.stream >= 0) | (sync_kind == 1) | (sync_kind == 2))
                          & (ev.link >= 0) & ev.gpu)
    sort_by = np.where(ev.cls[rows] == SYNC, ev.end[rows], ev.ts[rows])
    rows = rows[np.argsort(sort_by, kind="stable")]
    streams, dense = np.unique(ev.stream[rows], return_inverse=True)
    src, dst, kind, attr = _kernel_pass(
        rows, dense.reshape(-1), ev.cls == SYNC, sync_kind, ev.link, ev.ts, q, prev_launch,
        next_launch, start_node, end_node, node_ts, node_event, streams.size)
    edges.add(src, dst, kind, _weights(node_ts, src, dst, (kind == SYNC_EDGE)), attr)


@njit(cache=True)
def _edge(src, dst, kind, attr, u, v, k, a):
    """Append one edge (u -> v, kind k, attributed to event a) to the edge lists."""
    src.append(u)
    dst.append(v)
    kind.append(np.int8(k))
    attr.append(a)


@njit(cache=True)
def _kernel_pass(rows, dense_stream, is_sync, sync_kind, link, ts, q, prev_launch,
                 next_launch, start_node, end_node, node_ts, node_event, n_streams):
    src, dst, kind, attr = [np.int64(0)], [np.int64(0)], [np.int8(0)], [np.int64(0)]
    src.clear()
    dst.clear()
    kind.clear()
    attr.clear()
    last = np.full(n_streams, -1, np.int64)
    seen_order = np.empty(n_streams, np.int64)
    n_seen = 0
    kernel_sync = np.full(link.size, -1, np.int64)
    for i in range(rows.size):
        r = rows[i]
        s = dense_stream[i]
        if is_sync[r]:
            sk = sync_kind[r]
            if sk == 0 or sk == 1:  # Stream Wait Event, Event Sync
                pl = prev_launch[r]
                if pl < 0:
                    continue
                src_kernel = link[pl]
                if sk == 0:
                    nl = next_launch[link[r]]
                    if nl < 0:
                        continue
                    kernel_sync[link[nl]] = src_kernel
                else:
                    a = end_node[src_kernel]
                    b = end_node[link[r]]
                    if a >= 0 and b >= 0:
                        _edge(src, dst, kind, attr, a, b, SYNC_EDGE, -1)
            elif sk == 2 or sk == 3:  # Context Sync: every stream; Stream Sync: its own
                b = end_node[link[r]]
                for k in range(n_seen):
                    st = seen_order[k]
                    if (sk == 2 or st == s) and b >= 0:
                        _edge(src, dst, kind, attr, last[st], b, SYNC_EDGE, -1)
            continue
        a, b = start_node[r], end_node[r]
        if a < 0 or b < 0:
            continue
        _edge(src, dst, kind, attr, a, b, OPERATOR, r)
        sync_src = kernel_sync[r]
        sync_end = -1
        if sync_src >= 0:
            sync_end = end_node[sync_src]
            if sync_end >= 0:
                _edge(src, dst, kind, attr, sync_end, a, SYNC_EDGE, -1)
            else:
                sync_src = -1
            kernel_sync[r] = -1
        launch = link[r]
        lt = ts[launch]
        prev = last[s]
        if (q[launch] == 1 and q[r] == 0 and (prev < 0 or node_ts[prev] < lt)
                and (sync_src < 0 or node_ts[sync_end] < lt)):
            ls = start_node[launch]
            if ls >= 0:
                _edge(src, dst, kind, attr, ls, a, LAUNCH, -1)
        elif (prev >= 0 and node_ts[a] - node_ts[prev] < KERNEL_KERNEL_MAX_NS
              and (sync_src < 0 or node_ts[sync_end] < node_ts[prev])):
            _edge(src, dst, kind, attr, prev, a, KERNEL_KERNEL, node_event[prev])
        if last[s] < 0:
            seen_order[n_seen] = s
            n_seen += 1
        last[s] = b
    return (np.array(src, np.int64), np.array(dst, np.int64), np.array(kind, np.int8),
            np.array(attr, np.int64))
