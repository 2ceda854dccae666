"""The critical-path graph as arrays, and its longest path.

Nodes are points in time: the start and the end of an event (``node_event`` is the
event's row in its :class:`~.events.RankEvents`, ``node_rank`` its rank). Edges carry a
kind (``EDGE_KINDS``), a weight in ns and the event the edge's time belongs to
(``attr``, -1 none). Edges are kept in the order they were added; adding an edge that
exists keeps its place and takes the new kind / weight / event (as a networkx
``DiGraph`` would), so the longest path breaks ties the way HTA's does (networkx's
``dag_longest_path`` over ``topological_sort``: first best predecessor in insertion
order, the first farthest node in topological order).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from numba import njit

MAX_IDS = 2 ** 31  # node and edge ids kept as int32 are below this

# edge kinds (HTA's CPEdgeType, plus the job's cross-rank edges)
OPERATOR, DEPENDENCY, LAUNCH, KERNEL_KERNEL, SYNC, COLLECTIVE = range(6)
EDGE_KINDS = ("operator_kernel", "dependency", "kernel_launch_delay", "kernel_kernel_delay",
              "sync_dependency", "collective")


@dataclass
class EdgeList:
    """Edges as they are added: parallel lists, appended in blocks of arrays."""

    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def add(self, src, dst, kind, weight, attr) -> None:
        src = np.atleast_1d(np.asarray(src, np.int64))
        n = src.size
        if n == 0:
            return
        self.parts.append((src, np.broadcast_to(np.asarray(dst, np.int64), n).copy(),
                           np.broadcast_to(np.asarray(kind, np.int8), n).copy(),
                           np.broadcast_to(np.asarray(weight, np.int64), n).copy(),
                           np.broadcast_to(np.asarray(attr, np.int64), n).copy()))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            e = np.empty(0, np.int64)
            return e, e, e.astype(np.int8), e, e
        return tuple(np.concatenate(c) for c in zip(*self.parts))


@dataclass
class Graph:
    """Nodes (start / end points of events) and deduplicated edges in insertion order.
    ``weight``: HTA's edge weights (ns), None in the job's graph (it times its edges by
    their own times: :mod:`.job`)."""

    node_ts: np.ndarray
    node_event: np.ndarray
    node_start: np.ndarray
    node_rank: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    weight: np.ndarray | None
    attr: np.ndarray

    @classmethod
    def build(cls, node_ts, node_event, node_start, node_rank, edges: EdgeList) -> Graph:
        return cls.deduplicated(node_ts, node_event, node_start, node_rank,
                                edges.arrays())[0]

    @classmethod
    def deduplicated(cls, node_ts, node_event, node_start, node_rank,
                     edges: tuple[np.ndarray, ...]) -> tuple[Graph, np.ndarray]:
        """The graph of ``edges`` (src, dst, kind, weight, attr) each distinct edge once,
        and which of the given edges each keeps (its last occurrence)."""
        src, dst, kind, weight, attr = edges
        keep, last = dedup(src, dst, node_ts.size)
        return cls(node_ts, node_event, node_start, node_rank, src[keep], dst[keep],
                   kind[last], weight[last], attr[last]), last

    @property
    def n_nodes(self) -> int:
        return self.node_ts.size

    @functools.cached_property
    def into(self) -> tuple[np.ndarray, np.ndarray]:
        """Edges grouped by their destination (:func:`csr`; the edge ids int32 where
        they fit), made once: every re-timing of the graph sweeps them."""
        order, start = csr(self.n_nodes, self.dst)
        return (order.astype(np.int32) if order.size < MAX_IDS else order), start

    @functools.cached_property
    def joined(self) -> np.ndarray:
        """Per node, whether an edge runs into or out of it (made once: every timing of
        the graph reads it)."""
        out = np.zeros(self.n_nodes, bool)
        out[self.src] = True
        out[self.dst] = True
        return out

    @classmethod
    def empty(cls) -> Graph:
        """A graph of no nodes (a rank's graph once joined into the job's: its arrays
        live on there)."""
        z = np.zeros(0, np.int64)
        return cls(z, z, np.zeros(0, bool), z, z, z, z, z, z)

    def subset(self, keep: np.ndarray) -> Graph:
        """The same nodes with the edges where ``keep``."""
        return Graph(self.node_ts, self.node_event, self.node_start, self.node_rank,
                     self.src[keep], self.dst[keep], self.kind[keep],
                     None if self.weight is None else self.weight[keep], self.attr[keep])


def dedup(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(first occurrence of each distinct edge, in insertion order; its last occurrence)."""
    key = src * np.int64(n) + dst
    _, first = np.unique(key, return_index=True)
    _, rlast = np.unique(key[::-1], return_index=True)
    last = key.size - 1 - rlast
    order = np.argsort(first, kind="stable")
    return first[order], last[order]


@njit(cache=True)
def csr(n, keys):
    """Edges grouped by node: (edge ids ordered by ``keys`` (their source or their
    destination), insertion order kept within a node; start offset per node, n + 1)."""
    order = np.argsort(keys, kind="mergesort")
    start = np.zeros(n + 1, np.int64)
    for e in range(keys.size):
        start[keys[e] + 1] += 1
    for v in range(n):
        start[v + 1] += start[v]
    return order, start


