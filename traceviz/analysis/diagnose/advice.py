"""Advice: what to change, ranked by the iteration time it saves, each saving predicted by
a what-if (:mod:`..critical_path.what_if`) of the job's own trace.

Findings (each from the diagnosis, with the evidence it rests on) and their what-if:

* a **straggler** (:mod:`.stragglers`): drain or replace its node / GPU (no option fixes
  a slow GPU); ``straggler:R=fix`` (its compute at its peers' speed, re-timed);
* a large **pipeline bubble** (the ledger's bubble >= 5 % of the iteration): more
  micro-batches per iteration (``--global-batch-size`` / ``--micro-batch-size``;
  ``microbatches=2M``, the saving per the current iteration's samples:
  T(M) - T(2M) / 2) and, without interleaving, ``--num-layers-per-virtual-pipeline-stage``
  (``vpp=2``);
* exposed **data-parallel** communication (gradient sync + parameter gather >= 2 %):
  ``--overlap-grad-reduce`` / ``--overlap-param-gather`` with
  ``--use-distributed-optimizer``; ``overlap=DP`` (EDP too: an upper bound);
* exposed **tensor-parallel** communication (>= 2 %): ``--tp-comm-overlap`` with
  ``--sequence-parallel``; ``overlap=TP``;
* exposed **expert-parallel** communication (>= 2 %):
  ``--overlap-moe-expert-parallel-comm``; ``overlap=EP``;
* exposed **pipeline** transfers (>= 2 %): the interleaved schedule's
  ``--overlap-p2p-communication``; ``overlap=PP``;
* exposed **context-parallel** communication (>= 2 %): Transformer Engine's context
  parallelism overlaps its ring (``--cp-comm-type p2p``); ``overlap=CP``;
* **CPU / launch bound** (>= 5 %): CUDA graphs (``--cuda-graph-impl``), fused kernels;
  ``cpu=0.5``.

``saving_ns`` = the iteration now - the predicted one (per the current iteration's
samples for more micro-batches); null, with the reason in ``evidence``, where the
what-if cannot be evaluated (no CPU tables: no graph to re-time). Order: the stragglers
first (a slow GPU is a fault to fix whatever else is tuned; replacing it changes nothing
else), by saving; then the configuration changes by saving; the unpredicted last.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...errors import TraceVizError, UsageError
from ..critical_path import what_if as W
from .diagnosis import Diagnosis

ADVICE_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("finding", pa.string()), ("action", pa.string()),
    ("saving_ns", pa.int64()), ("predicted_iteration_ns", pa.int64()),
    ("saving_pct", pa.float64()), ("evidence", pa.string()), ("what_if", pa.string()),
    ("model", pa.string())])
BUBBLE_PCT, COMM_PCT, CPU_PCT = 5.0, 2.0, 5.0  # shares of the iteration that get advice
OVERLAP = {  # group: (parts of the ledger, what to turn on)
    "DP": (("grad_sync", "transfer_dp", "transfer_edp"),
           "--overlap-grad-reduce and --overlap-param-gather (with "
           "--use-distributed-optimizer): reduce gradients bucket by bucket during the "
           "backward, gather parameters during the forward"),
    "TP": (("transfer_tp", "transfer_etp"), "--tp-comm-overlap (with --sequence-parallel): "
           "split the GEMMs and overlap their all-gathers / reduce-scatters"),
    "EP": (("transfer_ep",), "--overlap-moe-expert-parallel-comm: overlap the MoE "
           "dispatch / combine all-to-alls with compute"),
    "PP": (("transfer_pp",), "the interleaved schedule with --overlap-p2p-communication: "
           "overlap the pipeline sends / receives with compute"),
    "CP": (("transfer_cp",), "context parallelism that overlaps its ring exchange with "
           "attention (--cp-comm-type p2p)"),
}


@dataclass
class Finding:
    """One opportunity: what the trace shows, what to change, the what-if predicting it."""

    finding: str
    action: str
    what_if: str
    evidence: str
    per_samples: int = 0  # > 0: the what-if changes the samples per iteration by this x


def findings(diag: Diagnosis) -> list[Finding]:
    """The opportunities the diagnosis shows (see the module doc)."""
    out: list[Finding] = []
    places = {r["rank"]: r for r in diag.speed.table.to_pylist()}
    for s in diag.stragglers.to_pylist()[:3]:
        where = ", ".join(x for x in (f"node {s['node']}" if s["node"] is not None else "",
                                      f"GPU {s['local_gpu']}" if s["local_gpu"] is not None
                                      else "") if x)
        out.append(Finding(
            f"rank {s['rank']} ({where or 'node n/a'}) runs the same kernels "
            f"{s['slowdown']:.2f}x slower than its {s['peers']} peers",
            f"drain or replace {where or 'the GPU of rank ' + str(s['rank'])} (rank "
            f"{s['rank']}): no configuration option fixes a slow GPU",
            f"straggler:{s['rank']}=fix",
            f"{s['units_slower']} of {s['units']} kernels per micro-batch slower (sign test "
            f"p = {s['p_value']:.1e}); {s['excess_ns'] / 1e6:.2f} ms more compute per "
            f"iteration; others wait {places[s['rank']]['waited_on_ns'] / 1e6:.2f} ms for "
            "it"))
    if not diag.totals.num_rows:
        return out
    t = diag.totals.to_pylist()[0]  # the first profiled iteration (the tables' shares)
    pct = {k[:-4]: v for k, v in t.items() if k.endswith("_pct") and v is not None}
    if pct.get("bubble", 0) >= BUBBLE_PCT and diag.pipelines:
        pp = max(len(g) for g in diag.pipelines)
        out.append(Finding(
            f"{pct['bubble']:.1f} % of the iteration is pipeline bubble (pp {pp})",
            "more micro-batches per iteration: raise --global-batch-size or lower "
            "--micro-batch-size (the bubble is about (pp - 1) / (m + pp - 1) of the "
            "schedule)", "microbatches=x2",
            f"ledger: bubble {t['bubble_ns'] / 1e6:.2f} ms per rank and iteration", 2))
        out.append(Finding(
            f"{pct['bubble']:.1f} % of the iteration is pipeline bubble (pp {pp})",
            "interleave the stages: --num-layers-per-virtual-pipeline-stage so that each "
            "rank holds 2 model chunks", "vpp=x2",
            f"ledger: bubble {t['bubble_ns'] / 1e6:.2f} ms per rank and iteration"))
    for grp, (parts, action) in OVERLAP.items():
        share = sum(pct.get(p, 0.0) for p in parts)
        if share >= COMM_PCT:
            out.append(Finding(
                f"{share:.1f} % of the iteration is exposed {grp} communication",
                action, f"overlap={grp}",
                "ledger: " + ", ".join(f"{p} {t[f'{p}_ns'] / 1e6:.2f} ms" for p in parts
                                       if t.get(f"{p}_ns")) + " per rank and iteration "
                "(the saving assumes all of it hidden: an upper bound)"))
    if pct.get("cpu_bound", 0) >= CPU_PCT:
        out.append(Finding(
            f"{pct['cpu_bound']:.1f} % of the iteration the GPU waits for the CPU to "
            "launch", "CUDA graphs (--cuda-graph-impl transformer_engine or local) and "
            "fused kernels: fewer launches", "cpu=0.5",
            f"ledger: cpu_bound {t['cpu_bound_ns'] / 1e6:.2f} ms per rank and iteration"))
    return out


def advise(diag: Diagnosis, ctx: W.Context | None, why: str = "") -> pa.Table:
    """``advice``: the findings ranked by the saving their what-if predicts
    (:data:`ADVICE_SCHEMA`); without a graph to re-time (``ctx`` None: ``why``) the
    savings are null."""
    rows: list[dict[str, Any]] = []
    base = ctx.baseline_ns if ctx is not None else 0
    for f in findings(diag):
        spec, model, predicted, saving, evidence = f.what_if, None, None, None, f.evidence
        if ctx is not None:
            try:
                spec = _concrete(spec, ctx)
                out = W.evaluate(ctx, [spec])
                model, predicted = out.model, out.iteration_ns
                saving = base - (predicted // f.per_samples if f.per_samples else predicted)
                if f.per_samples:
                    evidence += (f"; the predicted iteration holds {f.per_samples}x the "
                                 "samples: the saving is per the current iteration's")
            except (TraceVizError, UsageError) as exc:
                evidence += f"; not predicted: {exc}"
        else:
            evidence += f"; not predicted: {why}"
        rows.append({"finding": f.finding, "action": f.action, "saving_ns": saving,
                     "predicted_iteration_ns": predicted,
                     "saving_pct": 100.0 * saving / base if saving is not None and base
                     else None, "evidence": evidence, "what_if": spec, "model": model})
    # a slow GPU is a fault: first, whatever its saving (replacing it changes nothing
    # else); then the configuration changes by saving, the unpredicted last
    rows.sort(key=lambda r: (not r["what_if"].startswith("straggler"),
                             r["saving_ns"] is None, -(r["saving_ns"] or 0)))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return pa.Table.from_pylist(rows, schema=ADVICE_SCHEMA)


def _concrete(spec: str, ctx: W.Context) -> str:
    """A what-if with its ``x2`` resolved against the job (micro-batches, chunks)."""
    if not spec.endswith("=x2"):
        return spec
    views = ctx.pipelines
    if not views:
        raise TraceVizError("no pipeline group with every stage's micro-batch steps")
    key = spec.split("=")[0]
    now = views[0].microbatches if key == "microbatches" else views[0].vpp
    return f"{key}={2 * now}"
