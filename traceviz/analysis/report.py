"""The collectives and throughput report as one JSON-able dict (the text report is
rendered from it by :mod:`traceviz.render.report_text`).

Definitions (all times are GPU kernel times in ns unless named otherwise):

* Throughput per traced iteration: its window on the GPU (:mod:`.iterations`: where the
  GPU ran what the ProfilerStep launched) from the earliest start to the latest end over
  all ranks (clock-synced; without synced clocks the longest rank's own); tokens/s = global batch x sequence length / that time; TFLOP/s per GPU = FLOPs
  per token x tokens / time / the job's GPUs (its world size, not the ranks traced); MFU
  = that / peak, never above 100 % (inputs that give more are reported, not used).
  Without ProfilerSteps the traced GPU window stands in for one iteration.
* Overlap per rank = |COMM ∩ COMP| / |COMM| over the GPU kernels the ProfilerSteps
  launched, whole (interval unions; every kernel without steps): the same kernels as
  the per-group shares below, so a rank has one overlap number.
* Per call on one rank: S (nccl-tests' operation size), algbw = S / kernel time, busbw =
  algbw x factor(collective, group size). Bus bytes = S x factor.
* Per group type, over the kernels the ProfilerSteps launched (whole: a kernel the CPU
  launched inside a step counts even where it runs after the CPU's step ended): share of
  iteration = |group's COMM kernels| / the iterations' windows (the ledger's: step start
  to the later of its end and its last kernel's), summed over ranks; hidden = |group's
  COMM ∩ COMP| / |group's COMM|.
* Cross-rank numbers: see :mod:`.matching`.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa

from ..table.schema import COLLECTIVES, GROUPS
from ..topology.layout import Layout, agreed_world
from .advice import advice_of
from .calls import factors
from .diagnose.summary import from_report
from .matching import Matched, last_to_arrive, match
from .rank_summary import RankSummary
from .report_types import (
    CommShare,
    CrossRank,
    CrossRankGroup,
    Diagnosed,
    IterationThroughput,
    Mfu,
    NetworkRank,
    Overlap,
    OverlapRank,
    Report,
    Throughput,
    TraceMfu,
    Traffic,
)
from .run_config import RunConfig, peak_tflops_of

MS = 1e6
TOP_SLOWEST = 10

# every rank's row of the report's per-rank sections (the text summarizes them at scale)
RANKS_SCHEMA = pa.schema([
    ("rank", pa.int64()), ("pp_stage", pa.int64()),
    ("overlap_pct", pa.float64()), ("comm_ms", pa.float64()), ("comp_ms", pa.float64()),
    ("overlap_ms", pa.float64()), ("operations", pa.int64()), ("bytes", pa.int64()),
    ("bus_bytes", pa.float64()), ("collective_busbw_gbps", pa.float64()),
    ("simple_busbw_gbps", pa.float64())])


def _stats(values: np.ndarray) -> dict:
    """mean / median / p95 / min / max of the finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if not v.size:
        return {k: None for k in ("mean", "median", "p95", "min", "max")}
    return {"mean": float(v.mean()), "median": float(np.median(v)),
            "p95": float(np.percentile(v, 95)), "min": float(v.min()), "max": float(v.max())}


def _pct(part: float | None, whole: float) -> float | None:
    """100 * part / whole; None (n/a) when the part is unknown or the whole is empty."""
    return 100.0 * part / whole if part is not None and whole > 0 else None