@njit(cache=True)
def _kahn(n, src, dst, seeds):
    """Kahn's topological order: the nodes of ``seeds`` without a predecessor in that
    order, then each node once its last predecessor is placed (successors in insertion
    order). Returns (order, of ``seeds``' integer type; how many nodes it holds)."""
    so, start = csr(n, src)
    indeg = np.zeros(n, np.int32)  # a node's predecessors: far below 2^31
    for e in range(src.size):
        indeg[dst[e]] += 1
    queue = np.empty_like(seeds)
    qt = 0
    for v in seeds:
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
    return queue, qt


@njit(cache=True)
def topo(n, src, dst):
    """Kahn's topological order of the nodes (by node id among the ready ones) and
    whether every node got one (False: a cycle). Node ids int32 (below MAX_IDS)."""
    seeds = np.empty(n, np.int32)
    for v in range(n):
        seeds[v] = v
    queue, qt = _kahn(n, src, dst, seeds)
    return queue, qt == n


@njit(cache=True)
def _components(n, src, dst):
    """Strongly connected component id per node (Tarjan's, iterative: a node is entered
    when its turn comes as a root or as an unvisited successor)."""
    so, start = csr(n, src)
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    on_stack = np.zeros(n, np.bool_)
    comp = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    call_node = np.empty(n, np.int64)
    call_next = np.empty(n, np.int64)
    sp = 0
    counter = 0
    n_comp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        depth = 0
        w = root
        while True:
            if w >= 0:  # enter w
                index[w] = counter
                low[w] = counter
                counter += 1
                stack[sp] = w
                sp += 1
                on_stack[w] = True
                call_node[depth] = w
                call_next[depth] = start[w]
                depth += 1
                w = -1
            if depth == 0:
                break
            v = call_node[depth - 1]
            k = call_next[depth - 1]
            if k < start[v + 1]:
                call_next[depth - 1] = k + 1
                c = dst[so[k]]
                if index[c] < 0:
                    w = c
                elif on_stack[c] and index[c] < low[v]:
                    low[v] = index[c]
                continue
            if low[v] == index[v]:
                while True:
                    sp -= 1
                    x = stack[sp]
                    on_stack[x] = False
                    comp[x] = n_comp
                    if x == v:
                        break
                n_comp += 1
            depth -= 1
            if depth > 0 and low[v] < low[call_node[depth - 1]]:
                low[call_node[depth - 1]] = low[v]
    return comp


def acyclic(graph: Graph) -> np.ndarray:
    """Which edges to keep so that the graph has no cycle (bool per edge; all when it has
    none). Points in time order (node id at a tie) run forward along every edge but
    those that close a cycle: within each strongly connected component the edges that
    run back in that order are dropped, and what is left of the component runs forward
    only, so it holds no cycle."""
    n, src, dst = graph.n_nodes, graph.src, graph.dst
    if src.size == 0 or topo(n, src, dst)[1]:
        return np.ones(src.size, bool)
    comp = _components(n, src, dst)
    place = np.empty(n, np.int64)
    place[np.lexsort((np.arange(n), graph.node_ts))] = np.arange(n)
    return ~((comp[src] == comp[dst]) & (place[dst] <= place[src]))


@njit(cache=True)
def _longest(n, src, dst, weight):
    """networkx's dag_longest_path over its topological_sort (see the module doc) on the
    nodes that have an edge; returns (path nodes, ok); ok False on a cycle."""
    m = src.size
    seen = np.zeros(n, np.bool_)
    gorder = np.empty(n, np.int64)
    g = 0
    for e in range(m):
        for v in (src[e], dst[e]):
            if not seen[v]:
                seen[v] = True
                gorder[g] = v
                g += 1
    queue, qt = _kahn(n, src, dst, gorder[:g])
    po, pstart = csr(n, dst)  # predecessors in insertion order
    if qt < g:
        return np.empty(0, np.int64), False
    dist = np.zeros(n, np.int64)
    prev = np.full(n, -1, np.int64)
    best_v = -1
    best = np.int64(0)
    for k in range(g):
        v = queue[k]
        d = np.int64(0)
        p = v
        first = True
        for j in range(pstart[v], pstart[v + 1]):
            e = po[j]
            cand = dist[src[e]] + weight[e]
            if first or cand > d:
                d = cand
                p = src[e]
                first = False
        if d < 0:
            d = 0
            p = v
        dist[v] = d
        prev[v] = p
        if best_v < 0 or d > best:
            best = d
            best_v = v
    path = []
    v = best_v
    while True:
        path.append(v)
        if prev[v] == v:
            break
        v = prev[v]
    out = np.empty(len(path), np.int64)
    for k in range(len(path)):
        out[k] = path[len(path) - 1 - k]
    return out, True


def longest_path(graph: Graph, weight: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Node ids of the longest path (``weight`` per edge, default the graph's with
    negative weights as 0) and whether the graph was acyclic."""
    if weight is None:
        assert graph.weight is not None, "a graph of HTA's weights"
        weight = graph.weight
    w = np.maximum(weight, 0)
    if graph.src.size == 0:
        return np.empty(0, np.int64), True
    return _longest(graph.n_nodes, graph.src, graph.dst, w)


def path_edges(graph: Graph, nodes: np.ndarray) -> np.ndarray:
    """Edge ids along a path of node ids."""
    if nodes.size < 2:
        return np.empty(0, np.int64)
    key = graph.src * np.int64(graph.n_nodes) + graph.dst
    order = np.argsort(key)
    want = nodes[:-1] * np.int64(graph.n_nodes) + nodes[1:]
    return order[np.searchsorted(key[order], want)]
