"""``traceviz diff``: HTA's trace diff of two runs (:mod:`traceviz.analysis.diff`)."""
from __future__ import annotations

import os

from ..analysis.diff import Side, compare, side
from ..job import Job
from ..render.diff_files import diff_files
from ..table.result import Result


def load_side(path: str | os.PathLike, label: str, rank: int | None = None,
              iterations: tuple[int, ...] | None = None) -> Side:
    """One side: a rank (default: the lowest) of a trace, a parsed table or a folder."""
    gpu, cpu = Job.of(path).gpu_and_cpu(rank)
    return side(gpu, cpu, os.fspath(path), label, iterations)


def run(control: str | os.PathLike, test: str | os.PathLike, *,
        control_rank: int | None = None, test_rank: int | None = None,
        control_iterations: tuple[int, ...] | None = None,
        test_iterations: tuple[int, ...] | None = None, full_names: bool = False,
        hta_compat: bool = False) -> Result:
    """The comparison table (``trace_diff``), its figure and summary lines."""
    a = load_side(control, "control", control_rank, control_iterations)
    b = load_side(test, "test", test_rank, test_iterations)
    table = compare(a, b, short_names=not full_names, hta_compat=hta_compat)
    return diff_files(table, summary_lines(table, a, b))


def summary_lines(table, control: Side, test: Side) -> list[str]:
    """Per device: names, total time on each side, and how many names changed how."""
    def steps(side: Side) -> str:
        return f"ProfilerStep {side.iterations}" if side.iterations else "whole trace"

    lines = [f"control: rank {control.rank}, {steps(control)}; "
             f"test: rank {test.rank}, {steps(test)}"]
    rows = table.to_pylist()
    for device in ("GPU", "CPU"):
        mine = [r for r in rows if r["device"] == device]
        if not mine:
            lines.append(f"{device}: not compared (a side has no CPU table; parse it with "
                         "--cpu or pass the trace)" if device == "CPU" else f"{device}: none")
            continue
        changes = {c: sum(r["change"] == c for r in mine) for c in
                   ("added", "deleted", "increased", "decreased", "unchanged")}
        times = {c: sum(r["time_change"] == c for r in mine) for c in ("slower", "faster")}
        lines.append(
            f"{device}: {len(mine)} names, "
            f"{sum(r['control_total_duration_ns'] for r in mine) / 1e6:.3f} ms -> "
            f"{sum(r['test_total_duration_ns'] for r in mine) / 1e6:.3f} ms; counts: "
            + ", ".join(f"{v} {k}" for k, v in changes.items())
            + "; time: " + ", ".join(f"{v} {k}" for k, v in times.items()))
    return lines
