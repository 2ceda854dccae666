"""The one way into a job's results: one profiled job, every analysis a method, each
computed once (kept in memory, and beside the tables where :mod:`traceviz.ingest.
job_cache` keeps it). Every command, the demo and notebooks ask a :class:`Job`:

    import traceviz
    job = traceviz.Job("tensorboard_dir/")   # parses what has no table yet
    job.ranks                                 # [0, 1, ...]
    job.temporal_breakdown()                  # pyarrow.Table (.to_pandas(), polars.from_arrow)
    job.microbatches()
    job.report(global_batch_size=64, seq_len=4096, params=8)

Each method calls the analysis (:mod:`.products`) the command line runs (the commands
only write its results to files), so a number here is the number the CLI prints and
writes; results are
typed (Arrow tables with declared schemas, dataclasses of them). Tables are loaded when
a method needs them and every result is kept, so asking twice costs nothing. A job folder with
several profiled iterations (``iteration_N/`` folders) is looked at one folder at a
time: ``Job(path, iteration=N)`` picks one (default: the first).
"""
from __future__ import annotations

import contextlib
import copy
import os
import warnings
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..analysis.activities import Options
from ..analysis.advice import JobDiagnosis
from ..analysis.aggregation import Aggregation
from ..analysis.breakdown import Breakdown, Params
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.calls import rank_calls
from ..analysis.critical_path.paths import CriticalPath, HtaPath
from ..analysis.hang import Hang, analyze
from ..analysis.memory import JobMemory
from ..analysis.ops_summary import OpModel
from ..analysis.timeline.diagnosis import TimelineDiagnosis
from ..analysis.pipeline import PipelineViews
from ..analysis.report_types import Report
from ..analysis.run_config import training_flops_per_token
from ..errors import RanksLeftOut, TraceVizError
from ..ingest.flight_recorder import read_dumps
from ..ingest.tables import (
    ensure_tables,
    gpu_and_cpu,
    input_files,
    is_trace_file,
    load_table,
    only_folder,
    own_tables,
    rank_tables,
)
from ..ingest.op_timeline import is_op_timeline
from ..ingest.timer_dump import find_dumps
from ..ingest.topology import job_layout
from ..render.aggregation_files import aggregation_files
from ..render.breakdown_figures import breakdown_figures
from ..render.pipeline_files import views_result
from ..table.result import Drawing
from ..table.schema import file_metadata
from ..topology.layout import Layout
from . import products
from .report import make_report
from .export import write as write_export
from .source import Source


