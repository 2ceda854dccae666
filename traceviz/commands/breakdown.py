"""``traceviz breakdown``: every HTA-style analysis over a set of ranks (traces, parsed
tables or folders of either): tables as CSV and parquet, and their figures.

Each rank is loaded and selected on its own; a rank that fails to load is reported and
skipped (the others still finish).
"""
from __future__ import annotations

import os

from ..analysis.activities import Options
from ..analysis.breakdown import Params
from ..job import Job
from ..render.breakdown_figures import breakdown_figures
from ..render.rank_spread import LISTED, spread_lines
from ..table.result import Result


def run(paths: Job | list[str | os.PathLike], options: Options = Options(), *,
        ranks: tuple[int, ...] | None = None, params: Params = Params(), jobs: int = 1,
        scheduler: str | None = None) -> Result:
    """The breakdown of every rank of ``paths`` (a job, or traces, tables and folders;
    or of its ``ranks``) as files: its tables, their figures and the console summary;
    ``jobs`` / ``scheduler``: where each rank of a job's tables is read."""
    job = Job.of(paths if isinstance(paths, Job) else list(paths), jobs=jobs,
                 scheduler=scheduler)
    result, failed = job.breakdown_run(options, ranks, params)
    tables = result.tables()
    notes: list[str] = []
    return Result(tables=tables, figures=breakdown_figures(tables, notes),
                  lines=summary_lines(tables, _stages(job) if len(result.ranks) > LISTED
                                      else None, options.hta_compat),
                  notes=notes, failed=list(failed))


_SUMMED = ("kernel_time_ns", "idle_ns", "compute_ns", "non_compute_ns", "comm_ns",
           "comm_transfer_ns", "comm_wait_ns", "compute_overlapped_comm_ns")


def profiled_steps(tables: dict) -> list[dict]:
    """Per rank, the temporal breakdown over its profiled steps (the rows of its
    ProfilerSteps summed; ``steps`` counts them), or over its whole trace where it has
    none (``steps`` 0): the time (``kernel_time_ns``: the steps' iteration windows, or
    HTA's kernel time with ``--hta-compat``) and its parts (ns)."""
    by_rank: dict[int, list[dict]] = {}
    for r in tables["temporal_breakdown"].to_pylist():  # one pass: ranks x steps rows
        by_rank.setdefault(r["rank"], []).append(r)
    out = []
    for rank, mine in sorted(by_rank.items()):
        steps = [r for r in mine if r["iteration"] is not None and r["iteration"] >= 0]
        picked = steps or [r for r in mine if r["iteration"] is None]
        total = {k: (None if any(r[k] is None for r in picked) else sum(r[k] for r in picked))
                 for k in _SUMMED}
        out.append({"rank": rank, "steps": len(steps), **total})
    return out


def _share(r: dict, key: str) -> float | None:
    """``r[key]`` as a percent of the rank's kernel time (None when unknown)."""
    span, v = r["kernel_time_ns"], r[key]
    return None if v is None or not span else 100 * v / span


def _overlap(r: dict) -> float | None:
    """The communication hidden behind compute, as % of the communication."""
    comm, hidden = r["comm_ns"], r["compute_overlapped_comm_ns"]
    return None if not comm or hidden is None else 100 * hidden / comm


def _stages(job: Job) -> dict[int, str] | None:
    """Rank -> pipeline stage of the job, when it is one folder whose layout is known
    (what a rank's numbers are compared with in the summary)."""
    if not job.source.one_job_folder:
        return None
    layout, _ = job.layout
    if layout is None or layout.pp <= 1:
        return None
    return {r: str(stage) for r, stage in layout.pp_stages().items()}


def summary_lines(tables: dict, stages: dict[int, str] | None = None,
                  hta_compat: bool = False) -> list[str]:
    """Per rank over its profiled steps (:func:`profiled_steps`): their time (the
    ledger's iteration windows; HTA's kernel time, each step's kernels from first start
    to last end, with ``hta_compat``) and its three parts (compute, non-compute, no
    kernel running: HTA's idle; they add up to it), the communication (overlapping
    compute or not: not a part of non-compute) and the overlap; beyond
    :data:`~traceviz.render.rank_spread.LISTED` ranks their summary, each rank compared
    with its pipeline stage's (``stages``: rank -> stage) when known (every rank and
    step in temporal_breakdown.csv)."""
    rows = profiled_steps(tables)
    if len(rows) > LISTED:
        ranks = [r["rank"] for r in rows]
        lines = [f"{len(rows)} ranks over their profiled steps, summarized (every rank and "
                 "step: temporal_breakdown.csv):"]
        for label, values, fmt, atol in (
                ("steps' time" if not hta_compat else "kernel time",
                 [r["kernel_time_ns"] / 1e6 for r in rows], _ms, 0.0),
                ("compute", [_share(r, "compute_ns") for r in rows], _pct, 1.0),
                ("non-compute", [_share(r, "non_compute_ns") for r in rows], _pct, 1.0),
                ("no kernel running (HTA's idle)", [_share(r, "idle_ns") for r in rows], _pct,
                 1.0),
                ("communication", [_share(r, "comm_ns") for r in rows], _pct, 1.0),
                ("communication: moving data",
                 [_share(r, "comm_transfer_ns") for r in rows], _pct, 1.0),
                ("communication: waiting for their peers",
                 [_share(r, "comm_wait_ns") for r in rows], _pct, 1.0),
                ("comm-comp overlap", [_overlap(r) for r in rows], _pct, 1.0)):
            lines += ["  " + line for line in
                      spread_lines(label, ranks, values, fmt, stages, atol=atol)]
        return lines
    lines = []
    for r in rows:
        comm = ""
        if r["comm_ns"]:
            comm = (f"; communication kernels run {_pct(_share(r, 'comm_ns'))} of it, "
                    "hidden behind compute or not")
            if r["comm_wait_ns"] is not None:
                comm += (f" (moving data {_pct(_share(r, 'comm_transfer_ns'))}, inside them "
                         f"waiting for their peers {_pct(_share(r, 'comm_wait_ns'))})")
        overlap = _overlap(r)
        lines.append(
            f"rank {r['rank']}: {_over(r, hta_compat)}: "
            f"compute {_pct(_share(r, 'compute_ns'))}, non-compute "
            f"{_pct(_share(r, 'non_compute_ns'))}, no kernel running (HTA's idle) "
            f"{_pct(_share(r, 'idle_ns'))}{comm}; "
            "comm-comp overlap " + ("n/a (no communication)" if overlap is None
                                    else _pct(overlap)))
    return lines


def _over(r: dict, hta_compat: bool) -> str:
    """What a rank's summary is over, and its time."""
    ms = _ms(r["kernel_time_ns"] / 1e6)
    if not r["steps"]:
        return f"kernel time {ms} over the whole trace (no ProfilerStep)"
    steps = f"{r['steps']} profiled step{'s' * (r['steps'] != 1)}"
    if hta_compat:
        return f"kernel time {ms} over {steps} (HTA's: each step's kernels, first to last)"
    return f"{steps}, {ms} in their iteration windows"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} %"


def _ms(v: float) -> str:
    return f"{v:.3f} ms"
