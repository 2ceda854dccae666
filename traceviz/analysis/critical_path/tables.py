"""Critical-path results as tables: the path's edges and its time by category, rank and
phase. Times are int64 ns; shares are percent of the path's span and add up to 100."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...table.arrays import row_texts
from ..host_device import ACTIVITY, CPU_OP, PYTHON, RUNTIME, SYNC, USER_ANNOT
from .graph import EDGE_KINDS, Graph
from .job import CATEGORIES, WAIT, WAIT_EARLIER, WAIT_RANK, JobGraph
from .rank_graph import RankGraph
from .summary import BOUND_BY

EVENT_CLASSES = {CPU_OP: "cpu_op", USER_ANNOT: "user_annotation", RUNTIME: "runtime",
                 PYTHON: "python_function", ACTIVITY: "gpu", SYNC: "cuda_sync"}


def _event_columns(ranks: list[RankGraph], node_base: np.ndarray, graph: Graph,
                   edges: np.ndarray, phases: list[np.ndarray | None]) -> dict:
    """Name, class, stream / thread and phase of the event each path edge belongs to (its
    attributed event, else its end point's)."""
    names, cls, where, phase = [], [], [], []
    for e in edges.tolist():
        v = int(graph.dst[e])
        k = int(np.searchsorted(node_base, v, side="right") - 1)
        rg = ranks[k]
        ev = rg.events
        a = int(graph.attr[e]) if graph.attr[e] >= 0 else int(graph.node_event[v])
        names.append(ev.names[ev.name[a]] if ev.name[a] >= 0 else None)
        cls.append(EVENT_CLASSES.get(int(ev.cls[a]), "other"))
        where.append(int(ev.tid[a]))
        row = int(ev.table_row[a])
        ph = phases[k]
        phase.append(str(ph[row]) if ph is not None and row >= 0 and ph[row] else None)
    return {"event": names, "event_class": cls, "thread_or_stream": where, "phase": phase}


def rank_path_table(rg: RankGraph, edges: np.ndarray, labels: np.ndarray,
                    phase: np.ndarray | None) -> pa.Table:
    """One rank's (HTA-model) path: per edge its order, points, kind, weight, bound_by
    and the event it belongs to."""
    g = rg.graph
    assert g.weight is not None  # a rank's graph: HTA's weights
    cols = _event_columns([rg], np.array([0]), g, edges, [phase])
    return pa.table({
        "step": np.arange(edges.size, dtype=np.int64),
        "rank": np.full(edges.size, rg.events.rank, np.int64),
        "from_ns": g.node_ts[g.src[edges]], "to_ns": g.node_ts[g.dst[edges]],
        "edge": [EDGE_KINDS[k] for k in g.kind[edges].tolist()],
        "weight_ns": g.weight[edges],
        "bound_by": [BOUND_BY[k] for k in labels.tolist()],
        **cols})


def job_path_table(jg: JobGraph, edges: np.ndarray, own: np.ndarray, wait: np.ndarray,
                   slack: np.ndarray, phases: list[np.ndarray | None],
                   stages: dict[int, int | None], start: int | None = None) -> pa.Table:
    """The job's path: per edge its order, rank and pipeline stage (``stages``: per rank,
    None unknown), points (common clock; an edge that began before the iteration's
    ``start`` from there), kind, category, own and wait time, the slack of its end point
    and the event it belongs to."""
    g = jg.graph
    begin = g.node_ts[g.src[edges]]
    cols = _event_columns(jg.ranks, jg.node_base, g, edges, phases)
    rank = g.node_rank[g.dst[edges]].astype(np.int64)
    return pa.table({
        "step": np.arange(edges.size, dtype=np.int64),
        "rank": rank, "stage": pa.array([stages.get(int(r)) for r in rank.tolist()],
                                        pa.int64()),
        "from_rank": g.node_rank[g.src[edges]].astype(np.int64),
        "from_ns": begin if start is None else np.maximum(begin, start),
        "to_ns": g.node_ts[g.dst[edges]],
        "edge": [EDGE_KINDS[k] for k in g.kind[edges].tolist()],
        "category": [CATEGORIES[k] for k in jg.category[edges].tolist()],
        "own_ns": own, "wait_ns": wait, "slack_ns": slack[g.dst[edges]], **cols})


def parts(jg: JobGraph, edges: np.ndarray, own: np.ndarray, wait: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """(category per part, ns per part): each path edge's own time under its category
    and its wait under ``wait: other rank`` (a join across ranks), ``wait: earlier
    work`` (a device activity queued behind work launched before the window) or
    ``wait``."""
    g = jg.graph
    cross = g.node_rank[g.src[edges]] != g.node_rank[g.dst[edges]]
    earlier = jg.queued[g.dst[edges]] if jg.queued is not None else np.zeros(edges.size,
                                                                               bool)
    cat = np.concatenate([jg.category[edges],
                          np.select([cross, earlier], [WAIT_RANK, WAIT_EARLIER], WAIT)])
    return cat, np.concatenate([own, wait])


def by(keys: list, ns: np.ndarray, name: str, total: int) -> pa.Table:
    """Sum ``ns`` per key, largest first, with the share of ``total``."""
    acc: dict = {}
    for k, v in zip(keys, ns.tolist()):
        acc[k] = acc.get(k, 0) + v
    items = sorted(((k, v) for k, v in acc.items() if v > 0), key=lambda kv: -kv[1])
    return pa.table({name: [k for k, _ in items],
                     "ns": pa.array([v for _, v in items], pa.int64()),
                     "pct": pa.array([100.0 * v / total if total > 0 else None
                                      for _, v in items], pa.float64())})


def phases_of(table: pa.Table) -> np.ndarray | None:
    """The GPU table's phase per row as strings ('' unknown), None without a phase."""
    if "phase" not in table.column_names:
        return None
    return row_texts(table, "phase", "")
