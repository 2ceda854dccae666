"""``traceviz demo``: synthesize a small Megatron-like job and run every command on it
(above the commands, like the CLI: it calls them in the order a user would).

The job (tp2 pp4 dp2, 8 micro-batches, clocks skewed per node, the GPU of rank 5 1.3x
slower than the others, the host synchronizing as Megatron's defaults do) is written to
``OUTDIR/job``, its tables (and the aggregate outputs) to ``OUTDIR/tables``; the other
analyses write beside them. Nothing is read from the network.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

from .analysis.ops_summary import trace_mfu
from .analysis.run_config import training_flops_per_token
from .commands import aggregate, breakdown, critical_path, diagnose, html, ops, pipeline, report
from .ingest import batch
from .job import Job
from .table.result import Result, write
from .synth import SynthConfig, synthesize

DEMO = SynthConfig(tp=2, pp=4, dp=2, microbatches=8, layers=8, with_stack=False,
                   skew_us=250.0, gpus_per_node=8, straggler_rank=5, straggler_factor=1.3,
                   p2p_sync=True, loss_sync=True)
# what a user would pass: the synthetic model's size (12 h^2 parameters per transformer
# layer), its batch and sequence length; the peak comes from the traces' device (H100)
DEMO_FACTS: dict[str, Any] = {"model": f"demo-{12 * DEMO.layers * DEMO.hidden ** 2 / 1e9:.1f}B",
              "global_batch_size": DEMO.microbatches * DEMO.dp * DEMO.micro_batch_size,
              "seq_len": DEMO.seq_len,
              "flops_per_token": training_flops_per_token(12 * DEMO.layers * DEMO.hidden ** 2)}


def run(outdir: str | os.PathLike, echo: Callable[[str], None] = print) -> Result:
    """Synthesize the demo job and run batch (with CPU tables), aggregate, diagnose,
    breakdown, report, pipeline, the critical path, the op model and the HTML page on it,
    each step's files written as it goes (``echo`` says what each found); the result's
    ``lines`` say where each step wrote."""
    out = Path(outdir)
    job_dir = out / "job"
    steps: dict[str, Path] = {}
    start = time.perf_counter()
    synthesize(DEMO, job_dir)
    steps["synthesized job (16 ranks)"] = job_dir
    echo(f"synthesized a 16-rank job (tp2 pp4 dp2, 8 micro-batches, rank {DEMO.straggler_rank}"
         f"'s GPU {DEMO.straggler_factor}x slower) in {job_dir}")
    tables = out / "tables"
    outcomes = batch.run(job_dir, tables, jobs=min(2, os.cpu_count() or 1), quiet=True, cpu=True)
    steps["parsed tables"] = tables
    echo(f"batch: {sum(o.status == 'parsed' for o in outcomes)} ranks parsed -> {tables}")
    # every command after the parse asks this one job (its tables parsed above)
    job = Job.of(job_dir, tables=tables, quiet=True)
    agg = aggregate.run(job)
    folder = job.folder  # the one profiled iteration's tables
    written = write(agg, folder)
    steps["aggregate (micro-batches, clocks, figures)"] = folder
    echo(f"aggregate: {len(written)} tables and figures -> {folder}")
    diag = diagnose.run(job)
    write(diag, out / "diagnose")
    steps["diagnosis (who waits for whom, ledger, stragglers)"] = out / "diagnose"
    echo(f"diagnose: -> {out / 'diagnose'}")
    for line in diag.lines:
        echo(f"  {line}")
    brk = breakdown.run(job)
    written = write(brk, out / "breakdown")
    steps["breakdown (HTA-style tables and figures)"] = out / "breakdown"
    echo(f"breakdown: {len(written)} files -> {out / 'breakdown'}")
    echo(brk.lines[0])
    rep = report.run(job, output=str(out / "report" / "report.txt"), **DEMO_FACTS)
    write(rep, ".")
    steps["report (throughput, bus bandwidth, stragglers)"] = rep.value.text
    mean, mfu = (rep.value.report["throughput"][k] for k in ("mean", "mfu"))
    echo(f"report: {mean['time_ms']:.1f} ms per iteration, {mean['tokens_per_s']:,.0f} "
         f"tokens/s, {mfu['tflops_per_gpu']:.0f} TFLOP/s per GPU, MFU {mfu['mfu_pct']:.1f} "
         f"% (from the {mfu['source']}) -> {rep.value.text} (+ .json)")
    pipe = pipeline.run(job)
    write(pipe, out / "pipeline")
    steps["pipeline (measured vs ideal 1F1B)"] = out / "pipeline"
    echo(f"pipeline: {pipe.lines[0]}")
    path = critical_path.run(job, what_if=("COMM:TP=0.5",))
    write(path, out / "critical-path")
    steps["critical path (across ranks, what-if)"] = out / "critical-path"
    echo(f"critical path: {path.lines[0]}")
    model = ops.run(job)
    write(model, out / "ops")
    steps["op model (FLOPs, roofline, modules)"] = out / "ops"
    mfu = trace_mfu(job.ops())  # what the op model's summary says, typed
    echo(f"ops: the traced ops' own FLOPs give {mfu['tflops_per_gpu']:.1f} TFLOP/s per GPU"
         f" (MFU {mfu['mfu_pct']:.1f} % from them; the report's MFU is the model's, above)")
    page = out / "traceviz_report.html"
    write(html.run(job, page, title="traceviz demo job", **DEMO_FACTS), ".")
    steps["HTML report (open in a browser)"] = page
    echo(f"html: {page}")
    echo(f"done in {time.perf_counter() - start:.1f} s")
    return Result(lines=["", "where to look:"] + [f"  {what}: {path}"
                                                  for what, path in steps.items()],
                  value=steps)
