"""Advice: what to change, ranked by the iteration time it saves, each saving predicted by
a what-if (:mod:`..critical_path.what_if`) of the job's own trace.

Findings (each from the diagnosis, with the evidence it rests on) and their what-if.
A rank's **extra work** (:mod:`.extra_work`: a compute kernel no rank doing its work
runs): find and remove it; ``kernel@R:NAME=0`` (the kernel removed on that rank).

Faults (hardware to fix, no option helps):

* a **straggler** (:mod:`.stragglers`): drain or replace its node / GPU;
  ``straggler:R=fix`` (its compute at its peers' speed, re-timed);
* a **slow link** (:mod:`.network`): a group far below the bus bandwidth of the same
  kind of group elsewhere: check the network of its nodes;
  ``link:GROUP:R1,R2,...=F`` (its transfers at its peers' bandwidth: F = its ratio;
  ``link:GROUP@R=F`` for a group of more than eight ranks: the group of rank R).

Configuration changes (Megatron-LM's arguments below; for other frameworks their own
options or plain words: :mod:`.advice_terms`):

* **stage imbalance** (:mod:`.stages`: the heaviest stage >= 1.1x the median one): the
  layer split that evens the stages (``--decoder-first-pipeline-num-layers``,
  ``--decoder-last-pipeline-num-layers``, ``--account-for-embedding-in-pipeline-split``,
  ``--account-for-loss-in-pipeline-split``); ``stage:S=F + ...`` (each stage's compute
  times its predicted / its measured compute per micro-batch) ``+ stagecomm:S=L`` (the
  communication its layers carry, TP within them and their gradients' DP, times its
  new / its old layers);
* a large **pipeline bubble** (the ledger's bubble >= 5 % of the iteration): more
  micro-batches per iteration (``--global-batch-size`` / ``--micro-batch-size``;
  ``microbatches=2M``, the saving per the current iteration's samples:
  T(M) - T(2M) / 2) and, where every stage holds enough layers, interleaving
  (``--num-layers-per-virtual-pipeline-stage``; ``vpp=2V``: each stage's layers must
  divide into 2V chunks);
* exposed **data-parallel** communication (gradient sync + parameter gather >= 2 %):
  what of ``--overlap-grad-reduce``, ``--use-distributed-optimizer`` and
  ``--overlap-param-gather`` the trace does not show on (:class:`DataParallel`: DP calls
  during the backward, reduce-scatters / all-gathers, gathers during the forward); where
  all is on, what tunes it (bucket sizes), conditional; ``overlap=DP`` (EDP too: an
  upper bound);
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
what-if cannot be evaluated (no CPU tables: no graph to re-time).

**Order** (``standing``): ``ranked`` advice by saving, the largest first; a fault is
ranked only when fixing it saves at least :data:`FAULT_PCT` % of the iteration, else it
is ``minor`` (listed after, with its saving); ``conditional`` advice needs what the
trace does not show (interleaving when the layers per stage are unknown: give
``--num-layers``; a stage imbalance no whole-layer split evens out: the saving of
perfectly even stages, an upper bound) and comes after; a change predicted to save
nothing (``no gain``: its what-if's iteration is no shorter, e.g. a layer split that
would load a stage holding a slow GPU) is listed for what was tried; ``unpredicted`` (no
saving) last.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import TraceVizError, UsageError
from ..table.records import records
from .advice_terms import Terms, terms_for
from .critical_path import what_if as W
from .diagnose.diagnosis import Diagnosis
from .diagnose.network import slow_groups
from .diagnose.stages import best_split
from .diagnose.stragglers import Straggler
from .diagnose.summary import Place

ADVICE_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("standing", pa.string()), ("kind", pa.string()),
    ("finding", pa.string()), ("action", pa.string()),
    ("saving_ns", pa.int64()), ("predicted_iteration_ns", pa.int64()),
    ("saving_pct", pa.float64()), ("evidence", pa.string()), ("what_if", pa.string()),
    ("model", pa.string()), ("target_rank", pa.int32()), ("bound", pa.string()),
    ("same_as", pa.string())])
STANDINGS = ("ranked", "minor", "conditional", "no gain", "unpredicted")
BUBBLE_PCT, COMM_PCT, CPU_PCT = 5.0, 2.0, 5.0  # shares of the iteration that get advice
FAULT_PCT = 1.0  # a fault is ranked among the changes when fixing it saves this much
TOP_FAULTS = 5   # stragglers / slow links turned into advice, the worst first
LISTED_RANKS = 8  # a larger slow group's what-if names it by its first rank (link:G@R)
OVERLAP = {  # group: the parts of the ledger (what overlaps them: the framework's terms)
    "DP": ("grad_sync", "transfer_dp", "transfer_edp"),
    "TP": ("transfer_tp", "transfer_etp"),
    "EP": ("transfer_ep",),
    "PP": ("transfer_pp",),
    "CP": ("transfer_cp",),
}


# the critical path's categories (critical_path.job.CATEGORIES) in words; "comm: G" is
# "G communication"
BOUND_WORDS = {"compute": "GPU compute", "memory": "memory copies", "cpu": "CPU work",
               "launch": "kernel launches", "kernel_kernel": "kernels queued on the GPU",
               "wait": "waits", "wait: other rank": "waits for other ranks",
               "wait: earlier work": "waits for earlier work"}


@dataclass
class Finding:
    """One opportunity: what the trace shows, what to change, the what-if predicting it
    (several specs joined by `` + `` are predicted together)."""

    finding: str
    action: str
    what_if: str
    evidence: str
    per_samples: int = 0  # > 0: the what-if changes the samples per iteration by this x
    kind: str = "change"  # "fault" (hardware) or "change" (configuration)
    conditional: bool = False  # needs what the trace does not show (see the module doc)
    target_rank: int | None = None  # the one rank it is about (a straggler)


@dataclass(frozen=True)
class Advice:
    """One row of the advice (:data:`ADVICE_SCHEMA`): ``rank`` its place (1 first),
    ``standing`` one of :data:`STANDINGS`, ``saving_ns`` / ``saving_pct`` the re-timed
    saving per iteration (None: not predicted), ``what_if`` the spec predicting it,
    ``target_rank`` the rank a straggler's advice is about (None otherwise)."""

    rank: int
    standing: str
    kind: str
    finding: str
    action: str
    saving_ns: int | None
    predicted_iteration_ns: int | None
    saving_pct: float | None
    evidence: str
    what_if: str
    model: str | None
    target_rank: int | None
    bound: str | None = None    # what holds the predicted iteration (its re-timed path)
    same_as: str | None = None  # the other advice predicted to save exactly as much


