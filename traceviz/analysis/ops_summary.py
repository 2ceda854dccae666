"""Summaries of the op model over ranks (:mod:`.ops`): per op name, shape, dtype and
phase; what was not modelled; GPU time per module; FLOPs per iteration.

Efficiency of a group = its FLOPs / its GPU time (ns) against the dtype's peak; the
distribution (p10 / p50 / p90, worst) is over its calls. Shares are percent of the
summed GPU time of the compute and memory kernels, so modelled + not modelled = 100.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .devices import device_of
from .ops import RankOps
from .report_types import TraceMfu

SHAPE_KEYS = ("op", "family", "input_dims", "dtype", "phase")
MICROBATCH_KEYS = ("phase", "microbatch")


def grouped(calls: pa.Table, keys: tuple[str, ...] = SHAPE_KEYS) -> pa.Table:
    """Per group of ``keys`` (default: op, family, input dims, dtype, phase): calls,
    FLOPs, bytes, GPU ns, achieved TFLOP/s and TB/s, % of peak (of the summed time) and
    its spread over calls, and the worst call (lowest % of peak) with its rank and
    start."""
    if calls.num_rows == 0:
        return pa.table({k: pa.array([], pa.string()) for k in keys})
    cols = {k: calls[k].to_pylist() for k in (*keys, "rank")}
    flops = calls["flops"].to_numpy(zero_copy_only=False)
    nbytes = calls["bytes"].to_numpy(zero_copy_only=False)
    ns = calls["gpu_ns"].to_numpy()
    pct = calls["pct_peak_flops"].to_numpy(zero_copy_only=False)
    pct_bw = calls["pct_peak_bw"].to_numpy(zero_copy_only=False)
    start = calls["start_ns"].to_numpy()
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*(cols[k] for k in keys))):
        groups.setdefault(key, []).append(i)
    rows = []
    for key, members in groups.items():
        idx = np.asarray(members)
        f, b, t, p, pb = flops[idx], nbytes[idx], ns[idx], pct[idx], pct_bw[idx]
        total_ns = int(t.sum())
        total_f = float(np.nansum(f)) if np.isfinite(f).any() else None
        total_b = float(np.nansum(b)) if np.isfinite(b).any() else None
        known = np.isfinite(p)
        worst = idx[known][np.argmin(p[known])] if known.any() else None
        share = _weighted(f, p)  # summed FLOPs over summed time, each call's peak
        rows.append({**dict(zip(keys, key)), "calls": int(idx.size),
                     "flops": total_f, "bytes": total_b, "gpu_ns": total_ns,
                     # throughput over the calls that have FLOPs (bytes)
                     "tflops": _rate(f, t), "tbps": _rate(b, t),
                     "pct_peak_flops": share, "pct_peak_bw": _weighted(b, pb),
                     "pct_peak_p10": float(np.percentile(p[known], 10)) if known.any() else None,
                     "pct_peak_p50": float(np.percentile(p[known], 50)) if known.any() else None,
                     "pct_peak_p90": float(np.percentile(p[known], 90)) if known.any() else None,
                     "worst_pct_peak": float(pct[worst]) if worst is not None else None,
                     "worst_rank": int(cols["rank"][worst]) if worst is not None else None,
                     "worst_start_ns": int(start[worst]) if worst is not None else None})
    rows.sort(key=lambda r: -r["gpu_ns"])
    return pa.Table.from_pylist(rows)


def _weighted(amount: np.ndarray, pct: np.ndarray) -> float | None:
    """The group's share of a peak from per-call shares: summed amount over summed
    amount / share (every call's own peak); None when no call has one."""
    known = np.isfinite(amount) & np.isfinite(pct) & (pct > 0)
    if not known.any() or amount[known].sum() <= 0:
        return None
    return float(amount[known].sum() / (amount[known] / pct[known]).sum())


def _rate(amount: np.ndarray, ns: np.ndarray) -> float | None:
    """Sum of ``amount`` over the summed ns of the calls that have it, per ns / 1e3
    (TFLOP/s from FLOPs, TB/s from bytes); None when no call has it."""
    known = np.isfinite(amount) & (ns > 0)
    return float(amount[known].sum() / ns[known].sum() / 1e3) if known.any() else None


def concat(ranks: list[RankOps], attr: str) -> pa.Table:
    """One table of every rank's ``attr`` table."""
    tables = [getattr(r, attr) for r in ranks if getattr(r, attr).num_rows]
    if not tables:
        return getattr(ranks[0], attr) if ranks else pa.table({})
    return pa.concat_tables(tables, promote_options="default")


def summed(table: pa.Table, keys: list[str], total_ns: int) -> pa.Table:
    """``gpu_ns`` summed over ranks per ``keys``, largest first, with its share (%) of
    ``total_ns``."""
    if table.num_rows == 0:
        return table
    g = table.group_by(keys).aggregate([("gpu_ns", "sum")])
    g = g.rename_columns(keys + ["gpu_ns"]).sort_by([("gpu_ns", "descending")])
    pct = pc.multiply(pc.divide(pc.cast(g["gpu_ns"], pa.float64()), float(total_ns)), 100.0) \
        if total_ns > 0 else pa.nulls(g.num_rows, pa.float64())
    return g.append_column("pct_of_gpu_time", pct)


def modelled_share(calls: pa.Table, not_modelled: pa.Table) -> tuple[int, int, int]:
    """(GPU ns of modelled calls with FLOPs or bytes, of modelled calls whose shapes
    gave neither, of kernels without a modelled op)."""
    if calls.num_rows:
        known = pc.or_(pc.is_valid(calls["flops"]), pc.is_valid(calls["bytes"]))
        with_model = int(pc.sum(pc.if_else(known, calls["gpu_ns"], 0)).as_py() or 0)
        without = int(pc.sum(calls["gpu_ns"]).as_py() or 0) - with_model
    else:
        with_model = without = 0
    none = int(pc.sum(not_modelled["gpu_ns"]).as_py() or 0) if not_modelled.num_rows else 0
    return with_model, without, none


@dataclass(frozen=True)
class OpModel:
    """The op model of a set of ranks (see the module doc). ``calls``: every modelled
    call; ``by_shape`` / ``by_microbatch``: :func:`grouped` by shape (largest first) and
    by phase and micro-batch; ``not_modelled``: GPU ns per op and reason, largest first;
    ``by_module``: GPU ns per module, phase and kernel kind; ``iterations``: FLOPs,
    TFLOP/s and MFU per rank and iteration. GPU ns of the compute / memory kernels:
    ``modelled_ns`` + ``shapes_missing_ns`` + ``unmodelled_ns`` = ``total_ns``.
    ``faster_than_peak``: calls whose % of peak is left out (n/a: above the peak);
    ``above_full_mfu``: rank-iterations whose MFU is left out (above 100 %); ``ranks``:
    the ranks modelled."""

    ranks: tuple[int, ...]
    calls: pa.Table
    by_shape: pa.Table
    by_microbatch: pa.Table
    not_modelled: pa.Table
    by_module: pa.Table
    iterations: pa.Table
    device: str | None
    peak_tflops: float | None
    modelled_ns: int
    shapes_missing_ns: int
    unmodelled_ns: int
    faster_than_peak: int
    above_full_mfu: int

    @property
    def total_ns(self) -> int:
        return self.modelled_ns + self.shapes_missing_ns + self.unmodelled_ns

    def tables(self) -> dict[str, pa.Table]:
        """The summaries by file name."""
        return {"ops_by_shape": self.by_shape, "ops_by_microbatch": self.by_microbatch,
                "ops_not_modelled": self.not_modelled, "ops_by_module": self.by_module,
                "ops_iterations": self.iterations}


def op_model(ranks: list[RankOps]) -> OpModel:
    """The op model of ``ranks`` (:func:`.ops.rank_ops` of each)."""
    calls = concat(ranks, "calls")
    not_modelled = concat(ranks, "not_modelled")
    with_model, shapes_missing, none = modelled_share(calls, not_modelled)
    total = with_model + shapes_missing + none
    missing = (calls.filter(pc.and_(pc.is_null(calls["flops"]), pc.is_null(calls["bytes"])))
               if calls.num_rows else calls)
    mods = concat(ranks, "modules")
    mod_table = summed(mods, ["module", "phase", "kind"],
                       int(pc.sum(mods["gpu_ns"]).as_py() or 0)) if mods.num_rows else mods
    iters = concat(ranks, "iterations")
    device = ranks[0].device if ranks else None
    peak = ranks[0].peak_tflops if ranks else None
    faster = (calls.filter(pc.and_(pc.is_valid(calls["tflops"]),
                                   pc.is_null(calls["pct_peak_flops"]))).num_rows
              if calls.num_rows and device_of(device) else 0)
    above = (iters.filter(pc.and_(pc.is_valid(iters["model_tflops"]),
                                  pc.is_null(iters["mfu_pct"]))).num_rows
             if iters.num_rows and peak else 0)
    return OpModel(ranks=tuple(r.rank for r in ranks), calls=calls, by_shape=grouped(calls),
                   by_microbatch=grouped(calls, MICROBATCH_KEYS),
                   not_modelled=_unmodelled(not_modelled, missing, total),
                   by_module=mod_table, iterations=iters, device=device, peak_tflops=peak,
                   modelled_ns=with_model, shapes_missing_ns=shapes_missing,
                   unmodelled_ns=none, faster_than_peak=faster, above_full_mfu=above)


def _unmodelled(not_modelled: pa.Table, missing: pa.Table, total: int) -> pa.Table:
    """GPU ns per (op, why it has no FLOPs / bytes), largest first, with its share."""
    acc: dict[tuple[str, str], int] = {}
    for table, why in ((not_modelled, "no modelled operator"),
                       (missing, "modelled op without shapes")):
        if table.num_rows:
            replay = (table["graph_replay"].to_pylist() if "graph_replay" in
                      table.column_names else [False] * table.num_rows)
            for op, ns, graph in zip(table["op"].to_pylist(), table["gpu_ns"].to_pylist(),
                                     replay):
                key = (op, "replayed from a CUDA graph captured before the trace"
                       if graph else why)
                acc[key] = acc.get(key, 0) + ns
    items = sorted(acc.items(), key=lambda kv: -kv[1])
    return pa.table({"op": [k[0] for k, _ in items], "why": [k[1] for k, _ in items],
                     "gpu_ns": pa.array([v for _, v in items], pa.int64()),
                     "pct_of_gpu_time": pa.array([share(v, total) for _, v in items],
                                                 pa.float64())})


def share(part: int, total: int) -> float | None:
    """``part`` as a percent of ``total`` (None when ``total`` is not positive)."""
    return 100.0 * part / total if total > 0 else None


def trace_mfu(model: OpModel) -> TraceMfu:
    """TFLOP/s per GPU and MFU from the traced ops' own FLOPs: the mean over the
    rank-iterations (recompute left out); each null with the one reason every command
    gives where some rank-iteration has none (a mean of the others would hide it)."""
    iters = model.iterations.to_pylist() if model.iterations.num_rows else []
    tf = [r["model_tflops"] for r in iters if r["model_tflops"] is not None]
    mfu = [r["mfu_pct"] for r in iters if r["mfu_pct"] is not None]
    blind = next((r["flops_unknown"] for r in iters if r.get("flops_unknown")), None)
    if not iters:
        return {"tflops_per_gpu": None, "mfu_pct": None,
                "why": "no ProfilerStep: no iteration to divide the FLOPs by"}
    if len(tf) < len(iters):
        return {"tflops_per_gpu": None, "mfu_pct": None, "why": (
            f"{len(iters) - len(tf)} of {len(iters)} rank-iteration(s) have no FLOPs: "
            + (blind or "no modelled call in a step has FLOPs (record_shapes off?)"))}
    why = (None if len(mfu) == len(tf) else
           "the device's peak is unknown: set --peak-tflops" if not model.peak_tflops else
           "above 100 % of the peak for some iteration: the peak (--peak-tflops) or the "
           "recorded shapes are wrong")
    return {"tflops_per_gpu": float(np.mean(tf)),
            "mfu_pct": float(np.mean(mfu)) if why is None else None, "why": why}
