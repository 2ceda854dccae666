"""Ground truth of a synthesized job, computed from what the synthesizer generated.

Deliberately self-contained (its own interval union): it must not share code with the
analyses it checks.

Per-micro-batch metrics follow Megatron-TraceViz's definitions on the kernels of one
(iteration, phase, micro-batch, chunk) of a rank: ``wall`` = last end - first start,
``comp`` = |union of COMP kernels|, ``comm`` = |union of COMM kernels|, ``overlap`` =
|comp union ∩ comm union|. DP gradient reduce-scatters (launched by backward hooks) and
pipeline P2P transfers are not part of a micro-batch's comm: they are counted once,
under their group (DP, PP), in the per-group totals.
"""
from __future__ import annotations

from collections import defaultdict

EXCLUDED_FROM_MICROBATCH_COMM = ("DP", "PP")


def merged(intervals: list[tuple[int, int]]) -> list[list[int]]:
    """Union of [start, end) intervals; touching intervals merge."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(union: list[list[int]]) -> int:
    return sum(e - s for s, e in union)


def intersection(a: list[list[int]], b: list[list[int]]) -> int:
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def microbatch_metrics(rows: list[dict]) -> list[dict]:
    """One dict per (iteration, phase, microbatch, chunk) of one rank's kernel rows."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["microbatch"] >= 0:
            groups[(r["iteration"], r["phase"], r["microbatch"], r["chunk"])].append(r)
    out = []
    for (it, phase, mb, chunk), ks in sorted(groups.items()):
        comp = merged([(k["ts"], k["ts"] + k["dur"]) for k in ks if k["kind"] == "COMP"])
        comm = merged([(k["ts"], k["ts"] + k["dur"]) for k in ks if k["kind"] == "COMM"
                       and k["comm_group"] not in EXCLUDED_FROM_MICROBATCH_COMM])
        own = [k for k in ks if k["comm_group"] not in EXCLUDED_FROM_MICROBATCH_COMM]
        start = min(k["ts"] for k in own) if own else 0
        end = max(k["ts"] + k["dur"] for k in own) if own else 0
        out.append({"iteration": it, "phase": phase, "microbatch": mb, "chunk": chunk,
                    "start": start, "end": end, "wall": end - start, "comp": length(comp),
                    "comm": length(comm), "overlap": intersection(comp, comm),
                    "kernels": len(ks)})
    return out


def group_totals(rows: list[dict]) -> dict[str, dict]:
    """Per comm group: kernel time (sum of durations), calls and bytes (input side)."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["kind"] != "COMM":
            continue
        g = out.setdefault(r["comm_group"], {"time_ns": 0, "calls": 0, "in_bytes": 0,
                                             "out_bytes": 0})
        g["time_ns"] += r["dur"]
        g["calls"] += 1
        g["in_bytes"] += r["msg_in_bytes"]
        g["out_bytes"] += r["msg_out_bytes"]
    return out


def stage_ops(rows: list[dict]) -> list[dict]:
    """F / B op spans (first kernel start .. last kernel end, compute and comm of the op
    itself, P2P and DP excluded) of one rank, in time order."""
    spans = [{"iteration": m["iteration"], "op": "F" if m["phase"] == "FWD" else "B",
              "microbatch": m["microbatch"], "chunk": m["chunk"], "start": m["start"],
              "end": m["end"]}
             for m in microbatch_metrics(rows) if m["phase"] in ("FWD", "BWD")]
    recompute = {(m["iteration"], m["microbatch"], m["chunk"]): m
                 for m in microbatch_metrics(rows) if m["phase"] == "RECOMPUTE"}
    for s in spans:  # a backward op includes the recompute of its layers
        rc = recompute.get((s["iteration"], s["microbatch"], s["chunk"]))
        if s["op"] == "B" and rc:
            s["start"] = min(s["start"], rc["start"])
            s["end"] = max(s["end"], rc["end"])
    return sorted(spans, key=lambda s: s["start"])