class _RankCalls:
    """Every rank's calls concatenated (one row per call per rank)."""

    def __init__(self, summaries: list[RankSummary]) -> None:
        cs = [s.calls for s in summaries]

        def cat(f: str) -> np.ndarray:
            return np.concatenate([getattr(c, f) for c in cs]) if cs else np.zeros(0, np.int64)

        # summary i's calls are rows bounds[i]:bounds[i + 1] (concatenated in order)
        self.bounds = np.cumsum([0] + [len(c) for c in cs])
        self.collective, self.comm_group = cat("collective"), cat("comm_group")
        self.nbytes, self.busy, self.size = cat("nbytes"), cat("busy"), cat("size")
        self.iteration = cat("iteration")
        self.factor = factors(self.collective, self.size)
        known = self.nbytes >= 0
        self.bus_bytes = np.where(known, np.maximum(self.nbytes, 0) * self.factor, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.busbw = np.where(known & (self.busy > 0), self.bus_bytes / self.busy, np.nan)
            self.algbw = np.where(known & (self.busy > 0), self.nbytes / self.busy, np.nan)


def _iterations(summaries: list[RankSummary], offsets: dict[int, int], synced: bool,
                job_spans: dict[int, int] | None = None) -> list[dict]:
    """Per traced iteration its start and time (ns): from the earliest start to the
    latest end over all ranks on synced clocks; without synced clocks (several ranks that
    nothing links) the longest rank's own span, as ranks' clocks cannot be compared.
    Without ProfilerSteps the traced GPU window stands in (iteration None). An iteration
    the time ledger measured (``job_spans``: its ``job_span_ns``) takes that time: the one
    iteration time of every command."""
    spans: dict = {}
    cross_rank = synced or len(summaries) == 1
    for s in summaries:
        off = offsets.get(s.rank, 0)
        own: list[tuple[int | None, int, int]] = [(it, ts - off, ts + dur - off)
                                                  for it, ts, dur in s.steps]
        if not own and s.last_end > s.first_ts:  # no ProfilerStep: the GPU window
            own = [(None, s.first_ts - off, s.last_end - off)]
        for it, lo, hi in own:
            if it not in spans:
                spans[it] = [lo, hi]
            elif cross_rank:
                spans[it] = [min(spans[it][0], lo), max(spans[it][1], hi)]
            elif hi - lo > spans[it][1] - spans[it][0]:
                spans[it] = [lo, hi]
    if None in spans and len(spans) > 1:  # ranks with steps decide
        del spans[None]
    spans_of = job_spans or {}
    return [{"iteration": it, "start_ns": lo, "time_ns": spans_of.get(it, hi - lo)}
            for it, (lo, hi) in sorted(spans.items(), key=lambda kv: (kv[0] is None,
                                                                      kv[0] or 0))]


def _means(rows: Sequence[Mapping[str, Any]], keys: tuple[str, ...]) -> dict:
    """The mean over ``rows`` of each key; None when a row lacks it (a mean of the rows
    that have the value would hide the others)."""
    return {k: (float(np.mean([r[k] for r in rows]))
                if rows and all(r[k] is not None for r in rows) else None) for k in keys}


def _throughput(iters: list[dict], config: RunConfig, gpus: int, notes: list[str]
                ) -> Throughput:
    """Per iteration: time, tokens/s, samples/s, TFLOP/s per GPU (over the job's ``gpus``,
    not the ranks traced) and MFU. An MFU above 100 % is impossible: it is left out
    (null), with a note on what does not fit."""
    tokens = config.tokens_per_iteration
    rows = []
    for r in iters:
        sec = r["time_ns"] / 1e9
        row = {"iteration": r["iteration"], "time_ms": r["time_ns"] / MS,
               "tokens_per_s": tokens / sec if tokens and sec > 0 else None,
               "samples_per_s": (config.global_batch_size / sec
                                 if config.global_batch_size and sec > 0 else None),
               "tflops_per_gpu": None, "mfu_pct": None}
        if tokens and config.flops_per_token and sec > 0:
            row["tflops_per_gpu"] = config.flops_per_token * tokens / sec / gpus / 1e12
            if config.peak_tflops:
                mfu = 100.0 * row["tflops_per_gpu"] / config.peak_tflops
                if mfu <= 100.0:
                    row["mfu_pct"] = mfu
                else:
                    row["tflops_per_gpu"] = None
                    notes.append(
                        f"iteration {r['iteration']}: {mfu:,.0f} % MFU is impossible: the "
                        "FLOPs per token, batch, sequence length, world size or peak given "
                        "do not fit these traces; TFLOP/s and MFU left out")
        rows.append(row)
    # a mean of the iterations that have the value would hide the others: n/a then
    return {"iterations": cast(list[IterationThroughput], rows),
            "mean": _means(rows, ("time_ms", "tokens_per_s",
                                                     "samples_per_s")),
            "window": "ProfilerSteps on the GPU" if iters and iters[0]["iteration"] is not None
            else "traced GPU window (no ProfilerStep)"}


MFU_SOURCES = {
    "config": "the run's configuration: model FLOPs per token (6 x parameters, or "
              "--flops-per-token) x tokens per iteration",
    "trace": "the traced ops' own FLOPs (GEMM, attention, convolution from their recorded "
             "shapes; recompute left out)"}


def chosen_mfu(iterations: Sequence[Mapping[str, Any]], trace: TraceMfu) -> Mfu:
    """The report's one MFU and TFLOP/s per GPU (means over the traced iterations),
    naming their source: the model FLOPs of the configuration when given
    (``iterations``: the throughput's rows), else the traced ops' own (``trace``:
    ``tflops_per_gpu`` / ``mfu_pct`` / ``why`` of :mod:`.ops`); null with the reason when
    neither is known."""
    mean = _means(iterations, ("tflops_per_gpu", "mfu_pct"))
    if mean["tflops_per_gpu"] is not None:
        return {"tflops_per_gpu": mean["tflops_per_gpu"], "mfu_pct": mean["mfu_pct"],
                "source": "config", "source_text": MFU_SOURCES["config"],
                "why": None if mean["mfu_pct"] is not None else
                "the device's peak is unknown: set --peak-tflops"}
    if trace.get("tflops_per_gpu") is not None:
        return {"tflops_per_gpu": trace["tflops_per_gpu"], "mfu_pct": trace.get("mfu_pct"),
                "source": "trace", "source_text": MFU_SOURCES["trace"],
                "why": trace.get("why")}
    why = ("no model FLOPs: give --params, --flops-per-token or --config with the "
           "batch and sequence length, or profile with record_shapes=True")
    if trace.get("why"):
        why += f" (traced ops: {trace['why']})"
    return {"tflops_per_gpu": None, "mfu_pct": None, "source": None, "source_text": None,
            "why": why}


def _overlap(summaries: list[RankSummary]) -> Overlap:
    rows = [OverlapRank(rank=s.rank, comm_ms=s.comm_ns / MS, comp_ms=s.comp_ns / MS,
                        overlap_ms=s.overlap_ns / MS,
                        overlap_pct=_pct(s.overlap_ns, s.comm_ns), pp_stage=None)
            for s in summaries]
    pcts = np.array([r["overlap_pct"] for r in rows if r["overlap_pct"] is not None])
    return {"per_rank": rows,
            "average_pct": float(pcts.mean()) if pcts.size else None,
            "min_pct": float(pcts.min()) if pcts.size else None,
            "max_pct": float(pcts.max()) if pcts.size else None}


def _by(rc: _RankCalls, codes: np.ndarray, labels, extra=None) -> list[CommShare]:
    out: list[CommShare] = []
    for code in np.unique(codes).tolist():
        sel = codes == code
        busy = rc.busy[sel]
        known = rc.nbytes[sel] >= 0
        row = {"count": int(sel.sum()),
               "bytes": int(rc.nbytes[sel][known].sum()) if known.any() else None,
               "bus_bytes": float(np.nansum(rc.bus_bytes[sel])) if known.any() else None,
               "time_ms": float(busy.sum()) / MS,
               "avg_time_ms": float(busy.mean()) / MS,
               "busbw_gbps": _stats(rc.busbw[sel]), "algbw_gbps": _stats(rc.algbw[sel]),
               "with_size": int(known.sum())}
        out.append(cast(CommShare, {"name": labels[code] if code >= 0 else "unknown", **row,
                                    "share_of_iteration_pct": None, "hidden_pct": None,
                                    **(extra(code) if extra else {})}))
    return out


def _per_rank_network(rc: _RankCalls, summaries: list[RankSummary]) -> list[NetworkRank]:
    rows: list[NetworkRank] = []
    for i, s in enumerate(summaries):  # the rows of one rank: a slice, not a scan
        sel = slice(int(rc.bounds[i]), int(rc.bounds[i + 1]))
        stepped = (rc.iteration[sel] >= 0) | (not s.steps)
        bus = rc.bus_bytes[sel]
        ok = np.isfinite(rc.busbw[sel]) & np.isfinite(bus)
        known = np.isfinite(bus).any()
        rows.append({
            "rank": s.rank, "operations": int(bus.size), "pp_stage": None,
            "bytes": int(np.maximum(rc.nbytes[sel], 0).sum()) if known else None,
            "bus_bytes": float(np.nansum(bus)) if known else None,
            # bus bytes over the time any communication kernel ran, both of the calls
            # the ProfilerSteps launched (every call without steps)
            "simple_busbw_gbps": (float(np.nansum(bus[stepped]) / s.comm_ns)
                                  if s.comm_ns and known else None),
            # per-call busbw weighted by bus bytes
            "collective_busbw_gbps": (float(np.average(rc.busbw[sel][ok], weights=bus[ok]))
                                      if ok.any() and bus[ok].sum() > 0 else None)})
    return rows


def _cross_rank(m: Matched) -> CrossRank:
    groups: list[CrossRankGroup] = []
    for g in np.unique(m.comm_group).tolist():
        sel = (m.comm_group == g) & (m.members >= 2)
        if not sel.any():
            continue
        waits = m.member_wait[sel[m.member_call]]
        groups.append(cast(CrossRankGroup, {
            "group": GROUPS[g], "calls": int(sel.sum()),
            "skew_ms": {k: (v / MS if v is not None else None)
                        for k, v in _stats((m.last_start - m.first_start)[sel]
                                           .astype(float)).items()},
            "mean_wait_ms": float(waits.mean()) / MS,
            "busbw_transfer_gbps": _stats(m.busbw_transfer[sel]),
            "busbw_kernel_gbps": _stats(m.member_busbw[sel[m.member_call]]),
            # who arrived last, by how much: the schedule's order as much as a slow rank
            # (the first pipeline stage ends its backward last); the stragglers are the
            # diagnosis's (ranks slower than their peers on the same kernels)
            "last_to_arrive": [{**s, "delay_ms": s["delay_ns"] / MS,
                                "mean_delay_ms": s["mean_delay_ns"] / MS}
                               for s in last_to_arrive(m, g)]}))
    multi = np.flatnonzero(m.members >= 2)
    # the slowest by their own cost (the data's move), not by how long early members
    # waited for the last one
    slow = multi[np.argsort(-m.transfer[multi], kind="stable")[:TOP_SLOWEST]]
    return {
        "matched_calls": int(len(m)), "calls_with_several_ranks": int(multi.size),
        "by_group": groups,
        "slowest_calls": [{
            "group": GROUPS[m.comm_group[i]], "process_group": m.groups[m.group[i]] or None,
            "number": int(m.number[i]), "iteration": int(m.iteration[i]),
            "collective": COLLECTIVES[m.collective[i]] if m.collective[i] >= 0 else None,
            "ranks": int(m.members[i]), "bytes": int(m.nbytes[i]) if m.nbytes[i] >= 0 else None,
            "span_ms": m.span[i] / MS, "skew_ms": (m.last_start[i] - m.first_start[i]) / MS,
            "transfer_ms": m.transfer[i] / MS, "last_rank": int(m.last_rank[i]),
            "busbw_transfer_gbps": (float(m.busbw_transfer[i])
                                    if np.isfinite(m.busbw_transfer[i]) else None)}
            for i in slow.tolist()]}


def job_world(summaries: list[RankSummary], layout: Layout | None,
              notes: list[str] | None = None) -> int:
    """The job's world size: what its ranks agree on (:func:`agreed_world`; implausible
    or outvoted values named in ``notes``), or its layout's when larger; 0 unknown."""
    traced, note = agreed_world([s.world_size for s in summaries], "traces")
    if note and notes is not None:
        notes.append(note)
    if layout is not None and traced and layout.world != traced and notes is not None:
        notes.append(f"the parallel layout has {layout.world:,} ranks, the traces state "
                     f"{traced:,}: {max(layout.world, traced):,} used")
    return max(traced, layout.world if layout is not None else 0)


def build_report(summaries: list[RankSummary], config: RunConfig, offsets: dict[int, int],
                 layout=None, notes: list[str] | None = None, clocks: str = "none",
                 trace: TraceMfu | None = None, diagnosed: Diagnosed | None = None,
                 failed: list[str] | None = None,
                 job_spans: dict[int, int] | None = None) -> Report:
    """The report of a job's ranks (sorted by rank); ``clocks``: how ``offsets`` put the
    ranks on one clock ("shifted", "own clocks", "given"; "none": not synced); ``trace``: the traced ops' FLOPs (the throughput's one MFU is
    then chosen between them and the configuration's, :func:`chosen_mfu`);
    ``diagnosed``: the job's diagnosis and advice; ``failed``: the ranks left out;
    ``job_spans``: per iteration the time ledger's ``job_span_ns`` (the iteration time)."""
    summaries = sorted(summaries, key=lambda s: s.rank)
    notes = list(notes or [])
    gpus = len(summaries)
    device = next((s.device_name for s in summaries if s.device_name), None)
    if config.peak_tflops is None:
        config = config.updated(peak_tflops=peak_tflops_of(device))
    stated = job_world(summaries, layout, notes)
    world = max(stated, gpus)
    if not stated and config.flops_per_token:
        notes.append("world size unknown (no distributedInfo, no layout): TFLOP/s per GPU "
                     f"counts the {gpus} traced GPU(s) only")
    parallel = ({"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp,
                 "ep": layout.ep} if layout is not None else {})
    rc = _RankCalls(summaries)
    synced = clocks != "none"
    iters = _iterations(summaries, offsets, synced, job_spans)
    if not synced and gpus > 1:
        notes.append("iteration time: the longest rank's own span (clocks not synced, "
                     "spans across ranks cannot be compared)")
    step_ns = sum(s.span_ns for s in summaries)

    def shares(column: str, labels):
        def extra(code: int) -> dict:
            key = (column, labels[code] if code >= 0 else "unknown")
            busy = sum(s.busy_by.get(key, 0) for s in summaries)
            hidden = sum(s.hidden_by.get(key, 0) for s in summaries)
            return {"share_of_iteration_pct": _pct(busy, step_ns),
                    "hidden_pct": _pct(hidden, busy)}
        return extra

    by_collective = _by(rc, rc.collective, COLLECTIVES, shares("collective", COLLECTIVES))
    total_bytes = sum(r["bytes"] or 0 for r in by_collective)
    traffic = sorted((Traffic(name=r["name"], count=r["count"], bytes=r["bytes"],
                              pct_of_bytes=_pct(r["bytes"], total_bytes),
                              avg_time_ms=r["avg_time_ms"]) for r in by_collective),
                     key=lambda r: (-r["count"], r["name"]))
    per_rank = _per_rank_network(rc, summaries)
    overlap = _overlap(summaries)
    stages = layout.pp_stages() if layout is not None and layout.pp > 1 else {}
    for row in overlap["per_rank"]:  # what a rank is compared with
        row["pp_stage"] = stages.get(row["rank"])
    for net in per_rank:
        net["pp_stage"] = stages.get(net["rank"])
    coll_bw = [r["collective_busbw_gbps"] for r in per_rank
               if r["collective_busbw_gbps"] is not None]
    avg_bw = float(np.mean(coll_bw)) if coll_bw else None
    matched = match([s.calls for s in summaries], offsets) if gpus > 1 else None
    training = any(s.backward for s in summaries)
    throughput = _throughput(iters, config, world, notes)
    if trace is not None:
        throughput["mfu"] = chosen_mfu(throughput["iterations"], trace)
        # the traced ops' TFLOP/s stays a cross-check; the one MFU is the chosen one
        throughput["trace_flops"] = {"tflops_per_gpu": trace["tflops_per_gpu"],
                                     "why": trace["why"]}
    report: Report = {
        "kind": "training" if training else "inference (no backward pass traced)",
        "configuration": {
            "gpus": gpus, "world_size": world, "model": config.model,
            "global_batch_size": config.global_batch_size, "seq_len": config.seq_len,
            "tokens_per_iteration": config.tokens_per_iteration,
            "flops_per_token": config.flops_per_token, "device": device,
            "peak_tflops": config.peak_tflops, "peak_bw_gbps": config.peak_bw_gbps,
            "parallelism": parallel, "config_parallelism": config.parallelism,
            "config_source": config.source, "iterations": [r["iteration"] for r in iters],
            "ranks": [s.rank for s in summaries]},
        "throughput": throughput,
        "overlap": overlap,
        "network": {
            "average_collective_busbw_gbps": avg_bw,
            "utilization_pct": (_pct(avg_bw, config.peak_bw_gbps)
                                if avg_bw is not None and config.peak_bw_gbps else None),
            "total_bytes": int(total_bytes) if any(r["bytes"] is not None
                                                   for r in by_collective) else None,
            "per_rank": per_rank,
            "by_collective": by_collective,
            "by_group": _by(rc, rc.comm_group, GROUPS, shares("comm_group", GROUPS))},
        "traffic": traffic,
        "cross_rank": ({**_cross_rank(matched), "clock_synced": synced, "clocks": clocks}
                       if matched is not None
                       else None),
        "notes": notes,
    }
    if diagnosed is not None:
        report["diagnosis"], report["diagnosis_why"] = diagnosed.summary, diagnosed.why
        report["advice"] = diagnosed.advice
    if failed is not None:
        report["failed"] = failed
    return report


def ranks_table(report: Report) -> pa.Table:
    """The report's per-rank overlap and network rows as one table (:data:`RANKS_SCHEMA`;
    unknown values null)."""
    network = {r["rank"]: r for r in report["network"]["per_rank"]}
    rows = [{**network.get(r["rank"], {}), **r} for r in report["overlap"]["per_rank"]]
    return pa.Table.from_pylist([{k: row.get(k) for k in RANKS_SCHEMA.names} for row in rows],
                                schema=RANKS_SCHEMA)


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity in its dicts and lists replaced by None (JSON
    has neither)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def report_json(report: Report) -> dict[str, Any]:
    """The report as JSON values (what report.json and the kept report hold): its
    diagnosis as :meth:`~.diagnose.summary.Summary.to_json`, its advice as the rows of
    :data:`~.advice.ADVICE_SCHEMA`; NaN-free."""
    out: dict[str, Any] = dict(report)
    if "diagnosis" in report:
        summary = report["diagnosis"]
        out["diagnosis"] = summary.to_json() if summary is not None else None
    if "advice" in report:
        out["advice"] = [dataclasses.asdict(a) for a in report["advice"]]
    return cast(dict[str, Any], finite(out))


def from_json(d: dict[str, Any]) -> Report:
    """The typed report of :func:`report_json`'s JSON."""
    out = dict(d)
    if "diagnosis" in d:
        out["diagnosis"] = from_report(d["diagnosis"])
    if "advice" in d:
        out["advice"] = list(advice_of(d["advice"] or []))
    return cast(Report, out)