@dataclass(frozen=True)
class DataParallel:
    """What the trace shows of data-parallel communication (from ``comm_calls``): the
    gradients reduced during the backward (overlapped: Megatron's
    ``--overlap-grad-reduce``, PyTorch DDP's buckets), reduce-scattered and parameters
    all-gathered (a distributed optimizer: ``--use-distributed-optimizer``, FSDP), the
    gathers during the forward (``--overlap-param-gather``)."""

    grads_in_backward: bool
    sharded: bool
    params_in_forward: bool
    evidence: str

    @staticmethod
    def of(calls: pa.Table) -> DataParallel:
        """From ``comm_calls`` (every rank's calls): its DP / EDP calls counted by kind
        and phase (a table of a few rows, whatever the job's size)."""
        import pyarrow.compute as pc

        dp = calls.filter(pc.is_in(calls["group"], pa.array(["DP", "EDP"])))
        kinds = {(str(r["kind"]), str(r["phase"])): r["count_all"] for r in
                 dp.group_by(["kind", "phase"]).aggregate([([], "count_all")]).to_pylist()}
        low = [(k.lower().replace("_", ""), ph) for k, ph in kinds]
        return DataParallel(
            grads_in_backward=any(ph == "BWD" for _, ph in low),
            sharded=any("reducescatter" in k or "allgather" in k for k, _ in low),
            params_in_forward=any("allgather" in k and ph == "FWD" for k, ph in low),
            evidence="DP calls: " + (", ".join(f"{n} {k} in {ph}" for (k, ph), n in
                                             sorted(kinds.items())) or "none"))

    def action(self, terms: Terms) -> tuple[str, bool]:
        """What to turn on for exposed DP communication (in the framework's ``terms``),
        and whether all of it is on already (then: what tunes it)."""
        grads, sharded, params = terms.dp_off
        off = [text for text, on in ((grads, self.grads_in_backward),
                                     (sharded, self.sharded),
                                     (params, self.params_in_forward)) if not on]
        if self.grads_in_backward and (self.params_in_forward or not self.sharded):
            on = ("gradients are already reduced during the backward"
                  + (" and parameters gathered during the forward" if self.params_in_forward
                     else ""))
            return f"{on}, yet this much stays exposed: {terms.dp_tune}", True
        return "turn on " + "; ".join(off), False


