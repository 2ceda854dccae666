"""``traceviz ops``: the op-level performance model (:mod:`traceviz.analysis.ops`) of
one trace or of every rank of a job: FLOPs / bytes per call, efficiency per op shape,
what was not modelled, GPU time per module, MFU from the modelled FLOPs; a roofline and
a module figure."""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.devices import device_of
from ..analysis.ops import RankOps, rank_ops
from ..analysis.ops_summary import MICROBATCH_KEYS, concat, grouped, modelled_share, summed
from ..ingest.tables import load_with_cpu, one_rank_with_cpu, tables_folder
from ..render.figures import Figure
from ..render.ops_figures import modules, roofline
from ..table.io import write_parquet
from .result import Result


def _pct(x: float | None) -> str:
    """A share with three significant digits (0.0123 %, never a bare 0.0 %); n/a."""
    if x is None:
        return "n/a"
    return f"{x:.1f} %" if x >= 10 else f"{x:.3g} %"


def _ranks(path: Path, rank: int | None) -> list[tuple[pa.Table, pa.Table]]:
    one = one_rank_with_cpu(path, rank)
    return [one] if one else [(g, c) for _, g, c in load_with_cpu(tables_folder(path,
                                                                               cpu=True))]


def run(path: str | os.PathLike, *, rank: int | None = None,
        peak_tflops: float | None = None) -> Result:
    """The op model of ``path`` (one trace / table, ``--rank`` of a job, or a job)."""
    ranks: list[RankOps] = [rank_ops(g, c, peak_tflops) for g, c in _ranks(Path(path), rank)]
    calls = concat(ranks, "calls")
    not_modelled = concat(ranks, "not_modelled")
    with_model, shapes_missing, none = modelled_share(calls, not_modelled)
    total = with_model + shapes_missing + none
    shapes = grouped(calls)
    missing = (calls.filter(pc.and_(pc.is_null(calls["flops"]), pc.is_null(calls["bytes"])))
               if calls.num_rows else calls)
    unmodelled = _unmodelled(not_modelled, missing, total)
    mods = concat(ranks, "modules")
    mod_table = summed(mods, ["module", "phase", "kind"],
                       int(pc.sum(mods["gpu_ns"]).as_py() or 0)) if mods.num_rows else mods
    iters = concat(ranks, "iterations")
    device = ranks[0].device if ranks else None
    peak = ranks[0].peak_tflops if ranks else None
    dev = device_of(device)
    lines = [f"op model of {len(ranks)} rank(s) on {device or 'an unknown device'} "
             f"(peak {peak if peak else 'n/a'} TFLOP/s BF16): "
             f"{calls.num_rows} modelled calls",
             f"  GPU time of compute / memory kernels: modelled {_pct(_share(with_model, total))}"
             f", modelled op without shapes {_pct(_share(shapes_missing, total))}, "
             f"no model {_pct(_share(none, total))}"]
    header = list(lines)  # what the op model is, without its FLOP rates
    tf = iters["model_tflops"].to_numpy(zero_copy_only=False) if iters.num_rows else None
    if tf is not None and np.isfinite(tf).any():
        mfu = iters["mfu_pct"].to_numpy(zero_copy_only=False)[np.isfinite(tf)]
        known = int(np.isfinite(tf).sum())
        # n/a when some rank-iteration has none: a mean of the others would hide it
        lines.append(f"  from the trace's own FLOPs: {np.nanmean(tf):.4g} TFLOP/s per GPU, "
                     f"MFU {_pct(float(mfu.mean()) if np.isfinite(mfu).all() else None)}"
                     f" (mean over {known} rank-iteration(s); recompute left out)")
    elif not iters.num_rows:
        lines.append("  from the trace's own FLOPs: n/a (no ProfilerStep: no iteration to "
                     "divide them by)")
    else:
        lines.append("  from the trace's own FLOPs: n/a (no modelled call in a step has "
                     "FLOPs)")
    for r in shapes.slice(0, 5).to_pylist() if shapes.num_rows else []:
        of = (f"{_pct(r['pct_peak_flops'])} of peak FLOP/s" if r["pct_peak_flops"] is not None
              else f"{_pct(r['pct_peak_bw'])} of peak bandwidth" if r["pct_peak_bw"] is not None
              else "% of peak n/a (no shapes recorded, or no known peak)")
        lines.append(f"  {r['gpu_ns'] / 1e6:9.3f} ms  {r['calls']:5d} x {r['op']} "
                     f"{r['input_dims'] or ''} {r['dtype'] or ''} {r['phase'] or ''}: {of}")
    result = Result(
        tables={"ops_by_shape": shapes,
                "ops_by_microbatch": grouped(calls, MICROBATCH_KEYS),
                "ops_not_modelled": unmodelled,
                "ops_by_module": mod_table, "ops_iterations": iters},
        figures={"ops_roofline.png": Figure(roofline, shapes, _roofs(shapes, dev, peak),
                                            dev.tbps if dev else None, device),
                 "ops_by_module.png": Figure(modules, mod_table)},
        lines=lines, data={"calls": calls, "iterations": iters, "shapes": shapes,
                           "modelled_ns": with_model, "total_ns": total,
                           "header": header, "peak_tflops": peak})
    result.exports["ops_calls.parquet"] = partial(write_parquet, calls)
    above = (calls.filter(pc.and_(pc.is_valid(calls["tflops"]),
                                  pc.is_null(calls["pct_peak_flops"]))).num_rows
             if calls.num_rows and dev else 0)
    if above:
        result.notes.append(f"{above} call(s) ran faster than the device's peak for their "
                            "data type: their % of peak is left out (n/a); the peak (set "
                            "--peak-tflops) or their recorded shapes are wrong")
    impossible = (iters.filter(pc.and_(pc.is_valid(iters["model_tflops"]),
                                       pc.is_null(iters["mfu_pct"]))).num_rows
                  if iters.num_rows and peak else 0)
    if impossible:
        result.notes.append(f"{impossible} rank-iteration(s) would exceed 100 % MFU against "
                            f"the peak of {peak} TFLOP/s: their MFU is left out (n/a); the "
                            "peak (set --peak-tflops) or their recorded shapes are wrong")
    if total == 0:
        result.notes.append("no compute or memory kernel with a launching CPU call")
    return result


