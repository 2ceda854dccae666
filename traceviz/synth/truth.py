"""Ground truth of a synthesized job, computed from what the synthesizer generated.

Deliberately self-contained (its own interval union): it must not share code with the
analyses it checks.

Per micro-batch step (forward; backward = the backward and its recompute) of a rank, the
step's window holds every kernel the step launched but its pipeline P2P hand-offs (the
schedule's sends / receives between steps): ``wall`` = last end - first start, ``comp``
/ ``comm`` / ``mem`` = |union| of each kind, ``overlap`` = |comp ∩ comm|, per parallel
group G ``groups[G]`` = (|comm of G|, |comm of G ∩ comp|), ``recompute`` (and its comp /
comm) = |union of what the recomputed forward launched|, ``p2p`` = |union of the step's
P2P kernels|.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable


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


def _span(ks: Iterable[dict]) -> list[tuple[int, int]]:
    return [(k["ts"], k["ts"] + k["dur"]) for k in ks]


def microbatch_metrics(rows: list[dict]) -> list[dict]:
    """One dict per (iteration, step F / B, micro-batch, chunk) of one rank's kernel
    rows (see the module doc)."""
    steps: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["microbatch"] >= 0 and r["phase"] in ("FWD", "BWD", "RECOMPUTE"):
            op = "F" if r["phase"] == "FWD" else "B"
            steps[(r["iteration"], op, r["microbatch"], r["chunk"])].append(r)
    out = []
    for (it, op, mb, chunk), ks in sorted(steps.items()):
        own = [k for k in ks if not k["p2p"]]
        comp = merged(_span(k for k in own if k["kind"] == "COMP"))
        comm = merged(_span(k for k in own if k["kind"] == "COMM"))
        rc = [k for k in own if k["phase"] == "RECOMPUTE"]
        groups = {}
        for g in sorted({k["comm_group"] for k in own if k["kind"] == "COMM"}):
            mine = merged(_span(k for k in own if k["kind"] == "COMM" and k["comm_group"] == g))
            groups[g] = [length(mine), intersection(comp, mine)]
        start = min(k["ts"] for k in own)
        end = max(k["ts"] + k["dur"] for k in own)
        out.append({
            "iteration": it, "op": op, "microbatch": mb, "chunk": chunk, "start": start,
            "end": end, "wall": end - start, "comp": length(comp), "comm": length(comm),
            "mem": length(merged(_span(k for k in own if k["kind"] == "MEM"))),
            "overlap": intersection(comp, comm), "idle": end - start - length(
                merged(_span(own))), "groups": groups,
            "recompute": length(merged(_span(rc))),
            "recompute_comp": length(merged(_span(k for k in rc if k["kind"] == "COMP"))),
            "recompute_comm": length(merged(_span(k for k in rc if k["kind"] == "COMM"))),
            "p2p": length(merged(_span(k for k in ks if k["p2p"]))), "kernels": len(ks)})
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
    """F / B step windows (see the module doc) of one rank, in time order."""
    return sorted(({k: m[k] for k in ("iteration", "op", "microbatch", "chunk", "start", "end")}
                   for m in microbatch_metrics(rows)), key=lambda s: s["start"])