@dataclass(frozen=True)
class TensorParallel:
    """What the trace shows of tensor-parallel communication (from ``comm_calls``):
    sequence parallelism (the TP activations reduce-scattered and all-gathered, never
    all-reduced in the forward: Megatron's ``--sequence-parallel``) and TP communication
    overlap (Transformer Engine's userbuffers kernels: ``--tp-comm-overlap``)."""

    sequence_parallel: bool
    overlapped: bool
    evidence: str

    @staticmethod
    def of(calls: pa.Table) -> TensorParallel:
        """From ``comm_calls``: its TP calls counted by kind and phase, and their names."""
        import pyarrow.compute as pc

        tp = calls.filter(pc.is_in(calls["group"], pa.array(["TP", "ETP"])))
        kinds = {(str(r["kind"]), str(r["phase"])): r["count_all"] for r in
                 tp.group_by(["kind", "phase"]).aggregate([([], "count_all")]).to_pylist()}
        low = {(k.lower().replace("_", ""), ph) for k, ph in kinds}
        names = tp["name"].unique().to_pylist() if tp.num_rows else []
        return TensorParallel(
            sequence_parallel=any(k in ("reducescatter", "allgather") and ph == "FWD"
                                  for k, ph in low)
            and not any(k == "allreduce" and ph == "FWD" for k, ph in low),
            overlapped=any("userbuffers" in str(n).lower() for n in names),
            evidence="TP calls: " + (", ".join(f"{n} {k} in {ph}" for (k, ph), n in
                                             sorted(kinds.items())) or "none"))


def straggler_findings(diag: Diagnosis) -> list[Finding]:
    """A fault per straggler (the worst :data:`TOP_FAULTS`)."""
    out = []
    for s in records(Straggler, diag.stragglers)[:TOP_FAULTS]:
        where = Place(s.node, s.local_gpu).text()
        out.append(Finding(
            f"rank {s.rank} ({where or 'node n/a'}) runs the same kernels "
            f"{s.slowdown:.2f}x slower than its {s.peers} peers",
            f"drain or replace {where or 'the GPU of rank ' + str(s.rank)} (rank "
            f"{s.rank}): no configuration option fixes a slow GPU",
            f"straggler:{s.rank}=fix",
            f"{s.units_slower} of {s.units} kernels per micro-batch slower (sign test "
            f"p = {s.p_value:.1e}); robust z-score {s.z_score:.1f} against every "
            f"rank's slowdown; {s.excess_ns / 1e6:.2f} ms more compute per iteration; "
            f"others wait {s.waited_on_ns / 1e6:.2f} ms for it",
            kind="fault", target_rank=s.rank))
    return out


def extra_findings(diag: Diagnosis) -> list[Finding]:
    """A change per rank's extra work (:mod:`.diagnose.extra_work`, the costliest
    :data:`TOP_FAULTS`): the kernel removed on that rank, re-timed."""
    return [Finding(
        e.text(),
        f"find what launches {e.name} on rank {e.rank} alone (a debugging or metrics "
        "kernel, a hook of its own) and remove it, or run it less often or off the "
        "critical path",
        f"kernel@{e.rank}:{re.sub(r'[][=*?]', '?', e.name)}=0",
        f"{e.launches:g} launches, {e.ns / 1e6:.2f} ms per iteration on rank {e.rank}; "
        f"compared with {e.compared}, which never run it", target_rank=e.rank)
        for e in diag.extra[:TOP_FAULTS]]