def _roofs(shapes: pa.Table, dev, peak: float | None) -> dict[str, float]:
    """Compute roof per data type the op shapes use (BF16: ``peak``, which the user may
    have set)."""
    used = set(shapes["dtype"].to_pylist()) if shapes.num_rows else set()
    roofs = {d: dev.peak(d) for d in used if d and dev and dev.peak(d)}
    if peak and ("bf16" in used or not roofs):
        roofs["bf16"] = peak
    return roofs


def _unmodelled(not_modelled: pa.Table, missing: pa.Table, total: int) -> pa.Table:
    """GPU ns per (op, why it has no FLOPs / bytes), largest first, with its share."""
    acc: dict[tuple[str, str], int] = {}
    for table, why in ((not_modelled, "no modelled operator"),
                       (missing, "modelled op without shapes")):
        if table.num_rows:
            for op, ns in zip(table["op"].to_pylist(), table["gpu_ns"].to_pylist()):
                acc[(op, why)] = acc.get((op, why), 0) + ns
    items = sorted(acc.items(), key=lambda kv: -kv[1])
    return pa.table({"op": [k[0] for k, _ in items], "why": [k[1] for k, _ in items],
                     "gpu_ns": pa.array([v for _, v in items], pa.int64()),
                     "pct_of_gpu_time": pa.array([_share(v, total) for _, v in items],
                                                 pa.float64())})


def _share(part: int, total: int) -> float | None:
    return 100.0 * part / total if total > 0 else None
