"""The report dict of :mod:`traceviz.analysis.report` as text: the LLM Collectives
Profiler's layout (headings framed by 80 ``=``, 2 decimals, ``END OF REPORT``), with its
sections' numbers computed correctly, and the cross-rank sections added."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.report_types import CrossRank, Report, Stats, Throughput
from .diagnosis_text import advice_lines, ledger_lines
from .rank_spread import LISTED, spread_lines
from .words import clock_words

RULE = "=" * 80


def _f(v, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:,.2f}{unit}"


def _gb(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 1e9:,.2f} GB"


def iterations_text(iterations: list) -> str:
    """The profiled iterations, or what stands in for them."""
    if iterations == [None]:
        return "none (the whole trace, no ProfilerStep)"
    return ", ".join(map(str, iterations)) or "none"


def _mfu_lines(t: Throughput) -> list[str]:
    """The one TFLOP/s per GPU and MFU with their source; the traced ops' TFLOP/s as a
    cross-check when the configuration's FLOPs are the source."""
    mfu = t["mfu"]
    tf: Mapping[str, Any] = t.get("trace_flops") or {}
    lines = [f"TFLOP/s per GPU: {_f(mfu['tflops_per_gpu'])}",
             f"MFU: {_f(mfu['mfu_pct'], '%')}"
             + (f" (from {mfu['source_text']})" if mfu["source"] else "")
             + (f"; n/a: {mfu['why']}" if mfu["why"] else "")]
    if mfu["source"] == "config" and tf.get("tflops_per_gpu") is not None:
        lines.append(f"Cross-check: the traced ops' own FLOPs give "
                     f"{_f(tf['tflops_per_gpu'])} TFLOP/s per GPU")
    return lines


def _heading(lines: list[str], title: str) -> None:
    lines += ["", RULE, title, RULE]


def _bw(stats: Stats) -> str:
    return (f"mean {_f(stats['mean'])}, median {_f(stats['median'])}, p95 "
            f"{_f(stats['p95'])}, min/max {_f(stats['min'])} / {_f(stats['max'])} GB/s")


# per-rank metrics summarized at scale: (label, key, format, tolerance in its unit)
OVERLAP_METRICS = (("overlap", "overlap_pct", lambda v: _f(v, " %"), 1.0),
                   ("communication", "comm_ms", lambda v: _f(v, " ms"), 0.0),
                   ("compute", "comp_ms", lambda v: _f(v, " ms"), 0.0))
NETWORK_METRICS = (
    ("Collective Bandwidth", "collective_busbw_gbps", lambda v: _f(v, " GB/s"), 0.0),
    ("Simple Bandwidth", "simple_busbw_gbps", lambda v: _f(v, " GB/s"), 0.0),
    ("Total Bytes", "bytes", _gb, 0.0),
    ("Communication Operations", "operations", lambda v: f"{v:,.0f}", 0.0))


def rank_summary(rows: Sequence[Mapping[str, Any]], metrics: tuple) -> list[str]:
    """Per metric of ``metrics`` the summary of ``rows`` (one per rank), each rank
    compared with its pipeline stage (``pp_stage``) when known."""
    ranks = [r["rank"] for r in rows]
    stages = {r["rank"]: str(r["pp_stage"]) for r in rows
              if r.get("pp_stage") is not None} or None
    return [line for label, key, fmt, atol in metrics
            for line in spread_lines(label, ranks, [r[key] for r in rows], fmt, stages,
                                     atol=atol)]


def _per_rank(rows: Sequence[Mapping[str, Any]], each, metrics: tuple, table: str
              ) -> list[str]:
    """``each(row)``'s lines for every rank while they are at most :data:`LISTED`; else
    :func:`rank_summary`, every rank's numbers in ``table``."""
    if len(rows) <= LISTED:
        return [line for r in rows for line in each(r)]
    return ([f"  {len(rows)} ranks, summarized (every rank: {table}.csv):"]
            + ["    " + line for line in rank_summary(rows, metrics)])