def network_findings(slow: list[dict]) -> list[Finding]:
    """A fault per kind of group slow as a whole against another kind on the same link
    (:mod:`.diagnose.network`): one finding for the kind's network, its what-if every
    transfer of the kind at the other's bandwidth (``COMM:GROUP=F``, F the median
    ratio)."""
    kinds: dict[tuple, list[dict]] = {}
    for g in slow:
        kinds.setdefault((g["group"], g["link"], g["against"]), []).append(g)
    out = []
    for (group, link, against), rows in kinds.items():
        ratio = float(np.median([g["ratio"] for g in rows]))
        bw = float(np.median([g["busbw_gbps"] for g in rows]))
        ref = float(np.median([g["peers_busbw_gbps"] for g in rows]))
        n = len({tuple(g["ranks"]) for g in rows})
        out.append(Finding(
            f"every {group} group ({n}) reaches about {bw:.3g} GB/s bus bandwidth "
            f"({link}), {ratio:.2f}x the {ref:.3g} GB/s that {against} reaches at "
            f"payloads no larger: a slow {group} network",
            ("check the links inside the nodes (NVLink / NVSwitch, NCCL's choice of "
             "transport: P2P or SHM, NCCL_P2P_LEVEL)" if link == "intra-node" else
             "check the network between the nodes (NICs, switches, NCCL's choice of "
             "transport and its NCCL_IB_* / NCCL_SOCKET_* settings)")
            + f" for the {group} traffic: no configuration option fixes a slow link",
            f"COMM:{group}={ratio:.4g}",
            f"{sum(g['kernels'] for g in rows)} kernels of >= 1 MiB over {n} {group} "
            f"group(s); compared with {against} (every {group} group alike: its own kind "
            "says nothing)", kind="fault"))
    return out


def link_findings(diag: Diagnosis) -> list[Finding]:
    """A fault per slow group (the worst :data:`TOP_FAULTS`), a kind slow as a whole
    against another on the same link one fault (:func:`network_findings`)."""
    out = []
    gpn = {r["rank"]: r["node"] for r in diag.speed.table.to_pylist()}
    slow = slow_groups(diag.links)
    whole = [g for g in slow if g["ratio"] is not None and g["against"] not in (
        "its kind", "the link's nominal rate")]
    out += network_findings(whole)
    for g in [g for g in slow if g not in whole][:max(TOP_FAULTS - len(out), 0)]:
        ranks = g["ranks"]
        nodes = sorted({gpn[r] for r in ranks if gpn.get(r) is not None})
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        kind = "rank pair" if g["group"] == "PP" and len(ranks) == 2 else "group"
        against = (f"{g['ratio']:.2f}x the {g['peers_busbw_gbps']:.0f} GB/s of the "
                   f"{g['peers']} other {g['group']} {kind}s of its kind"
                   if g["ratio"] is not None and g["against"] == "its kind" else
                   f"{g['ratio']:.2f}x the {g['peers_busbw_gbps']:.0f} GB/s that "
                   f"{g['against']} reaches at payloads no larger"
                   if g["ratio"] is not None else
                   f"{g['busbw_gbps'] / g['nominal_gbps']:.2f}x the link's nominal "
                   f"{g['nominal_gbps']:.0f} GB/s")
        where = (f"node {nodes[0]}" if len(nodes) == 1 else
                 "nodes " + ", ".join(map(str, nodes[:8])) + (", ..." if len(nodes) > 8
                                                              else ""))
        factor = g["ratio"] if g["ratio"] is not None else (
            g["busbw_gbps"] / g["nominal_gbps"])
        out.append(Finding(
            f"{g['group']} {kind} [{shown}] reaches {g['busbw_gbps']:.0f} GB/s bus "
            f"bandwidth ({g['collective']}, {g['link']}), {against}: a slow network",
            (f"check the links inside {where} (NVLink / NVSwitch errors and link state, "
             "NCCL's choice of transport: P2P or SHM): no configuration option fixes a "
             "slow link" if g["link"] == "intra-node" else
             f"check the network of {where} (NIC, cable, switch port, NCCL's choice of "
             "transport): no configuration option fixes a slow link"),
            (f"link:{g['group']}:{','.join(map(str, ranks))}" if len(ranks) <= LISTED_RANKS
             else f"link:{g['group']}@{ranks[0]}") + f"={factor:.4g}",
            f"{g['kernels']} {g['collective']} kernels of >= 1 MiB: "
            f"{g['bus_bytes'] / 1e9:.2f} GB of bus bytes in {g['transfer_ns'] / 1e6:.2f} ms "
            "of transfer (after the last member arrived); compared with "
            + ("the groups of the same kind, collective, size, link and payload class"
               if g["against"] == "its kind" else g["against"]
               + (" (every group of its kind alike)" if g["ratio"] is not None else "")),
            kind="fault"))
    return out


