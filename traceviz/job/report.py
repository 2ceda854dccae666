"""The collectives and throughput report of one profiled iteration's ranks, from their
tables (traces parsed first where needed): each rank summarized where its table is read
(on the job's workers, one table in memory at a time on each), clocks synced, the
report built (:mod:`traceviz.analysis.report`) with the MFU chosen, the job's diagnosis
and advice added; kept beside the tables (:mod:`.job_cache`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from ..analysis.advice import Advice
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.clocks import is_clock_note, offsets_from_calls
from ..analysis.iterations import COLUMNS as WINDOW_COLUMNS
from ..analysis.ops_summary import trace_mfu
from ..analysis.rank_summary import RankSummary
from ..analysis.report import build_report, finite, from_json, job_world, report_json
from ..analysis.report_types import Diagnosed, Report, TraceMfu
from ..analysis.run_config import RunConfig, from_torchtitan_toml
from ..errors import TraceVizError
from ..ingest import job_cache
from ..ingest.batch import failures_of_files
from ..ingest.rank_pieces import Workers, summaries
from ..ingest.tables import has_cpu_tables, job_files, numbered, tables_folder
from ..ingest.topology import job_layout
from ..table.records import records
from . import products

COLUMNS = tuple(dict.fromkeys(CALL_COLUMNS + ("comm_group",) + WINDOW_COLUMNS))


def summaries_of(root: Path, workers: Workers) -> tuple[list[RankSummary], list[str]]:
    """Every rank's summary (ranks unknown to their trace numbered from file names), each
    made where its table is read (``workers``), and the one-line reasons of the files
    that failed. A job's traces are parsed once into its tables (``traceviz batch``'s
    default place); one table is read alone."""
    files = job_files(root)
    failed = failures_of_files(files)  # traces that never became a table
    lost: list[str] = []  # what the workers say (the first named if none is read)
    found = summaries(numbered(files), COLUMNS, workers, lost)
    failed += lost
    if not found:
        raise TraceVizError(f"{root}: no rank could be read: " + "; ".join(failed))
    return found, failed


def make_report(root: str | os.PathLike, *, config_file: str | None = None,
                overrides: dict | None = None, topology: str | None = None,
                clock_sync: bool = True, workers: Workers = Workers()) -> Report:
    """The report dict of ``root`` (NaN-free: JSON-ready); ``failed`` lists the ranks
    left out (their trace or table could not be read, or their worker died: by the
    summaries, the diagnosis or the op model), one line each. A job's report is kept
    beside its tables (:mod:`traceviz.ingest.job_cache`) for these options where no
    rank is lost but to a trace that never became a table."""
    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    if not root.is_dir():
        return _make_report(root, config_file, overrides, topology, clock_sync, workers)
    folder = tables_folder(root)
    config = None
    if config_file:
        st = Path(config_file).stat() if Path(config_file).exists() else None
        config = [os.fspath(Path(config_file).resolve()), st and st.st_size,
                  st and st.st_mtime_ns]
    key = job_cache.key_of(folder, topology, {"config": config, "clock_sync": clock_sync,
                                              "overrides": overrides or {}})
    found = job_cache.load(folder, "report", key)
    if found is not None:
        return from_json(found[1]["report"])
    rep = _make_report(root, config_file, overrides, topology, clock_sync, workers)
    if products.only_unparsed(folder, rep["failed"]):  # else a rank lost: made again
        job_cache.store(folder, "report", key, {}, {"report": report_json(rep)})
    return rep


def _make_report(root: Path, config_file: str | None, overrides: dict | None,
                 topology: str | None, clock_sync: bool, workers: Workers) -> Report:
    """The report dict, computed (see :func:`make_report`)."""
    summaries, failed = summaries_of(root, workers)
    notes = [f"rank {s.rank}: its trace is cut at byte {s.truncated_at}; its calls after "
              "the cut are missing" for s in summaries if s.truncated_at is not None]
    folder = root if root.is_dir() else root.parent
    layout, layout_note = job_layout(root, folder, topology)
    if layout_note:
        notes.append(f"parallel layout unknown: {layout_note}")
    world = max(job_world(summaries, layout), len(summaries))
    config = from_torchtitan_toml(config_file, world) if config_file else RunConfig()
    config = config.updated(**(overrides or {}))
    try:
        diag, lost, advice = products.diagnosis(root, topology, advice=True,
                                                workers=workers)
        failed += [f for f in lost if f not in failed]
        diagnosed = Diagnosed(diag.summary(), None,
                              list(records(Advice, advice)) if advice is not None else [])
    except TraceVizError as exc:
        diag, diagnosed = None, Diagnosed(None, str(exc), [])
    # after the diagnosis: its advice parsed the CPU tables and kept their op model
    trace = _trace_flops(root, config.peak_tflops, workers, failed)
    # the job's clocks are the diagnosis's (one verdict, one iteration time in every
    # command); synced here only where there is no diagnosis
    if not clock_sync:
        offsets, clocks = {}, "none"
    elif diag is not None:
        offsets = dict(diag.offsets) if diag.synced else {}
        clocks = diag.clocks if diag.synced else "none"
        notes += [n for n in diag.notes if is_clock_note(n)]
    else:
        offsets, clocks = offsets_from_calls([s.calls for s in summaries], notes)
    # the iteration time is the ledger's where it compares the ranks on one clock
    job_spans = ({t["iteration"]: t["job_span_ns"] for t in diag.totals.to_pylist()}
                 if diag is not None and (clocks != "none" or len(diag.ranks) == 1)
                 else None)
    rep = build_report(summaries, config, offsets, layout, notes, clocks,
                       trace=trace, diagnosed=diagnosed, failed=failed, job_spans=job_spans)
    return cast(Report, finite(rep))


def _trace_flops(root: Path, peak: float | None, workers: Workers, failed: list[str]
                 ) -> TraceMfu:
    """TFLOP/s per GPU and MFU from the traced ops' own FLOPs (``traceviz ops``: mean over
    ranks and iterations, recompute left out; each rank's made on ``workers``) when the
    ranks' CPU tables exist; else null with the reason. The ranks the op model leaves
    out go to ``failed`` (those not there yet)."""
    def none(why: str) -> TraceMfu:
        return {"tflops_per_gpu": None, "mfu_pct": None, "why": why}

    if root.is_file():  # one trace: its op model from the trace itself
        return trace_mfu(products.ops(root, peak_tflops=peak))
    try:
        folder = tables_folder(root)
    except TraceVizError:
        return none("no tables")
    if not has_cpu_tables(folder):
        return none("the ranks' CPU tables are not parsed: run 'traceviz ops'")
    lost: list[str] = []
    model = products.ops(folder, peak_tflops=peak, workers=workers, failed=lost)
    failed += [f for f in lost if f not in failed]
    return trace_mfu(model)