def report_text(rep: Report, ranks_table: str = "report_ranks") -> str:
    """The text report; at scale its per-rank sections are summaries of the table
    ``ranks_table`` (the command writes it next to the text)."""
    c, t, o, n = rep["configuration"], rep["throughput"], rep["overlap"], rep["network"]
    kind = "TRAINING" if rep["kind"] == "training" else "INFERENCE"
    lines = [RULE, f"TRACEVIZ {'DISTRIBUTED ' if c['world_size'] > 1 else ''}{kind} "
             "PERFORMANCE REPORT", RULE,
             f"Configuration: {c['gpus']} GPUs traced of {c['world_size']}, iterations "
             f"{iterations_text(c['iterations'])}",
             f"Model: {c['model'] or 'n/a'}; Batch Size: {c['global_batch_size'] or 'n/a'}, "
             f"Sequence Length: {c['seq_len'] or 'n/a'}",
             f"Device: {c['device'] or 'n/a'} (peak {_f(c['peak_tflops'], ' TFLOP/s')})",
             "Parallelism:"]
    par = c["parallelism"] or c["config_parallelism"]
    lines += [f"  {k}: {v}" for k, v in par.items()] or ["  unknown (no topology; see NOTES)"]

    _heading(lines, "ADVICE (traceviz diagnose: what to change, the saving re-timed)")
    lines += (advice_lines(rep.get("advice") or [])
              if rep.get("diagnosis") is not None else
              [f"n/a: {rep.get('diagnosis_why') or 'no diagnosis'}"])

    _heading(lines, "1. THROUGHPUT")
    m = t["mean"]
    lines += [f"Measured over: {t['window']}",
              f"Time per Iteration: {_f(m['time_ms'], ' ms')}",
              f"Tokens per Second: {_f(m['tokens_per_s'])}",
              f"Samples per Second: {_f(m['samples_per_s'])}",
              *_mfu_lines(t), "Per Iteration:"]
    per_it = t["mfu"]["source"] == "config"  # the configuration's MFU per iteration
    lines += [f"  {r['iteration'] if r['iteration'] is not None else 'whole trace'}: "
              f"{_f(r['time_ms'], ' ms')}, {_f(r['tokens_per_s'])} tokens/s"
              + (f", MFU {_f(r['mfu_pct'], '%')}" if per_it else "")
              for r in t["iterations"]]

    _heading(lines, "2. COMMUNICATION-COMPUTATION OVERLAP")
    lines += [f"Average Overlap: {_f(o['average_pct'], '%')}",
              f"Min Overlap: {_f(o['min_pct'], '%')}",
              f"Max Overlap: {_f(o['max_pct'], '%')}", "Per-Rank Overlap:"]
    lines += _per_rank(
        o["per_rank"], lambda r: [f"  rank {r['rank']}: {_f(r['overlap_pct'], '%')} (comm "
                                  f"{_f(r['comm_ms'])} ms, compute {_f(r['comp_ms'])} ms)"],
        OVERLAP_METRICS, ranks_table)

    _heading(lines, "3. NETWORK LOAD (nccl-tests bus bandwidth, per call's own group size)")
    lines += [f"Average Collective Bandwidth: {_f(n['average_collective_busbw_gbps'], ' GB/s')}",
              f"Peak Bandwidth: {_f(c['peak_bw_gbps'], ' GB/s')}",
              f"Bandwidth Utilization: {_f(n['utilization_pct'], '%')}",
              f"Total Traffic: {_gb(n['total_bytes'])}", "Per-Rank Network Stats:"]
    lines += _per_rank(
        n["per_rank"], lambda r: [
            f"  rank {r['rank']}:",
            f"    Collective Bandwidth: {_f(r['collective_busbw_gbps'], ' GB/s')}",
            f"    Simple Bandwidth: {_f(r['simple_busbw_gbps'], ' GB/s')}",
            f"    Total Bytes: {_gb(r['bytes'])}",
            f"    Communication Operations: {r['operations']}"],
        NETWORK_METRICS, ranks_table)
    lines.append("Collective Breakdown:")
    for r in sorted(n["by_collective"], key=lambda r: r["name"]):
        lines += [f"  {r['name']}:", f"    Count: {r['count']}",
                  f"    Bus Bandwidth: {_bw(r['busbw_gbps'])}",
                  f"    Data: {_gb(r['bytes'])} ({_gb(r['bus_bytes'])} on the bus), "
                  f"kernel time {_f(r['time_ms'], ' ms')}",
                  f"    Share of Iteration Time: {_f(r['share_of_iteration_pct'], '%')}, "
                  f"hidden behind compute: {_f(r['hidden_pct'], '%')}"]

    _heading(lines, "4. TRAFFIC DISTRIBUTION")
    for t_row in rep["traffic"]:
        lines += [f"  {t_row['name']}:", f"    Count: {t_row['count']}",
                  f"    Total Traffic: {_gb(t_row['bytes'])}",
                  f"    Percent of Total Traffic: {_f(t_row['pct_of_bytes'], '%')}",
                  f"    Average Time: {_f(t_row['avg_time_ms'], ' ms')}"]

    _heading(lines, "5. PARALLEL GROUPS")
    for r in n["by_group"]:
        lines += [f"  {r['name']}:", f"    Kernels: {r['count']}, Data: {_gb(r['bytes'])}, "
                  f"kernel time {_f(r['time_ms'], ' ms')}",
                  f"    Bus Bandwidth: {_bw(r['busbw_gbps'])}",
                  f"    Share of Iteration Time: {_f(r['share_of_iteration_pct'], '%')}, "
                  f"hidden behind compute: {_f(r['hidden_pct'], '%')}"]

    x: CrossRank = rep["cross_rank"] or {"matched_calls": 0, "calls_with_several_ranks": 0,
                                         "by_group": [], "slowest_calls": []}
    if rep["cross_rank"] is None:
        _heading(lines, "6. CROSS-RANK COLLECTIVES")
        lines.append("n/a: one rank traced")
    else:
        _heading(lines, f"6. CROSS-RANK COLLECTIVES: {clock_words(2, x['clocks'])}")
        lines.append(f"Matched calls: {x['calls_with_several_ranks']} seen on several ranks")
    for g in x["by_group"]:
        lines += [f"  {g['group']}: {g['calls']} calls",
                  f"    Arrival Skew: mean {_f(g['skew_ms']['mean'])}, median "
                  f"{_f(g['skew_ms']['median'])}, p95 {_f(g['skew_ms']['p95'])}, max "
                  f"{_f(g['skew_ms']['max'])} ms; mean wait per rank "
                  f"{_f(g['mean_wait_ms'], ' ms')}",
                  f"    Bus Bandwidth from transfer time: {_bw(g['busbw_transfer_gbps'])}",
                  f"    Bus Bandwidth from kernel time:   {_bw(g['busbw_kernel_gbps'])}"]
        for s in g["last_to_arrive"]:
            lines.append(f"    last to arrive: rank {s['rank']} in {s['times_last']} of "
                         f"{s['calls']} calls, {_f(s['delay_ms'])} ms after the next-to-last "
                         f"in all ({_f(s['mean_delay_ms'])} ms per call)")
    if x["slowest_calls"]:
        lines.append("Slowest Calls (by transfer time, the data's move):")
    for call in x["slowest_calls"]:
        lines.append(f"  {call['group']} {call['collective'] or '?'} #{call['number']} on "
                     f"process group {call['process_group'] or '?'} (iteration "
                     f"{call['iteration']}, {call['ranks']} ranks, {_gb(call['bytes'])}): "
                     f"{_f(call['span_ms'])} ms, skew {_f(call['skew_ms'])} ms, transfer "
                     f"{_f(call['transfer_ms'])} ms, last rank {call['last_rank']}")
    diag = rep.get("diagnosis")
    _heading(lines, "7. WHO WAITS FOR WHOM (traceviz diagnose)")
    if diag is None:
        lines.append("n/a: " + (rep.get("diagnosis_why") or "no diagnosis"))
    else:
        lines += ledger_lines(diag)
        lines.append("(last to arrive in section 6 is not a straggler: the schedule decides "
                     "who arrives last as often as a slow GPU; stragglers run the same "
                     "kernels slower than their peers)")
    if rep.get("failed"):
        _heading(lines, f"RANKS LEFT OUT ({len(rep['failed'])})")
        lines += [f"  {why}" for why in rep["failed"]]
    if rep["notes"]:
        _heading(lines, "NOTES")
        lines += [f"  {note}" for note in rep["notes"]]
    lines += ["", RULE, "END OF REPORT", RULE]
    return "\n".join(lines) + "\n"