def imbalance_findings(diag: Diagnosis, terms: Terms) -> list[Finding]:
    """Stage imbalance (:mod:`.stages`): the split that evens the stages, or the perfect
    balance's upper bound where none does (conditional)."""
    b = diag.balance
    if b is None or not b.heavy:
        return []
    h = b.heaviest
    med = float(np.median(b.compute_ns))
    name = ("last" if h == b.pp - 1 else "first" if h == 0 else f"{h}")
    why = ("the output layer and loss" if h == b.pp - 1 else "the embedding" if h == 0
           else "more layers than the others")
    layers = ", ".join("?" if n is None else str(n) for n in b.layers)
    extra = b.extra_ns[h]
    evidence = ("compute per micro-batch by stage (ms): "
                + ", ".join(f"{c / 1e6:.2f}" for c in b.compute_ns)
                + f"; layers per stage [{layers}] ({b.layers_from})"
                + (f"; a layer {b.layer_ns / 1e6:.2f} ms, stage {h}'s extra "
                   f"{extra / 1e6:.2f} ms" if b.layer_ns is not None and extra is not None
                   else ""))
    finding = (f"stage imbalance: the {name} stage computes {b.compute_ns[h] / 1e6:.2f} ms "
               f"per micro-batch, {b.ratio:.2f}x the median stage's {med / 1e6:.2f} ms"
               + (f" ({why}: {extra / 1e6:.2f} ms beyond its layers)"
                  if extra is not None and extra > 0 and h in (0, b.pp - 1) else ""))
    split = best_split(b)
    if split is not None:
        specs = [f"stage:{s}={new / old:.4g}" for s, (new, old) in
                 enumerate(zip(split.compute_ns, b.compute_ns)) if old > 0
                 and abs(new / old - 1) > 1e-4]
        # the layers' own communication (TP within them, their gradients' DP) moves too
        specs += [f"stagecomm:{s}={new / old:.4g}" for s, (new, old) in
                  enumerate(zip(split.layers, b.layers)) if old and new != old]
        how = terms.split.format(options=split.options)
        return [Finding(
            finding, f"{how} (layers per stage "
            f"[{layers}] -> [{', '.join(map(str, split.layers))}], predicted compute per "
            f"micro-batch (ms) {', '.join(f'{c / 1e6:.2f}' for c in split.compute_ns)})",
            " + ".join(specs), evidence)]
    mean = float(np.mean(b.compute_ns))
    specs = [f"stage:{s}={mean / c:.4g}" for s, c in enumerate(b.compute_ns) if c > 0]
    if b.layers_from == "unknown":
        action = terms.split_unknown
    else:
        action = terms.split_none.format(layers=sum(n for n in b.layers if n is not None),
                                         pp=b.pp)
    return [Finding(finding, action, " + ".join(specs), evidence, conditional=True)]


