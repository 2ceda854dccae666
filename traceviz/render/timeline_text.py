"""An op timeline's diagnosis as text: the lines ``traceviz diagnose`` prints and
``diagnosis.txt`` (the advice with its evidence, the summary, the ledger's shares, the
stragglers, the notes)."""
from __future__ import annotations

from ..analysis.timeline.ledger import PARTS
from .diagnosis_text import advice_lines

LEDGER_WORDS = {"compute": "compute", "data": "data loading", "optimizer": "optimizer",
                "other": "other timed ops", "transfer_pp": "pipeline transfers",
                "transfer_dp": "data-parallel transfers",
                "transfer_tp": "tensor-parallel transfers",
                "transfer_embedding": "embedding transfers", "wait": "waiting for peers",
                "untimed": "untimed gaps", "idle": "idle after its last op"}


def ledger_share_line(diag) -> str:
    """Every rank's time over every step by part, as shares of their steps (%)."""
    t = diag.ledger
    total = sum(t["step_ns"].to_pylist())
    if not total:
        return "ledger: n/a (no steps)"
    parts = [(p, sum(t[f"{p}_ns"].to_pylist())) for p in PARTS]
    return "ledger (all ranks and steps): " + ", ".join(
        f"{LEDGER_WORDS[p]} {100.0 * v / total:.1f} %" for p, v in parts if v)


def timeline_lines(diag, top: int = 5) -> list[str]:
    return list(diag.summary) + [ledger_share_line(diag)] + advice_lines(diag.advice, top)


def timeline_text(diag) -> str:
    """``diagnosis.txt`` of an op timeline."""
    lines = ["TRACEVIZ DIAGNOSIS (op timeline)", "=" * 80]
    advice = diag.advice
    lines += advice_lines(advice, top=len(advice))
    lines += [f"  evidence for {a.rank}: {a.evidence}" for a in advice]
    lines += [""] + list(diag.summary) + [ledger_share_line(diag)]
    strag = diag.stragglers_table.to_pylist()
    if strag:
        lines += ["", "slow workers (persistent: stragglers; transient: single steps):"]
        for s in strag:
            saving = ("n/a" if s["saving_ns"] is None else f"{s['saving_ns'] / 1e6:.2f} ms")
            several = "," in str(s["ranks"]) or "-" in str(s["ranks"])
            lines.append(f"  rank{'s' if several else ''} {s['ranks']} (stage {s['stage']}, "
                         f"DP {s['dp_rank']}): "
                         f"{s['slowdown']:.2f}x, z {s['z_score']:.1f}, "
                         f"{'since' if s['persistent'] else 'first at'} step "
                         f"{s['since_step']}, {s['slow_steps']} steps, "
                         f"{'persistent' if s['persistent'] else 'transient'}; "
                         f"fixing it saves {saving} per step")
    lines += ["", "steps (time, ideal, slowdown, what costs it most):"]
    for s in diag.steps.to_pylist():
        worst = ("" if s["worst"] is None else
                 f", {s['worst']} {s['worst_saving_ns'] / 1e6:.2f} ms")
        slow = "n/a" if s["slowdown"] is None else f"{s['slowdown']:.3f}"
        lines.append(f"  step {s['step']}: {s['time_ns'] / 1e6:.2f} ms, ideal "
                     f"{s['ideal_ns'] / 1e6:.2f} ms, {slow}{worst}")
    if diag.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in diag.notes]
    return "\n".join(lines) + "\n"
