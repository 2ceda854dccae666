"""Each analysis of a job or trace from its files: the tables loaded (traces parsed first
where needed, :mod:`.tables`), the layout found (:mod:`.topology`), and the typed result
of :mod:`traceviz.analysis` returned. The commands write these results to files; the
notebook API (:class:`traceviz.Job`) returns them.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..analysis.activities import Options, activities
from ..analysis.aggregation import READ_COLUMNS as AGGREGATION_COLUMNS  # steps + calls
from ..analysis.aggregation import Aggregation, aggregation_of
from ..analysis.breakdown import (
    READ_COLUMNS,
    READ_OPTIONAL,
    Breakdown,
    BreakdownPart,
    Params,
    breakdown_of,
    breakdown_part,
)
from ..analysis.critical_path import rank_graph as R
from ..analysis.critical_path.paths import (
    CriticalPath,
    HtaPath,
    job_critical_path,
    rank_path,
)
from ..analysis.activities import COLUMNS as ACTIVITY_COLUMNS
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.critical_path.paths import iteration_window, job_path, what_if_context
from ..analysis.advice import Advice, JobDiagnosis, advise
from ..analysis.diagnose.diagnosis import Diagnosis, diagnosis_of, synced_activities
from ..analysis.diagnose.waits import META_COLUMNS, JobComm, job_comm, job_comm_of
from ..analysis.memory import JobMemory, rank_memory
from ..analysis.timeline.diagnosis import (
    TimelineDiagnosis,
    diagnose_model,
    diagnose_timeline,
)
from ..ingest.op_timeline import read_op_timeline
from ..analysis.timeline.layout import complete_layout
from ..analysis.microbatches import microbatch_table
from ..analysis.ops import rank_ops
from ..analysis.ops_summary import OpModel, op_model
from ..analysis.pipeline import (
    GroupView,
    PipelineViews,
    focus_group,
    pipeline_view,
    pipeline_views,
)
from ..errors import TraceVizError, UsageError
from ..table.parked import release_free_memory
from ..table.records import records
from ..topology.layout import Layout
from ..ingest import job_cache
from ..ingest.tables import (
    ensure_tables,
    file_rank,
    job_files,
    has_cpu_tables,
    input_files,
    is_trace_file,
    load_with_memory,
    numbered,
    one_rank_with_cpu,
    own_tables,
    rank_files,
    rank_of,
    rank_tables,
    tables_folder,
)
from ..ingest.batch import failures_of, failures_of_files
from ..ingest.rank_pieces import (
    RankMap,
    Workers,
    breakdown_parts,
    comm_parts,
    rank_activities,
    rank_op_models,
)
from ..ingest.timeline_pieces import on_workers
from ..ingest.timer_dump import NAME, find_dumps, read_group
from ..ingest.topology import job_layout, pipeline_groups


def timeline_diagnosis(path: str | os.PathLike, num_layers: int | None = None,
                       workers: Workers = Workers()) -> TimelineDiagnosis:
    """The diagnosis of the op timeline at ``path`` (a file or a folder of them), a block
    of its steps at a time on ``workers`` where it is large enough
    (:mod:`~traceviz.ingest.timeline_pieces`), else in this process."""
    run = on_workers(path, workers)
    if run is None:
        return diagnose_timeline(read_op_timeline(path), num_layers)
    return diagnose_model(run.model, run, num_layers)


def breakdown(paths: Sequence[str | os.PathLike], options: Options = Options(),
              ranks: tuple[int, ...] | None = None, params: Params = Params(),
              failed: list[str] | None = None, topology: str | os.PathLike | None = None,
              workers: Workers = Workers()) -> Breakdown:
    """The breakdown of every rank of ``paths`` (traces, tables or folders of either), or
    of ``ranks``; the ranks that cannot be read go to ``failed``; ``topology``: the
    job's layout file (the kept diagnosis of that layout splits its time). A job's
    tables: each rank's part made where its table is read (``workers``), and the
    breakdown kept beside them where no rank is left out."""
    failed = [] if failed is None else failed
    files = input_files(paths)
    folders = {f.parent for f in files}
    # every table of one folder (a job's): the breakdown is kept beside them, and
    # computed with its diagnosis's split where that is kept
    folder = (folders.pop() if len(folders) == 1 and len(files) > 1
              and all(f.suffix == ".parquet" for f in files) else None)
    if folder is not None and set(files) != set(input_files([folder])):
        folder = None  # some of its tables, named: the kept results are the folder's
    key = (job_cache.key_of(folder, None, {
        "options": dataclasses.asdict(options), "params": dataclasses.asdict(params),
        "ranks": ranks}) if folder is not None else None)
    if folder is not None and key is not None:
        found = job_cache.load(folder, "breakdown", key)
        if found is not None:
            failed += found[1]["failed"]
            return Breakdown(**found[0], ranks=tuple(found[1]["ranks"]))
    lost: list[str] = []
    if folder is not None:
        failed += failures_of(folder)  # traces that never became a table
        parts: Iterable[BreakdownPart] = breakdown_parts(
            numbered(files), READ_COLUMNS, READ_OPTIONAL, options, ranks, workers, lost)
        failed += lost
    else:  # traces or tables named: each parsed or read here, one at a time
        parts = (breakdown_part(table, options, rank, ranks)
                 for rank, _, table in rank_tables(files, READ_COLUMNS, failed,
                                                   READ_OPTIONAL))
    result = breakdown_of(parts, options, ranks, params, failed,
                          cached_diagnosis(folder, topology) if folder is not None else None)
    if folder is not None and key is not None and not lost:
        job_cache.store(folder, "breakdown", key, result.tables(),
                        {"ranks": list(result.ranks), "failed": list(failed)})
    return result


def aggregation(root: Path, folder: Path, alignment: str = "synced",
                topology: str | os.PathLike | None = None, workers: Workers = Workers()
                ) -> tuple[Aggregation, list[str], Layout | None, str | None]:
    """The aggregation of one folder of rank tables, the ranks that could not be read
    (one line each), the job's layout and why it is not known (None when it is);
    ``workers``: where each rank's table is read (:func:`~traceviz.ingest.rank_pieces.
    comm_parts`)."""
    files = own_tables(root, folder)
    if is_trace_file(root):  # one trace: its own table, else why it has none
        failed: list[str] = []
        if not files:
            why = [f for f in failures_of(folder) if root.name in f]
            raise TraceVizError(f"{root}: no table was parsed from it" +
                                (f" ({why[0]})" if why else "; parse it with 'traceviz "
                                 "batch'"))
    else:
        failed = failures_of(folder)  # traces that never became a table
    parts = comm_parts(numbered(files), AGGREGATION_COLUMNS, workers, failed) \
        if files else []
    if not parts:
        raise TraceVizError(f"{folder}: no parsed rank tables (run 'traceviz batch' first)")
    layout, layout_note = job_layout(root, folder, topology)
    groups = pipeline_groups(layout, max(p.acts.rank for p in parts))
    return (aggregation_of(parts, alignment, groups, _folder_diagnosis(root, folder, topology)),
            failed, layout, layout_note)


def _folder_diagnosis(root: Path, folder: Path, topology: str | os.PathLike | None
                      ) -> Diagnosis | None:
    """The diagnosis kept beside the tables of ``folder`` where it is the job ``root``'s
    (not one trace of it), else None."""
    return None if is_trace_file(root) else cached_diagnosis(folder, topology)


DIAGNOSIS_COLUMNS = tuple(dict.fromkeys(ACTIVITY_COLUMNS + CALL_COLUMNS + META_COLUMNS))


def cached_diagnosis(folder: Path, topology: str | os.PathLike | None = None
                     ) -> Diagnosis | None:
    """The diagnosis kept beside the tables of ``folder`` (default options), None where
    there is none up to date (nothing is computed)."""
    key = job_cache.key_of(folder, topology, {"num_layers": None, "link_gbps": None})
    hit = job_cache.load_diagnosis(folder, key, advice=False)
    return hit[0] if hit is not None else None


def diagnosis(root: str | os.PathLike, topology: str | os.PathLike | None = None,
              advice: bool = False, num_layers: int | None = None,
              link_gbps: tuple[float, float] | None = None, workers: Workers = Workers()
              ) -> tuple[Diagnosis, list[str], pa.Table | None]:
    """The diagnosis of ``root``, the ranks it leaves out (one line each) and, with
    ``advice``, the advice (its savings re-timed on the job's graph, which needs the
    ranks' CPU tables: parsed with the traces; tables without them give no savings);
    ``num_layers`` / ``link_gbps``: see :func:`~traceviz.analysis.diagnose.diagnosis.
    diagnose`; ``workers``: where each rank's share is made (:mod:`~traceviz.ingest.
    rank_pieces`). A job's diagnosis is computed once and kept beside its tables
    (:mod:`.job_cache`) until they change; not where a rank was lost to a worker that
    died or a table that cannot be read (run it again)."""
    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    folder = root if root.is_dir() else root.parent
    options = {"num_layers": num_layers, "link_gbps": link_gbps}
    if not root.is_dir():
        return _diagnosis(root, folder, topology, advice, options, workers)[:3]
    tables = tables_folder(root, cpu=advice)
    key = job_cache.key_of(tables, topology, options)
    hit = job_cache.load_diagnosis(tables, key, advice)
    if hit is not None:
        diag, adv, failed = hit
        return diag, failed, adv if advice else None
    # the layout: the one kept beside the tables (found from their sends / receives)
    # where the traces state none
    diag, failed, adv, whole = _diagnosis(root, tables, topology, advice, options, workers,
                                          tables)
    if whole:
        job_cache.store_diagnosis(tables, key, diag, adv, failed)
    return diag, failed, adv


def job_diagnosis(root: str | os.PathLike, topology: str | os.PathLike | None = None,
                  advice: bool = True, num_layers: int | None = None,
                  link_gbps: tuple[float, float] | None = None,
                  workers: Workers = Workers()) -> JobDiagnosis:
    """:func:`diagnosis` as the typed result ``traceviz diagnose`` writes."""
    diag, failed, adv = diagnosis(root, topology, advice, num_layers, link_gbps, workers)
    return JobDiagnosis(diag, adv, tuple(failed))


def _diagnosis(root: Path, folder: Path, topology, advice: bool, options: dict,
               workers: Workers, tables_dir: Path | None = None
               ) -> tuple[Diagnosis, list[str], pa.Table | None, bool]:
    """The diagnosis computed (see :func:`diagnosis`), and whether every rank was read
    (none lost to a worker that died or a table that cannot be read)."""
    failed: list[str] = []
    if advice and tables_dir is not None and has_cpu_tables(tables_dir):
        notes: list[str] = []
        # the same tables' op model, for report / html: each rank's ops while its CPU
        # table is read for its graph (one at a time)
        op_key = job_cache.key_of(tables_dir, None, {"peak_tflops": None})
        need_ops = job_cache.load_op_model(tables_dir, op_key) is None
        mapped = RankMap(workers)

        def keep_ops(ranks: list) -> None:  # a whole job's op model only
            if ranks and not mapped.failed:
                job_cache.store_op_model(tables_dir, op_key, op_model(ranks))

        jp = job_path(rank_files(tables_dir), notes, where=str(tables_dir),
                      also=rank_ops if need_ops else None, take_also=keep_ops,
                      pieces_of=mapped)
        failed += mapped.failed
        diag = diagnosis_of(jp.jc, _pipelines(root, folder, topology, jp.jc.acts),
                            **options)
        if diag.synced and not mapped.failed:  # the step windows, while at hand
            _store_steps(tables_dir, topology, microbatch_table(jp.jc.acts), diag.clocks)
        ctx = what_if_context(jp.jc, jp.jg, jp.measured, diag,
                              iteration_window(jp.jc.acts, jp.ranks[0].window))
        del jp  # the advice re-times the graph: the ranks' activities are let go first
        release_free_memory()
        diag.notes += [n for n in notes if n not in diag.notes]
        adv = advise(diag, ctx)
        # the stragglers' cost: the re-timed saving of fixing each
        diag.speed = diag.speed.with_costs({
            a.target_rank: a.saving_ns for a in records(Advice, adv)
            if a.target_rank is not None and a.saving_ns is not None
            and a.what_if.startswith("straggler:")})
        return diag, failed, adv, not mapped.failed
    jc, whole = _job_comm(root, workers, failed)
    diag = diagnosis_of(jc, _pipelines(root, folder, topology, jc.acts), **options)
    why = ("one rank: nothing to re-time across ranks" if len(jc.acts) < 2 else
           "the ranks' CPU tables are not parsed (run 'traceviz batch JOB --cpu', or give "
           "diagnose the traces)")
    return diag, failed, advise(diag, None, why) if advice else None, whole


def _job_comm(root: Path, workers: Workers, failed: list[str]) -> tuple[JobComm, bool]:
    """The matched communication of ``root``'s ranks (one profiled iteration's tables,
    its traces parsed first where needed), each rank's activities and communication made
    where its table is read (``workers``: :func:`~traceviz.ingest.rank_pieces.
    comm_parts`), and whether every rank was read (none lost to a worker that died or
    to a table that cannot be read: such a diagnosis is not kept, as the advice's is
    not); the ranks left out go to ``failed`` (one line each), after the traces the
    last batch failed to parse."""
    files = job_files(root)
    failed += failures_of_files(files)  # traces that never became a table
    lost: list[str] = []
    parts = comm_parts(numbered(files), DIAGNOSIS_COLUMNS, workers, lost)
    failed += lost
    if not parts:
        raise TraceVizError(f"{root}: no rank could be read" + "".join(
            f": {f}" for f in failed[:1]))
    return job_comm_of(parts), not lost


def _pipelines(root: Path, folder: Path, topology, ranks) -> list[list[int]] | None:
    """The PP groups of the job's layout (None: no layout, or not this job's size)."""
    if len(ranks) < 2:
        return None
    top = max(ranks) if isinstance(ranks, dict) else max(a.rank for a in ranks)
    return pipeline_groups(job_layout(root, folder, topology)[0], top)



def step_windows(root: Path, folder: Path, topology: str | os.PathLike | None = None,
                 workers: Workers = Workers()) -> tuple[pa.Table, str]:
    """Every rank's micro-batch steps (the aggregation's ``microbatches``) and how they
    were put on one clock (the diagnosis's verdict where it synced them: "shifted", "own
    clocks"; else the aggregation's: "none" where nothing links the ranks), each rank's
    activities made on ``workers``: kept beside the tables where no rank is left
    out; of one trace (``root``), its own steps, not kept."""
    if is_trace_file(root):  # one trace: its own steps (nothing else to sync)
        agg = aggregation(root, folder, topology=topology, workers=workers)[0]
        return agg.microbatches, agg.clocks
    found = job_cache.load(folder, "step_windows", job_cache.key_of(folder, topology, {}))
    if found is not None:
        return found[0]["microbatches"], str(found[1]["clocks"])
    diag = cached_diagnosis(folder, topology)
    steps: pa.Table | None = None
    lost: list[str] = []
    if diag is not None and diag.synced:  # the diagnosis's clocks: no matching again
        files = own_tables(root, folder)
        own = rank_activities(numbered(files), AGGREGATION_COLUMNS, workers, lost)
        acts = synced_activities(diag, own) if not lost else None
        if acts is not None:
            steps, clocks = microbatch_table(acts), diag.clocks
    if steps is None:
        agg, lost, _, _ = aggregation(root, folder, topology=topology, workers=workers)
        steps, clocks = agg.microbatches, agg.clocks
    if only_unparsed(folder, lost):  # a rank's table or worker lost: made again
        _store_steps(folder, topology, steps, clocks)
    return steps, clocks


def only_unparsed(folder: Path, failed: list[str]) -> bool:
    """Whether ``failed`` names only the traces the last batch into ``folder`` failed to
    parse (the folder's own state): a result that lost no rank to a table that cannot
    be read or a worker that died, which may be kept beside the tables."""
    return set(failed) <= set(failures_of(folder))


def _store_steps(folder: Path, topology: str | os.PathLike | None, steps: pa.Table,
                 clocks: str) -> None:
    """Keep the step windows of ``folder`` (see :func:`step_windows`)."""
    job_cache.store(folder, "step_windows", job_cache.key_of(folder, topology, {}),
                    {"microbatches": steps}, {"clocks": clocks})


def _timer_dump_views(root: Path, all_groups: bool) -> PipelineViews:
    """The views from PP-Schedule-Visualization's timer dumps (one PP group per
    TPxCPxDP rank; by default rank 0, as its plot.py draws)."""
    ids = sorted({int(m.group(3)) for p in find_dumps(root) if (m := NAME.match(p.name))})
    views = []
    for i in ids if all_groups else ids[:1]:
        g = read_group(root, i)
        views.append(GroupView(i, g.ranks, None,
                               pipeline_view(g.rows, g.ranks, g.vpp, g.total_ns), []))
    return PipelineViews(views, [])


def timeline_pipeline(path: str | os.PathLike, step: int | None = None,
                      all_groups: bool = False) -> PipelineViews:
    """The views of an op timeline's step (``step``, else its first) from its forward
    and backward compute of each micro-batch: one pipeline (DP rank 0, TP rank 0; every
    pipeline with ``all_groups``), the step's span per rank as its iteration."""
    tl = complete_layout(read_op_timeline(path))
    steps = sorted(set(tl.step.tolist()))
    chosen = steps[0] if step is None else step
    if chosen not in steps:
        raise TraceVizError(f"{path}: no step {step} in the op timeline (steps "
                            f"{steps[0]}..{steps[-1]})")
    mine = tl.step == chosen
    names = {i: n for i, n in enumerate(tl.names)}
    compute = np.isin(tl.op, [i for i, n in names.items()
                              if n in ("forward-compute", "backward-compute")])
    use = mine & compute & (tl.microbatch >= 0)
    if not use.any():
        raise TraceVizError(f"{path}: no forward / backward compute with a micro-batch in "
                            f"step {chosen}: no pipeline schedule to draw")
    views = []
    for d in sorted(set(tl.dp.tolist())) if all_groups else [0]:
        ranks = [int(tl.ranks[np.flatnonzero((tl.stage == p) & (tl.dp == d)
                                             & (tl.tp == tl.tp.min()))[0]])
                 for p in range(int(tl.stage.max()) + 1)]
        rows, total = [], {}
        for r in ranks:
            here = mine & (tl.rank == r)
            total[r] = int((tl.start[here] + tl.dur[here]).max() - tl.start[here].min())
            for i in np.flatnonzero(use & (tl.rank == r)):
                rows.append({"rank": r, "phase": "Forward" if names[int(tl.op[i])] ==
                             "forward-compute" else "Backward",
                             "microbatch": int(tl.microbatch[i]),
                             "chunk": int(tl.chunk[i]), "start_ns": int(tl.start[i]),
                             "wall_clock_ns": int(tl.dur[i])})
        views.append(GroupView(int(d), ranks, chosen, pipeline_view(
            rows, ranks, int(tl.chunk.max()) + 1, total), []))
    return PipelineViews(views, list(tl.notes))


def _folder_views(root: Path, folder: Path, vpp: int | None, iteration: int | None,
                 all_groups: bool, topology, failed: list[str]) -> PipelineViews | None:
    """The views of one folder of rank tables (None when it lacks ``iteration``); the
    ranks that cannot be read go to ``failed``. The job's diagnosis (kept beside the
    tables, :func:`diagnosis`) picks the group and puts its ranks on the synced clocks
    with their communication split: only the ranks drawn are read."""
    layout, note = job_layout(root, folder, topology)
    if layout is None:
        raise TraceVizError(f"{folder}: {note}; pass --topology")
    every = layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"]
    diag, left_out, _ = diagnosis(folder, topology)
    failed += left_out
    files = own_tables(folder, folder)
    complete = [g for g in every if set(g) <= set(diag.ranks)]
    first = focus_group(complete, diag.stragglers["rank"].to_pylist() + diag.chain_ranks())
    wanted = None if all_groups or not complete else set(first or complete[0])
    if wanted is not None:
        files = [p for p in files if file_rank(p) in wanted]
    # the aggregation's columns: steps and calls
    def read() -> Iterator[tuple[int, pa.Table]]:
        return ((rank, t) for rank, _, t in rank_tables(files, AGGREGATION_COLUMNS, []))

    acts = synced_activities(diag, (activities(t, rank=r) for r, t in read()))
    if not acts:  # tables the diagnosis did not see: match their ranks again
        acts = job_comm(dict(read())).acts
    ranks = {a.rank: a for a in acts}
    return pipeline_views(ranks, diag, every, iteration, vpp, all_groups, str(folder))


def pipeline(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
             all_groups: bool = False, topology: str | os.PathLike | None = None,
             failed: list[str] | None = None) -> PipelineViews:
    """The views (from timer dumps when ``root`` holds them, else from its rank tables:
    the first profiled iteration, or ``iteration`` wherever it was profiled). ``vpp``
    None: as the tables were classified (found from the traces)."""
    root = Path(root)
    if find_dumps(root):
        return _timer_dump_views(root, all_groups)
    failed = [] if failed is None else failed
    found: PipelineViews | None = None
    for folder in ensure_tables(root, topology=topology, vpp=vpp):
        views = _folder_views(root, folder, vpp, iteration, all_groups, topology, failed)
        if views is not None:
            found = views if found is None else PipelineViews(
                found.groups + views.groups, found.notes + views.notes)
            if iteration is None:
                break
    if found is None:
        raise TraceVizError(f"{root}: no ProfilerStep {iteration} among its profiled "
                            "iterations")
    return found


def ops(path: str | os.PathLike, *, rank: int | None = None,
        peak_tflops: float | None = None, workers: Workers = Workers(),
        failed: list[str] | None = None) -> OpModel:
    """The op model of ``path`` (one trace / table, ``--rank`` of a job, or a job: each
    rank's made where its tables are read, on ``workers``; kept beside the tables,
    :mod:`.job_cache`, where no rank is left out); the ranks left out go to ``failed``
    (one line each)."""
    path = Path(path)
    failed = [] if failed is None else failed
    one = one_rank_with_cpu(path, rank)
    if one:
        return op_model([rank_ops(*one, peak_tflops)])
    folder = tables_folder(path, cpu=True)
    failed += failures_of(folder)  # traces that never became a table
    key = job_cache.key_of(folder, None, {"peak_tflops": peak_tflops})
    model = job_cache.load_op_model(folder, key)
    if model is None:
        lost: list[str] = []
        model = op_model(rank_op_models(rank_files(folder), peak_tflops, workers, lost))
        failed += lost
        if not lost:
            job_cache.store_op_model(folder, key, model)
    return model


def memory(path: str | os.PathLike, *, rank: int | None = None) -> tuple[JobMemory, list[str]]:
    """Where GPU memory goes on ``path`` (a trace, a table, ``rank`` of a job, or a job):
    its ranks' allocator events (:mod:`traceviz.analysis.memory`), and a line for each
    rank whose trace has none. A one-line error when no rank has any."""
    ranks, missing, seen = [], [], 0
    for r, g, c, m in load_with_memory(Path(path), rank):  # one rank's tables at a time
        seen += 1
        if m is None:
            missing.append(f"rank {r}: no allocator events in its trace")
        else:
            ranks.append(rank_memory(m, g, c, r))
    if rank is not None and not seen:
        raise TraceVizError(f"{path}: no rank {rank} among its traces")
    if not ranks:
        raise TraceVizError(f"{path}: no allocator events ([memory]) in the trace(s): "
                            "profile with torch.profiler.profile(profile_memory=True) (with "
                            "record_shapes=True and with_modules=True the blocks are tied "
                            "to their ops and modules)")
    return JobMemory(ranks), missing


def _window_args(iteration: int | None, annotation: str | None, instance: int
                 ) -> tuple[str | None, int]:
    """(annotation, instance); annotation None: ProfilerStep, else the whole trace."""
    if iteration is not None:
        if annotation:
            raise UsageError("give --iteration or --annotation, not both")
        return f"{R.DEFAULT_ANNOTATION}#{iteration}", 0
    return annotation, instance


def critical_path(path: str | os.PathLike, *, iteration: int | None = None,
                  annotation: str | None = None, instance: int = 0, rank: int | None = None,
                  hta_compat: bool = False, what_if: tuple[str, ...] = (),
                  clock_sync: bool = True, topology: str | os.PathLike | None = None,
                  workers: Workers = Workers()
                  ) -> tuple[HtaPath | CriticalPath, Path | None, Path | None]:
    """The critical path of ``path``: one rank (a trace, a table, or ``rank`` of a job)
    or the job (:mod:`traceviz.analysis.critical_path.paths`); with the rank's trace
    (None: a table) or the job's folder of tables it came from; ``topology``: the job's
    layout file (its diagnosis is the one ``diagnose`` keeps); ``workers``: where each
    rank's share of the job's graph is made."""
    path = Path(path)
    ann, inst = _window_args(iteration, annotation, instance)
    exact = iteration is not None  # ProfilerStep#1 is not ProfilerStep#10
    one = one_rank_with_cpu(path, rank)
    if one:
        trace = path if path.is_file() and path.suffix != ".parquet" else None
        named = rank_of(one[0], path, 0 if rank is None else rank)  # as every command does
        return (rank_path(*one, ann, inst, hta_compat, list(what_if), exact, named), trace,
                None)
    if hta_compat:
        raise UsageError("--hta-compat is for one rank (HTA analyses one rank); add --rank N")
    folder = tables_folder(path, cpu=True)
    # the job's diagnosis where it is kept (its clocks, its stragglers for the what-ifs);
    # computed (and kept) here when a what-if needs it
    diag = None
    if clock_sync:
        diag = (diagnosis(folder, topology, workers=workers)[0] if what_if
                else cached_diagnosis(folder, topology))
    mapped = RankMap(workers)
    result = job_critical_path(rank_files(folder), ann, inst, list(what_if), clock_sync,
                               exact, str(folder), diag, mapped)
    result.failed += mapped.failed  # named, left out
    return result, None, folder