def vpp_finding(diag: Diagnosis, pct: float, bubble_ns: int, pp: int, terms: Terms
                ) -> list[Finding]:
    """Interleaving, where every stage's layers divide into twice the chunks (see the
    module doc); conditional where the layers are unknown, none where they do not."""
    b = diag.balance
    vpp = b.vpp if b is not None else 1
    finding = f"{pct:.1f} % of the iteration is pipeline bubble (pp {pp})"
    evidence = f"ledger: bubble {bubble_ns / 1e6:.2f} ms per rank and iteration"
    if b is None or b.layers_from == "unknown":
        return [Finding(finding, terms.interleave_unknown, "vpp=x2", evidence,
                        conditional=True)]
    per_stage = [n for n in b.layers if n is not None]
    if min(per_stage, default=0) < 2 * vpp or any(n % (2 * vpp) for n in per_stage):
        return []
    how = terms.interleave.format(per_layer=min(per_stage) // (2 * vpp), chunks=2 * vpp)
    return [Finding(finding, f"{how} (layers per stage [{', '.join(map(str, per_stage))}], "
                    f"{b.layers_from})", "vpp=x2", evidence)]


def findings(diag: Diagnosis) -> list[Finding]:
    """The opportunities the diagnosis shows (see the module doc)."""
    terms = terms_for(diag.framework.name)
    out = (straggler_findings(diag) + extra_findings(diag) + link_findings(diag)
           + imbalance_findings(diag, terms))
    if not diag.totals.num_rows:
        return out
    t = diag.totals.to_pylist()[0]  # the first profiled iteration (the tables' shares)
    pct = {k[:-4]: v for k, v in t.items() if k.endswith("_pct") and v is not None}
    if pct.get("bubble", 0) >= BUBBLE_PCT and diag.pipelines:
        pp = max(len(g) for g in diag.pipelines)
        out.append(Finding(
            f"{pct['bubble']:.1f} % of the iteration is pipeline bubble (pp {pp})",
            terms.more_microbatches, "microbatches=x2",
            f"ledger: bubble {t['bubble_ns'] / 1e6:.2f} ms per rank and iteration", 2))
        out += vpp_finding(diag, pct["bubble"], t["bubble_ns"], pp, terms)
    dp = DataParallel.of(diag.comm_calls)
    tp = TensorParallel.of(diag.comm_calls)
    for grp, parts in OVERLAP.items():
        share = sum(pct.get(p, 0.0) for p in parts)
        if share >= COMM_PCT:
            evidence = ("ledger: " + ", ".join(f"{p} {t[f'{p}_ns'] / 1e6:.2f} ms"
                                              for p in parts if t.get(f"{p}_ns"))
                        + " per rank and iteration (the saving assumes all of it hidden: "
                        "an upper bound)")
            on = False
            if grp == "DP":
                action, on = dp.action(terms)
                evidence += f"; {dp.evidence}"
            elif grp == "TP":
                on = tp.overlapped
                action = (f"TP communication is overlapped already, yet this much stays "
                          f"exposed: {terms.tp_tune}" if on else terms.tp_with_sp
                          if tp.sequence_parallel else terms.overlap[grp])
                evidence += f"; {tp.evidence}"
            else:
                action = terms.overlap[grp]
            out.append(Finding(
                f"{share:.1f} % of the iteration is exposed {grp} communication"
                + (" although overlapped" if on else ""),
                action, f"overlap={grp}", evidence, conditional=on))
    if pct.get("cpu_bound", 0) >= CPU_PCT:
        out.append(Finding(
            f"{pct['cpu_bound']:.1f} % of the iteration the GPU waits for the CPU to "
            "launch", terms.cpu_bound, "cpu=0.5",
            f"ledger: cpu_bound {t['cpu_bound_ns'] / 1e6:.2f} ms per rank and iteration"))
    return out


def standing(f: Finding, saving: int | None, base: int) -> str:
    """Where a finding stands in the order (see the module doc)."""
    if saving is None:
        return "unpredicted"
    if saving <= 0 and f.kind != "fault":
        return "no gain"
    if f.conditional:
        return "conditional"
    if f.kind == "fault" and (not base or 100.0 * saving / base < FAULT_PCT):
        return "minor"
    return "ranked"


def advise(diag: Diagnosis, ctx: W.Context | None, why: str = "") -> pa.Table:
    """``advice``: the findings in the order of the module doc (:data:`ADVICE_SCHEMA`);
    without a graph to re-time (``ctx`` None: ``why``) the savings are null."""
    rows: list[dict[str, Any]] = []
    base = ctx.baseline_ns if ctx is not None else 0  # the re-timed window, measured
    # shares are of the iteration time every command gives (the ledger's job span of the
    # first profiled step, the window re-timed); the path's own window where there is none
    iteration = next((t["job_span_ns"] for t in diag.totals.to_pylist()
                      if t["iteration"] >= 0), None) or base
    for f in findings(diag):
        spec, model, predicted, saving, evidence = f.what_if, None, None, None, f.evidence
        bound = None
        if ctx is not None:
            try:
                specs = [_concrete(x, ctx) for x in spec.split(" + ")]
                spec = " + ".join(specs)
                out = W.evaluate(ctx, specs)
                model, predicted = out.model, out.iteration_ns
                if out.bound is not None:
                    words = (BOUND_WORDS.get(out.bound)
                             or out.bound.removeprefix("comm: ") + " communication")
                    bound = f"{words} ({out.bound_pct:.0f} % of its re-timed path)"
                saving = base - (predicted // f.per_samples if f.per_samples else predicted)
                if f.per_samples:
                    evidence += (f"; the predicted iteration holds {f.per_samples}x the "
                                 "samples: the saving is per the current iteration's")
            except (TraceVizError, UsageError) as exc:
                evidence += f"; not predicted: {exc}"
        else:
            evidence += f"; not predicted: {why}"
        rows.append({"standing": standing(f, saving, iteration), "kind": f.kind,
                     "finding": f.finding, "action": f.action, "saving_ns": saving,
                     "predicted_iteration_ns": predicted,
                     # a share of the iteration, 0 where the what-if gains nothing
                     # (saving_ns then says how much slower it predicts)
                     "saving_pct": max(0.0, 100.0 * saving / iteration)
                     if saving is not None and iteration else None, "evidence": evidence, "what_if": spec, "model": model,
                     "target_rank": f.target_rank, "bound": bound})
    rows.sort(key=lambda r: (STANDINGS.index(r["standing"]), -(r["saving_ns"] or 0)))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    _same_savings(rows)
    return pa.Table.from_pylist(rows, schema=ADVICE_SCHEMA)


def _same_savings(rows: list[dict[str, Any]]) -> None:
    """Mark the re-timed advice predicted to save exactly as much as another (each
    computed on its own: they stop at the same bound, which ``bound`` names)."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["model"] == "re-timed graph" and (r["saving_ns"] or 0) > 0:
            by.setdefault(r["saving_ns"], []).append(r)
    for same in by.values():
        if len(same) > 1:
            for r in same:
                r["same_as"] = ", ".join(str(o["rank"]) for o in same if o is not r)


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


def advice_of(rows: Sequence[Mapping[str, Any]]) -> tuple[Advice, ...]:
    """The advice rows a report keeps (JSON) as typed records (a column an older report
    lacks is None)."""
    return records(Advice, pa.Table.from_pylist(list(rows), schema=ADVICE_SCHEMA))


@dataclass(frozen=True)
class JobDiagnosis:
    """A job's diagnosis with its advice, as ``traceviz diagnose`` writes it: the
    :class:`~.diagnose.diagnosis.Diagnosis` (its ledger, waits and peers as Arrow
    tables), the advice table (None: not asked for) and the ranks left out (one line
    each). :attr:`advice` and :attr:`stragglers` are typed records of those tables;
    :meth:`tables` are the command's tables by file name."""

    diagnosis: Diagnosis
    advice_table: pa.Table | None
    failed: tuple[str, ...] = ()

    @property
    def advice(self) -> tuple[Advice, ...]:
        """The advice, the first to follow first (empty: none, or not asked for)."""
        return () if self.advice_table is None else records(Advice, self.advice_table)

    @property
    def stragglers(self) -> tuple[Straggler, ...]:
        """The stragglers, the worst first."""
        return records(Straggler, self.diagnosis.stragglers)

    def tables(self) -> dict[str, pa.Table]:
        """The tables ``traceviz diagnose`` writes, by file name (without suffix)."""
        d = self.diagnosis
        out = {"comm_calls": d.comm_calls, "ledger": d.ledger,
               "ledger_waits": d.ledger_waits, "ledger_totals": d.totals,
               "stragglers": d.stragglers, "peer_speed": d.speed.table,
               "wait_chain": d.chain, "links": d.links}
        if self.advice_table is not None:
            out["advice"] = self.advice_table
        return out
