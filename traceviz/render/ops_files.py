"""The files of the op model (``traceviz ops``, and the HTML page's op section): its
tables, a roofline and a module figure, the console summary and the notes on what it
could not model."""
from __future__ import annotations

from functools import partial

import pyarrow as pa

from ..analysis.devices import device_of
from ..analysis.ops_summary import OpModel, share, trace_mfu
from ..table.io import write_parquet
from .figures import Figure
from .ops_figures import modules, roofline
from ..table.result import Result


def _pct(x: float | None) -> str:
    """A share with three significant digits (0.0123 %, never a bare 0.0 %); n/a."""
    if x is None:
        return "n/a"
    return f"{x:.1f} %" if x >= 10 else f"{x:.3g} %"


def header_lines(model: OpModel) -> list[str]:
    """What the op model is (its ranks, device, calls, coverage), without its FLOP
    rates."""
    total = model.total_ns
    return [f"op model of {len(model.ranks)} rank(s) on {model.device or 'an unknown device'}"
            f" (peak {model.peak_tflops if model.peak_tflops else 'n/a'} TFLOP/s BF16): "
            f"{model.calls.num_rows} modelled calls",
            f"  GPU time of compute / memory kernels: modelled "
            f"{_pct(share(model.modelled_ns, total))}, modelled op without shapes "
            f"{_pct(share(model.shapes_missing_ns, total))}, no model "
            f"{_pct(share(model.unmodelled_ns, total))}"]


def ops_result(model: OpModel) -> Result:
    """``model`` as files: its tables, a roofline and a module figure, and the console
    summary (:func:`header_lines`, then its FLOP rates); ``value``: the model."""
    calls, shapes, iters = model.calls, model.by_shape, model.iterations
    device, peak, total = model.device, model.peak_tflops, model.total_ns
    dev = device_of(device)
    lines = header_lines(model)
    mfu = trace_mfu(model)  # the report's and the page's, with the same reason
    if mfu["tflops_per_gpu"] is not None:
        lines.append(f"  from the trace's own FLOPs: {mfu['tflops_per_gpu']:.4g} TFLOP/s per "
                     f"GPU, MFU {_pct(mfu['mfu_pct'])} (mean over {iters.num_rows} "
                     "rank-iteration(s); recompute left out)"
                     + (f"; MFU n/a: {mfu['why']}" if mfu["why"] else ""))
    else:
        lines.append(f"  from the trace's own FLOPs: n/a ({mfu['why']})")
    for r in shapes.slice(0, 5).to_pylist() if shapes.num_rows else []:
        of = (f"{_pct(r['pct_peak_flops'])} of peak FLOP/s" if r["pct_peak_flops"] is not None
              else f"{_pct(r['pct_peak_bw'])} of peak bandwidth" if r["pct_peak_bw"] is not None
              else "% of peak n/a (no shapes recorded, or no known peak)")
        lines.append(f"  {r['gpu_ns'] / 1e6:9.3f} ms  {r['calls']:5d} x {r['op']} "
                     f"{r['input_dims'] or ''} {r['dtype'] or ''} {r['phase'] or ''}: {of}")
    result = Result(
        tables=model.tables(),
        figures={"ops_roofline.png": Figure(roofline, shapes, _roofs(shapes, dev, peak),
                                            dev.tbps if dev else None, device),
                 "ops_by_module.png": Figure(modules, model.by_module)},
        lines=lines, value=model)
    result.exports["ops_calls.parquet"] = partial(write_parquet, calls)
    if model.faster_than_peak:
        result.notes.append(f"{model.faster_than_peak} call(s) ran faster than the device's "
                            "peak for their data type: their % of peak is left out (n/a); the "
                            "peak (set --peak-tflops) or their recorded shapes are wrong")
    if model.above_full_mfu:
        result.notes.append(f"{model.above_full_mfu} rank-iteration(s) would exceed 100 % MFU "
                            f"against the peak of {peak} TFLOP/s: their MFU is left out "
                            "(n/a); the peak (set --peak-tflops) or their recorded shapes "
                            "are wrong")
    if total == 0:
        result.notes.append("no compute or memory kernel with a launching CPU call")
    blind = [r for r in iters.to_pylist() if r.get("flops_unknown")] if iters.num_rows else []
    if blind:
        result.notes.append(f"{len(blind)} rank-iteration(s) have no FLOPs (n/a): "
                            f"{blind[0]['flops_unknown']} (rank {blind[0]['rank']}, "
                            f"iteration {blind[0]['iteration']})")
    return result


def _roofs(shapes: pa.Table, dev, peak: float | None) -> dict[str, float]:
    """Compute roof per data type the op shapes use (BF16: ``peak``, which the user may
    have set)."""
    used = set(shapes["dtype"].to_pylist()) if shapes.num_rows else set()
    roofs = {d: dev.peak(d) for d in used if d and dev and dev.peak(d)}
    if peak and ("bf16" in used or not roofs):
        roofs["bf16"] = peak
    return roofs
