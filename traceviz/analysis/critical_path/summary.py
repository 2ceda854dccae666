"""What bounds a rank's critical path: each path edge's time by HTA's ``bound_by``.

- ``kernel_kernel_delay`` edges: ``gpu_kernel_kernel_overhead``;
- ``kernel_launch_delay`` edges: ``gpu_kernel_launch_overhead``;
- ``dependency`` / ``sync_dependency`` edges: ``dependency`` (HTA's empty label; they
  weigh 0);
- an operator / kernel span: ``cpu_bound`` when the event it belongs to is on the CPU
  (no stream), else ``gpu_communication_bound`` for a communication kernel, else
  ``gpu_compute_bound``.

Shares are percent of the path's summed weight (they add up to 100; ``None`` for an
empty path).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..host_device import COMM_KERNEL, RankEvents
from .graph import DEPENDENCY, KERNEL_KERNEL, LAUNCH, SYNC, Graph

BOUND_BY = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound",
            "gpu_kernel_kernel_overhead", "gpu_kernel_launch_overhead", "dependency")
CPU_BOUND, GPU_COMPUTE, GPU_COMM, KK_OVERHEAD, LAUNCH_OVERHEAD, DEPENDENCY_EDGE = range(6)


def bound_by(graph: Graph, events: RankEvents, edges: np.ndarray,
             comm: np.ndarray | None = None) -> np.ndarray:
    """Per edge id of ``edges``: its index into ``BOUND_BY``. ``comm``: per event, whether
    it is a communication kernel (default: HTA's name pattern)."""
    kind = graph.kind[edges]
    attr = graph.attr[edges]
    if comm is None:
        is_comm = np.array([bool(COMM_KERNEL.match(t)) for t in events.names] + [False])
        comm = is_comm[events.name]
    a = np.maximum(attr, 0)
    on_cpu = (attr < 0) | (events.stream[a] < 0)
    out = np.where(on_cpu, CPU_BOUND, np.where(comm[a], GPU_COMM, GPU_COMPUTE))
    out = np.where(kind == KERNEL_KERNEL, KK_OVERHEAD, out)
    out = np.where(kind == LAUNCH, LAUNCH_OVERHEAD, out)
    out = np.where((kind == DEPENDENCY) | (kind == SYNC), DEPENDENCY_EDGE, out)
    return out.astype(np.int8)


@dataclass
class Breakdown:
    """Time on the path (ns) and its share (%) per ``BOUND_BY`` label."""

    ns: np.ndarray
    pct: np.ndarray | None
    total_ns: int

    def as_dict(self) -> dict[str, float | None]:
        return {k: (None if self.pct is None else float(self.pct[i]))
                for i, k in enumerate(BOUND_BY)}


def breakdown(weight: np.ndarray, labels: np.ndarray) -> Breakdown:
    """Sum ``weight`` (ns) per label; shares of the total (None when the total is 0)."""
    ns = np.bincount(labels, weights=weight, minlength=len(BOUND_BY)).astype(np.int64)
    total = int(ns.sum())
    pct = 100.0 * ns / total if total > 0 else None
    return Breakdown(ns, pct, total)