class Job:
    """A profiled job: a trace, a folder of traces (any layout ``traceviz batch`` knows)
    or a folder of parsed tables.

    ``tables``: where traces without a table are parsed to (default: the batch output
    folder); ``iteration``: which profiled iteration's folder to look at (default: the
    first); ``topology``: the job's ``unique_parallel_groups_*.txt`` (default: found
    next to the traces, else from their pg_config); ``vpp``: model chunks per stage
    (default: found from the traces);
    ``jobs``: worker processes for the traces still to parse and for each rank's share
    of the diagnosis (an op timeline's: each block of its steps; default 1: in this
    process; more, or 0 for one per core, starts
    new Python processes, which a script must allow with an ``if __name__ ==
    "__main__":`` guard); ``scheduler``: a Dask cluster doing that work instead
    (``tcp://HOST:PORT``, or ``"local"``).
    """

    def __init__(self, path: str | os.PathLike, *, tables: str | os.PathLike | None = None,
                 iteration: int | None = None, topology: str | os.PathLike | None = None,
                 vpp: int | None = None, jobs: int = 1, scheduler: str | None = None
                 ) -> None:
        self._open(Source.of(path, topology=topology, vpp=vpp, iteration=iteration,
                             tables=tables, jobs=jobs, scheduler=scheduler))

    def _open(self, source: Source) -> None:
        self.source = source  # resolved once: every product reads these inputs
        self._kept: dict[tuple, Any] = {}  # every result, by what asked for it
        self._failed: list[str] = []

    @classmethod
    def of(cls, source: Job | str | os.PathLike | list[str | os.PathLike],
           topology: str | os.PathLike | None = None, vpp: int | None = None, *,
           tables: str | os.PathLike | None = None, jobs: int = 1,
           quiet: bool | None = None, scheduler: str | None = None) -> Job:
        """``source`` itself when it is a Job (opened with its own options), else the
        job at that path (or those paths: several traces or tables, as ``breakdown``
        takes) as a command opens it: a folder of several profiled iterations is a
        one-line error (name one) where the notebook's Job takes the first."""
        if isinstance(source, Job):
            return source
        job = cls.__new__(cls)
        job._open(Source.of(source, topology=topology, vpp=vpp, tables=tables, jobs=jobs,
                            quiet=quiet, first_iteration=False, scheduler=scheduler))
        return job

    @property
    def path(self) -> Path:
        """The job's trace or folder (as named)."""
        return self.source.path

    @property
    def topology(self) -> str | None:
        """The layout file every product reads (:class:`~.source.Source`)."""
        return self.source.topology

    def __repr__(self) -> str:
        return f"Job({str(self.path)!r}, ranks={len(self.ranks)}, folder={str(self.folder)!r})"

    # ---- where the tables are ---------------------------------------------------------

    @property
    def folders(self) -> list[Path]:
        """Every folder of rank tables (one per profiled iteration), parsed if needed."""
        return self._folders(cpu=False)

    def _folders(self, cpu: bool) -> list[Path]:
        """:attr:`folders`, with every rank's CPU table too when ``cpu`` (parsed once,
        with the job's options: every product then reads these tables as they are)."""
        if ("folders", True) in self._kept:
            return self._kept[("folders", True)]
        src = self.source
        return self._keep(("folders", cpu), lambda: ensure_tables(
            src.path, src.tables, jobs=src.jobs, topology=src.topology, vpp=src.vpp,
            quiet=src.quiet, cpu=cpu, scheduler=src.scheduler))

    @cached_property
    def folder(self) -> Path:
        """The folder of rank tables looked at (see ``iteration``)."""
        iteration = self.source.iteration
        if iteration is None:
            return self.folders[0]
        for folder in self.folders:
            steps = set()
            for f in sorted(folder.glob("*.parquet")):  # the first readable table's steps
                try:
                    steps = {s.get("iteration") for s in file_metadata(f).get("steps") or []}
                    break
                except (OSError, ValueError):
                    continue
            if iteration in steps or folder.name == f"iteration_{iteration}":
                return folder
        raise TraceVizError(f"{self.path}: no profiled iteration {iteration}")

    @cached_property
    def layout(self) -> tuple[Layout | None, str | None]:
        """(the job's parallel layout, None) or (None, why it is unknown)."""
        return job_layout(self.path, self.folder, self.topology)

    def pipeline_places(self) -> list[dict]:
        """Per rank of a pipeline group of the job's layout: rank, pp_group, stage
        (empty without a layout)."""
        layout = self.layout[0]
        if layout is None:
            return []
        return [{"rank": r, "pp_group": g, "stage": p} for g, grp in
                enumerate(layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"])
                for p, r in enumerate(grp)]

    @cached_property
    def files(self) -> list[Path]:
        """The rank tables of :attr:`folder` (of one trace: its own)."""
        if is_trace_file(self.path):
            return own_tables(self.path, self.folder)
        return input_files([self.folder])

    @cached_property
    def ranks(self) -> list[int]:
        """The ranks traced whose table's footer reads (their ranks from the tables'
        metadata, else their file names; no column is read); the others are in
        :attr:`failed`."""
        failed: list[str] = []
        ranks = sorted(r for r, _, _ in rank_tables(self.files, (), failed))
        self._failed = failed
        if failed:  # never dropped silently: every analysis covers the others only
            warnings.warn(f"{len(failed)} rank(s) of {self.folder} could not be read and "
                          f"are left out (job.failed says why): {failed[0]}", RanksLeftOut,
                          stacklevel=2)
        return ranks

    @property
    def failed(self) -> list[str]:
        """One line per rank left out of every analysis: its trace failed to parse or its
        table's footer cannot be read, and why (a table whose columns are damaged behind
        a sound footer is named by each analysis that reads them, in its own ranks left
        out)."""
        self.ranks  # noqa: B018 (reading the ranks finds the failures)
        return list(self._failed)

    def table(self, rank: int, columns: tuple[str, ...] | None = None) -> pa.Table:
        """One rank's GPU activity table (only ``columns`` when given)."""
        for r, path, _ in rank_tables(self.files, (), []):
            if r == rank:
                return load_table(path, columns)
        raise TraceVizError(f"{self.folder}: no rank {rank} (ranks {self.ranks})")

    def gpu_and_cpu(self, rank: int | None = None) -> tuple[pa.Table, pa.Table | None]:
        """One rank's GPU activity table and CPU table (None: its tables were parsed
        without), of the trace, table or folder named: the lowest rank when ``rank`` is
        None (what ``sequences`` and ``diff`` compare)."""
        return self._keep(("gpu_and_cpu", rank), lambda: gpu_and_cpu(self.path, rank))

    def export(self, out: Path, kernels: bool | None = None, clock_sync: bool = True,
               extra: Iterable[dict] = ()) -> tuple[int, list[str], list[str]]:
        """Write the Perfetto export of the job (one trace: its annotated copy; else
        every rank's tracks on one clock) to ``out`` as it is computed: (events, notes,
        the ranks left out with why). See :func:`.export.write`."""
        source = self.path if self.path.is_file() else self.inputs()
        return write_export(source, out, kernels, clock_sync, extra)

    # ---- analyses ---------------------------------------------------------------------

    def _keep(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The result ``make()`` made for ``key`` (made once)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def breakdown(self, *, hta_compat: bool = False, drop_last_step: bool = False,
                  params: Params = Params()) -> Breakdown:
        """Every HTA-style table (``traceviz breakdown``): ``.temporal_breakdown``,
        ``.kernel_type_breakdown``, ... or ``.tables()`` by name."""
        options = Options(drop_last_step=drop_last_step or hta_compat, hta_compat=hta_compat)
        return self.breakdown_run(options, params=params)[0]

    def breakdown_run(self, options: Options = Options(), ranks: tuple[int, ...] | None = None,
                      params: Params = Params()) -> tuple[Breakdown, list[str]]:
        """The breakdown of every rank (or of ``ranks``) of the iteration looked at, or
        of the traces and tables named (several, as ``traceviz breakdown`` takes), and
        the ranks left out (one line each)."""
        def make() -> tuple[Breakdown, list[str]]:
            failed: list[str] = []
            named = ([self.inputs()] if self.source.one_job_folder
                     else list(self.source.paths))
            return products.breakdown(named, options, ranks, params, failed,
                                      self.topology, self.source.workers), failed
        return self._keep(("breakdown", options, ranks, params), make)

    def temporal_breakdown(self, whole_trace: bool = False, **options) -> pa.Table:
        """Per rank and iteration (the ledger's window of the step; -1: the time outside
        every window): idle / compute / non-compute (HTA's parts), the finer split of the
        span and the comm-compute overlap. ``whole_trace``: instead, one row per rank over its whole
        trace (iteration null; the CLI's temporal_breakdown.csv holds both, so a sum over
        its rows would count each rank twice)."""
        t = self.breakdown(**options).temporal_breakdown
        whole = pa.compute.is_null(t["iteration"])
        return t.filter(whole if whole_trace else pa.compute.invert(whole))

    def kernel_type_breakdown(self, **options) -> pa.Table:
        """Time in every COMP / COMM / MEM combination, summed over ranks."""
        return self.breakdown(**options).kernel_type_breakdown

    def top_kernels(self, **options) -> pa.Table:
        """Per rank and kernel type, the kernels with the most time (and ``others``)."""
        return self.breakdown(**options).top_kernels

    def idle_time(self, **options) -> pa.Table:
        """Per rank and stream, idle time by cause."""
        return self.breakdown(**options).idle_time_breakdown

    def launch_stats(self, **options) -> pa.Table:
        """Per rank, kernel launch statistics."""
        return self.breakdown(**options).launch_stats

    def overlap(self) -> pa.Table:
        """Per rank over the whole trace: compute, communication and their overlap (ns),
        and the overlap as a share of communication (%, null without communication)."""
        t = self.temporal_breakdown(whole_trace=True)
        return pa.table({"rank": t["rank"], "comp_ns": t["compute_ns"],
                         "comm_ns": t["comm_ns"], "overlap_ns": t["compute_overlapped_comm_ns"],
                         "overlap_pct": t["overlap_pct"]})

    def aggregation(self, alignment: str = "synced") -> Aggregation:
        """The aggregation (``traceviz aggregate``): micro-batch steps, category spans
        and clock offsets on one clock, the diagnosis, each rank's activities."""
        return self.aggregation_run(alignment)[0]

    def aggregation_run(self, alignment: str = "synced", folder: Path | None = None
                        ) -> tuple[Aggregation, list[str], Layout | None, str | None]:
        """The aggregation of ``folder`` (one of :attr:`folders`; default: the one
        looked at), the ranks it left out, the job's layout and why it is unknown."""
        folder = self.folder if folder is None else folder
        return self._keep(("aggregate", alignment, folder), lambda: products.aggregation(
            self.path, folder, alignment, self.topology, self.source.workers))

    def microbatches(self, alignment: str = "synced") -> pa.Table:
        """Per rank, iteration, phase and micro-batch: wall clock, compute,
        communication, overlap, idle, recompute (ns; ``traceviz aggregate``)."""
        return self.aggregation(alignment).microbatches

    def category_spans(self, alignment: str = "synced") -> pa.Table:
        """Per rank, iteration and Megatron-TraceViz category: span, busy time, kernels."""
        return self.aggregation(alignment).category_spans

    def clock_offsets(self) -> pa.Table:
        """Per rank, its clock offset from collective end times, with residuals (ns)."""
        return self.aggregation().clock_offsets

    def collectives(self) -> pa.Table:
        """Every collective call of every rank, on its own clock (one row per call)."""
        if ("collectives",) not in self._kept:
            self._kept[("collectives",)] = pa.concat_tables(
                [rank_calls(table, rank).table()
                 for rank, _, table in rank_tables(self.files, CALL_COLUMNS, [])])
        return self._kept[("collectives",)]

    def diagnose(self, *, advice: bool = True, num_layers: int | None = None,
                 link_gbps: tuple[float, float] | None = None) -> JobDiagnosis:
        """Who waits for whom and what to change (``traceviz diagnose``): ``.diagnosis``
        (``.ledger``, ``.comm_calls``, ``.ledger_waits``, ``.links``, ...), ``.advice``
        and ``.stragglers`` as typed records, ``.tables()`` as the command writes them.
        Kept beside the tables like the command's (the same result)."""
        return self._keep(("diagnose", advice, num_layers, link_gbps),
                          lambda: products.job_diagnosis(self.inputs(cpu=advice), self.topology,
                                                         advice, num_layers, link_gbps,
                                                         self.source.workers))

    @cached_property
    def is_op_timeline(self) -> bool:
        """Whether the job as named is an op timeline (per-op timers of every rank and
        step, :mod:`traceviz.ingest.op_timeline`) rather than profiler traces."""
        return len(self.source.paths) == 1 and is_op_timeline(self.path)

    def timeline_diagnosis(self, *, num_layers: int | None = None) -> TimelineDiagnosis:
        """Why the job is slow and since when, from its op timeline (``traceviz diagnose``
        on one): ``.advice``, ``.stragglers_table``, ``.steps`` (each step's slowdown),
        ``.heat`` (worker x step), ``.tables()``."""
        if not self.is_op_timeline:
            raise TraceVizError(f"{self.path}: not an op timeline (diagnose it as traces)")
        return self._keep(("timeline", num_layers),
                          lambda: products.timeline_diagnosis(self.path, num_layers,
                                                              self.source.workers))

    def report(self, *, global_batch_size: int | None = None, seq_len: int | None = None,
               params: float | None = None, flops_per_token: float | None = None,
               peak_tflops: float | None = None, peak_bw_gbps: float | None = None,
               model: str | None = None, config_file: str | None = None,
               clock_sync: bool = True) -> Report:
        """The collectives and throughput report (``traceviz report``) as its typed record
        (:class:`~traceviz.analysis.report_types.Report`; kept: a copy each call, so
        changing one leaves the next alone; JSON: :func:`~traceviz.analysis.report.
        report_json`); ``params`` in
        billions gives 6N FLOPs per token; ``config_file``: a TorchTitan TOML."""
        if flops_per_token is None and params is not None:
            flops_per_token = training_flops_per_token(params * 1e9)
        overrides = {k: v for k, v in (
            ("global_batch_size", global_batch_size), ("seq_len", seq_len),
            ("flops_per_token", flops_per_token), ("peak_tflops", peak_tflops),
            ("peak_bw_gbps", peak_bw_gbps), ("model", model)) if v is not None}
        def make() -> Report:
            inputs = self.inputs(cpu=True)
            if Path(inputs).is_dir():  # its diagnosis, kept: made on the job's workers
                with contextlib.suppress(TraceVizError):  # the report says why not
                    self.diagnose()
            return make_report(inputs, config_file=config_file,
                               overrides=overrides, topology=self.topology,
                               clock_sync=clock_sync, workers=self.source.workers)

        return copy.deepcopy(self._keep(
            ("report", tuple(sorted(overrides.items())), config_file, clock_sync), make))

    def step_windows(self) -> tuple[pa.Table, str]:
        """Every rank's micro-batch steps and how they were put on one clock
        (:func:`~traceviz.render.words.clock_words`)."""
        return self._keep(("steps",), lambda: products.step_windows(
            self.path, self.folder, self.topology, self.source.workers))

    def pipeline_views(self, iteration: int | None = None, all_groups: bool = False
                       ) -> PipelineViews:
        """The pipeline views (``traceviz pipeline``): per PP group looked at, measured
        and ideal steps and its stage table."""
        return self.pipeline_run(iteration, all_groups)[0]

    def pipeline_run(self, iteration: int | None = None, all_groups: bool = False
                     ) -> tuple[PipelineViews, list[str]]:
        """:meth:`pipeline_views` and the ranks it left out (one line each)."""
        def make() -> tuple[PipelineViews, list[str]]:
            failed: list[str] = []
            if self.is_op_timeline and not find_dumps(self.path):  # a step of its timers
                return products.timeline_pipeline(self.path, iteration, all_groups), failed
            # timer dumps as named; a job's iteration: looked for among every profiled
            # one when asked for, else the one looked at
            source = (self.path if find_dumps(self.path) or iteration is not None
                      else self.inputs())
            return products.pipeline(source, vpp=self.source.vpp, iteration=iteration,
                                     all_groups=all_groups, topology=self.topology,
                                     failed=failed), failed
        return self._keep(("pipeline", iteration, all_groups), make)

    def pipeline(self, iteration: int | None = None, all_groups: bool = False) -> pa.Table:
        """Per PP stage: busy time, bubbles (measured, ideal, analytic), warm-up / steady
        / cool-down, the critical stage (``traceviz pipeline``)."""
        return self.pipeline_views(iteration, all_groups).stages

    def pipeline_gaps(self, iteration: int | None = None, all_groups: bool = False
                      ) -> pa.Table:
        """The largest losses against the ideal schedule, per PP group."""
        return self.pipeline_views(iteration, all_groups).gaps

    def _by_rank(self, rank: int | None) -> Path:
        """What a product that reads CPU tables is computed from: the job as named when
        one ``rank`` of it is asked for (its trace read alone), else :meth:`_source`."""
        return self.path if rank is not None else self.inputs(cpu=True)

    def inputs(self, cpu: bool = False) -> Path:
        """What a product is computed from: one trace as it is, else the tables of the
        iteration looked at (:attr:`folder`), parsed with the CPU tables where ``cpu``
        (opened by a command, a folder of several profiled iterations is an error naming
        them)."""
        if self.path.is_file():
            return self.path
        folders = self._folders(cpu)
        if self.source.iteration is None and not self.source.first_iteration:
            only_folder(folders, self.path)
        return self.folder

    def critical_path(self, *, iteration: int | None = None, annotation: str | None = None,
                      instance: int = 0, rank: int | None = None, hta_compat: bool = False,
                      what_if: tuple[str, ...] = (), clock_sync: bool = True
                      ) -> CriticalPath | HtaPath:
        """The critical path (``traceviz critical-path``): one rank's (``rank``, or a
        one-trace job) or the job's path, its summaries (``.by_category``, ``.by_rank``,
        ``.by_phase``) and the ``what_if`` re-timings (``.what_if``); with
        ``hta_compat``, HTA's path and ``bound_by`` summary (``.summary``)."""
        return self.critical_path_run(iteration=iteration, annotation=annotation,
                                      instance=instance, rank=rank, hta_compat=hta_compat,
                                      what_if=what_if, clock_sync=clock_sync)[0]

    def critical_path_run(self, *, iteration: int | None = None,
                          annotation: str | None = None, instance: int = 0,
                          rank: int | None = None, hta_compat: bool = False,
                          what_if: tuple[str, ...] = (), clock_sync: bool = True
                          ) -> tuple[CriticalPath | HtaPath, Path | None, Path | None]:
        """:meth:`critical_path`, the one trace it was read from (None: a job) and the
        folder of tables it was read from (None: one rank)."""
        key = ("critical_path", iteration, annotation, instance, rank, hta_compat,
               tuple(what_if), clock_sync)
        return self._keep(key, lambda: products.critical_path(
            self._by_rank(rank), iteration=iteration, annotation=annotation, instance=instance,
            rank=rank, hta_compat=hta_compat, what_if=tuple(what_if), clock_sync=clock_sync,
            topology=self.topology, workers=self.source.workers))

    def ops(self, *, rank: int | None = None, peak_tflops: float | None = None) -> OpModel:
        """The op model (``traceviz ops``): ``.calls`` (every modelled call),
        ``.by_shape``, ``.by_module``, ``.iterations`` (MFU), ... or ``.tables()`` by
        name."""
        return self.ops_run(rank=rank, peak_tflops=peak_tflops)[0]

    def ops_run(self, *, rank: int | None = None, peak_tflops: float | None = None
                ) -> tuple[OpModel, list[str]]:
        """:meth:`ops` (each rank's made on the job's workers) and the ranks it leaves
        out (one line each)."""
        def make() -> tuple[OpModel, list[str]]:
            failed: list[str] = []
            return products.ops(self._by_rank(rank), rank=rank, peak_tflops=peak_tflops,
                                workers=self.source.workers, failed=failed), failed
        return self._keep(("ops", rank, peak_tflops), make)

    def memory(self, *, rank: int | None = None) -> JobMemory:
        """Where GPU memory goes (``traceviz memory``; traces recorded with
        ``profile_memory=True``): ``.ranks`` (each rank's ``timeline``, ``peak`` by
        origin, ``ops``, ``summary``), ``.stage_peaks()``, ``.tables()`` by name."""
        return self.memory_run(rank=rank)[0]

    def memory_run(self, *, rank: int | None = None) -> tuple[JobMemory, list[str]]:
        """:meth:`memory` and the ranks without allocator events."""
        return self._keep(("memory", rank), lambda: products.memory(self._by_rank(rank),
                                                                    rank=rank))

    @staticmethod
    def hang(dumps: str | os.PathLike) -> Hang:
        """Who hangs the job (``traceviz hang``) from its ranks' NCCL Flight Recorder
        dumps in ``dumps``: ``.verdict`` (lines), ``.causes``, ``.ranks`` (each rank's
        wait), ``.rank_table()`` / ``.group_table()``."""
        dumped, _ = read_dumps(dumps)
        return analyze(dumped)

    # ---- figures ----------------------------------------------------------------------

    def figures(self) -> dict[str, Drawing]:
        """Every figure the breakdown, the aggregation and the pipeline view draw, by file
        name; ``figure.figure()`` is a matplotlib figure (shown inline in Jupyter),
        ``figure.save(path)`` writes the PNG. Nothing is drawn until asked."""
        out = breakdown_figures(self.breakdown().tables(), [])
        agg, _, layout, note = self.aggregation_run()
        out.update(aggregation_files(agg, layout, note).figures)
        try:
            out.update(views_result(self.pipeline_views()).figures)
        except TraceVizError:
            pass  # no pipeline in this job
        return out
