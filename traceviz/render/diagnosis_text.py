"""The diagnosis as text: the short ledger a command prints, and ``diagnosis.txt``."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..analysis.advice import Advice
from ..analysis.diagnose.diagnosis import Diagnosis
from ..analysis.diagnose.ledger import PARTS
from ..analysis.diagnose.stragglers import NO_PEERS, NONE_FOUND, Straggler
from ..analysis.diagnose.summary import Cause, Place, Summary, WaitedFor
from .words import clock_words, saving_words

LABELS = {"compute": "compute", "memory": "memory", "grad_sync": "gradient sync",
          "comm_unsplit": "comm (split n/a)", "bubble": "pipeline bubble",
          "wait_rank": "waiting for other ranks", "cpu_bound": "CPU / launch bound",
          "idle": "idle"}


LIST_ROWS = 64  # rank-iterations listed one by one in diagnosis.txt; beyond: a summary


def _ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f} ms"


def _pct(pct: float | None) -> str:
    return "n/a" if pct is None else f"{pct:.1f} %"


def _waited(w: WaitedFor, places: dict[int, Place]) -> str:
    """``rank N (node, GPU) X ms by K ranks (why)``: one rank waited for."""
    known = places.get(w.rank)
    place = known.text() if known is not None else ""
    return (f"rank {w.rank}" + (f" ({place})" if place else "")
            + f" {_ms(w.ns)} by {w.ranks_waiting} rank(s) ({w.why})")


def waiting_text(c: Cause, places: dict[int, Place], top: int = 3) -> str:
    """Who the waiting for other ranks is for: the ranks late by a margin of their own
    and why, then the rest (the ordinary spread, handshakes)."""
    bits = [_waited(w, places) for w in c.waited_for[:top]]
    if (c.spread_ns or 0) > 0:
        bits.append(f"{_ms(c.spread_ns)} ranks doing the same work arriving a little "
                    "apart (the ordinary spread between GPUs, or a delay handed on: no "
                    "rank late by a margin of its own)")
    if (c.handshake_ns or 0) > 0:
        bits.append(f"handshakes / barriers {_ms(c.handshake_ns)}")
    return "; ".join(bits)


def straggler_line(s: Straggler) -> str:
    """One straggler, in words."""
    place = Place(s.node, s.local_gpu).text()
    return (f"rank {s.rank}" + (f" ({place})" if place else "")
            + f": {s.slowdown:.2f}x the compute time of its {s.peers} peer(s) on "
            f"the same kernels (robust z-score {s.z_score:.1f} against every rank's "
            f"slowdown; {s.units_slower} of {s.units} kernels per micro-batch "
            f"slower, p = {s.p_value:.1e}); {_ms(s.excess_ns)} more compute per "
            f"iteration, of which the job waits about {_ms(s.cost_ns)}")


def ledger_lines(summary: Summary, top: int = 5) -> list[str]:
    """The short ledger of a diagnosis (:class:`~traceviz.analysis.diagnose.summary.
    Summary`): per iteration the job's mean span and parts, the largest causes, the
    stragglers."""
    lines = []
    clocks = clock_words(summary.ranks, summary.clocks if summary.synced else "none")
    for t in summary.totals.to_pylist():
        head = (f"ProfilerStep#{t['iteration']}" if t["iteration"] >= 0
                else "the whole trace")
        lines.append(f"{head}, {t['ranks']} rank(s), {clocks}: {_ms(t['job_span_ns'])} "
                     f"from the first rank's start to the last rank's end; per rank "
                     f"{_ms(t['span_ns'])} on average, of which")
        transfer = [(p, t[f"{p}_pct"]) for p in PARTS if p.startswith("transfer_")
                    and (t[f"{p}_pct"] or 0) >= 0.05]
        shown = [f"{LABELS[p]} {t[f'{p}_pct']:.1f} %" for p in
                 ("compute", "bubble", "wait_rank", "grad_sync", "comm_unsplit")
                 if (t[f"{p}_pct"] or 0) >= 0.05 or p == "compute"]
        if transfer:
            shown.append("exposed transfer " + f"{sum(v for _, v in transfer):.1f} % ("
                         + ", ".join(f"{p.split('_', 1)[1].upper()} {v:.1f}"
                                     for p, v in transfer) + ")")
        shown += [f"{LABELS[p]} {t[f'{p}_pct']:.1f} %" for p in
                  ("memory", "cpu_bound", "idle") if (t[f"{p}_pct"] or 0) >= 0.05]
        lines.append("  " + " | ".join(shown))
    found = summary.causes[:top]
    if found:
        lines.append("largest losses (per rank and iteration):")
        for i, c in enumerate(found, 1):
            lines.append(f"  {i}. {c.cause}: {_ms(c.ns)} ({c.pct:.1f} %)"
                         + (": " + waiting_text(c, summary.places) if c.part == "wait_rank"
                            else ""))
    strag = summary.stragglers
    if strag:
        lines.append("stragglers (same work, slower GPU), worst first:")
        lines += [f"  {straggler_line(s)}" for s in strag[:top]]
        if len(strag) > top:
            lines.append(f"  ... {len(strag) - top} more in stragglers.csv")
    elif summary.peers_compared:
        lines.append(f"stragglers: none ({NONE_FOUND})")
    elif summary.ranks > 1:
        lines.append(f"stragglers: not assessed: {NO_PEERS}")
    if summary.extra:
        lines.append("extra work (compute kernels the ranks doing the same work do not "
                     "run), the costliest first:")
        lines += [f"  {e.text()}" for e in summary.extra[:top]]
        if len(summary.extra) > top:
            lines.append(f"  ... {len(summary.extra) - top} more")
    return lines


ADVICE_HEAD = ("advice, the largest predicted saving per iteration first (a fault saving "
               "under 1 % is listed as minor; conditional advice needs what the trace does "
               "not show)")
STANDING_TAG = {"ranked": "", "minor": "minor: ", "conditional": "conditional: ",
                "no gain": "no gain: ", "unpredicted": ""}


def advice_lines(advice: Sequence[Advice], top: int = 5) -> list[str]:
    """The advice, in its order (:mod:`traceviz.analysis.advice`)."""
    if not advice:
        return ["advice: nothing stands out (no straggler, slow link, stage imbalance, "
                "bubble, exposed communication or host overhead above the thresholds)"]
    lines = [ADVICE_HEAD + ":"]
    for a in advice[:top]:
        saving = saving_words(a, _ms)
        lines.append(f"  {a.rank}. {STANDING_TAG[a.standing]}{a.finding}: "
                     f"{a.action}; {saving} [what-if {a.what_if}]")
    if len(advice) > top:
        lines.append(f"  ... {len(advice) - top} more in advice.csv")
    return lines


def diagnosis_text(diag: Diagnosis, advice: Sequence[Advice] | None = None) -> str:
    """``diagnosis.txt``: the advice, the short ledger, the notes, and every rank's
    ledger row."""
    lines = ["TRACEVIZ DIAGNOSIS", "=" * 80]
    if advice is not None:
        lines += advice_lines(advice, top=len(advice))
        lines += [f"  evidence for {a.rank}: {a.evidence}" for a in advice]
        lines.append("")
    lines += ledger_lines(diag.summary(), top=10)
    if diag.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in diag.notes]
    chain = diag.chain_ranks()
    if chain:
        lines += ["", "the iterations' chains of waits run through rank(s) "
                  + ", ".join(map(str, chain))]
    used = [p for p in PARTS if diag.ledger[f"{p}_ns"].to_numpy().any()]
    rows = diag.ledger.to_pylist()
    if len(rows) <= LIST_ROWS:
        lines += ["", "per rank and iteration (ms; the parts add up to the span; ledger.csv):"]
        lines.append("  " + f"{'rank':>6} {'iter':>6} {'span':>9} " + " ".join(
            f"{p[:10]:>10}" for p in used))
        lines += ["  " + f"{r['rank']:>6} {r['iteration']:>6} {r['span_ns'] / 1e6:>9.3f} "
                  + " ".join(f"{r[f'{p}_ns'] / 1e6:>10.3f}" for p in used) for r in rows]
    else:
        lines += ["", f"over {len(rows)} rank-iterations (ms; every row in ledger.csv):",
                  f"  {'part':<20} {'min':>9} {'median':>9} {'max':>9}  ranks at min / max"]
        for p in ["span"] + used:
            v = np.array([r[f"{p}_ns"] for r in rows], np.int64)
            lo, hi = int(np.argmin(v)), int(np.argmax(v))
            lines.append(f"  {p:<20} {v.min() / 1e6:>9.3f} {np.median(v) / 1e6:>9.3f} "
                         f"{v.max() / 1e6:>9.3f}  {rows[lo]['rank']} / {rows[hi]['rank']}")
    return "\n".join(lines) + "\n"
