"""``traceviz html``: the report, the breakdown, the pipeline view, the micro-batch step
windows and the op model of one job (:class:`traceviz.job.Job`: its traces
parsed first when needed, its diagnosis computed once) on one self-contained page
(:mod:`traceviz.render.html_page`) with interactive plots
(:mod:`traceviz.render.interactive`)."""
from __future__ import annotations

import os

from ..analysis.advice import JobDiagnosis
from ..analysis.hang import analyze
from ..analysis.report_types import Report
from ..errors import TraceVizError
from ..ingest.flight_recorder import read_dumps
from ..job import Job
from ..ingest.tables import has_cpu_tables, has_memory_tables
from ..render.breakdown_figures import OVERLAP_FIGURE, breakdown_figures, kernel_figures
from ..render.hang_files import hang_result
from ..render.html_page import (
    HangSection,
    MemorySection,
    OpsSection,
    PipelineSection,
    report_page,
    timeline_page,
)
from ..render.timeline_figures import heatmap_figure, slowdown_figure
from ..render.interactive import (
    BAR_ROWS,
    click_hook,
    group_drilldown,
    job_heatmap,
    job_timeline,
    to_html,
)
from ..render.memory_files import memory_result
from ..render.ops_files import header_lines, ops_result
from ..render.pipeline_files import first_figure, views_result
from ..render.words import clock_words, on_one_clock
from ..table.result import Result


def _plots(mb: list[dict], places: list[dict], stages: list[dict],
           clocks: str, focus: int | None = None) -> dict[str, str]:
    """The page's interactive plots (HTML): the job timeline (rows by pipeline group and
    stage of ``places``; beyond :data:`BAR_ROWS` ranks a heatmap over a drill-down into
    one pipeline group, the one holding ``focus`` first), and the first PP group's steps
    (``stages`` of the pipeline view); plotly's JavaScript goes with the first one."""
    plots: dict[str, str] = {}
    if not mb:
        return plots
    ranks = len({r["rank"] for r in mb})
    title = "Micro-batch steps of every rank" + ("" if on_one_clock(clocks) or ranks == 1
                                                 else f" ({clock_words(ranks, clocks)})")
    if ranks <= BAR_ROWS:
        plots["timeline"] = to_html(job_timeline(mb, places or stages, title, clocks),
                                    "job-timeline", include_js=True)
    else:
        heatmap, labels = job_heatmap(mb, places or stages, title, clocks)
        plots["timeline"] = to_html(heatmap, "job-timeline", include_js=True)
        if places or stages:
            drill, index = group_drilldown(mb, places or stages, focus, clocks)
            plots["timeline"] += (to_html(drill, "job-drilldown", include_js=False)
                                  + click_hook("job-timeline", "job-drilldown", index,
                                               labels))
    first = [s for s in stages if s["pp_group"] == stages[0]["pp_group"]] if stages else []
    members = {s["rank"] for s in first}
    mine = [r for r in mb if r["rank"] in members]
    if mine:
        title = f"Pipeline group {first[0]['pp_group']}: steps per stage"
        plots["pipeline"] = to_html(job_timeline(mine, first, title, clocks),
                                    "pipeline-timeline", include_js=False)
    return plots


def page_of(title: str, rep: Report, brk: Result, pipe: Result | None, why: str,
            mb: list[dict], places: list[dict], clocks: str = "shifted",
            no_timeline: str = "", model: Result | None = None, no_model: str = "",
            mem: Result | None = None, hung: Result | None = None,
            diagnosed: JobDiagnosis | None = None) -> str:
    """The page from the report dict, the breakdown's and pipeline's results (``pipe``
    None: ``why`` there is none) and the micro-batch step windows ``mb`` (on one clock as
    ``clocks`` says: :func:`~traceviz.render.words.clock_words`), rows placed by ``places``
    (:meth:`traceviz.job.Job.pipeline_places`),
    and the op model's result (``model`` None: ``no_model`` says why)."""
    kernels = [(title, fig.png()) for title, fig in kernel_figures(brk.figures)]
    overlap = brk.figures.get(OVERLAP_FIGURE)
    section, stages = None, []
    if pipe is not None:
        first = first_figure(pipe)
        section = PipelineSection(pipe.tables["pipeline_stages"], pipe.tables["pipeline_gaps"],
                                  first.png() if first else None)
        stages = pipe.tables["pipeline_stages"].to_pylist()
    ops = None if model is None else OpsSection(
        header_lines(model.value), model.tables["ops_by_shape"], model.tables["ops_by_module"],
        [(name[:-4].replace("_", " "), fig.png()) for name, fig in sorted(model.figures.items())])
    strag = diagnosed.stragglers if diagnosed is not None else ()
    memory = None if mem is None else MemorySection(
        mem.lines, mem.tables["memory_ranks"], mem.figures["memory.png"].png())
    hang = None if hung is None else HangSection(hung.lines, hung.tables["hang"])
    return report_page(title, rep, brk.tables, kernels, overlap.png() if overlap else None,
                       section, why, _plots(mb, places, stages, clocks,
                                            strag[0].rank if strag else None),
                       no_timeline or "no micro-batch steps found (no forward / backward "
                       "step launched kernels)", ops, no_model, memory, hang, diagnosed)


def run(root: Job | str | os.PathLike, output: str | os.PathLike,
        topology: str | None = None, dumps: str | os.PathLike | None = None,
        title: str | None = None, jobs: int = 1, scheduler: str | None = None,
        **facts) -> Result:
    """The page of the job under ``root``, as ``output``: the products of one
    :class:`~traceviz.job.Job` (the diagnosis computed once); ``facts``: what
    :meth:`Job.report` takes about the run; with a memory section where its ranks'
    traces have allocator events (parsed with their CPU tables), and a hang section from
    the Flight Recorder ``dumps`` when given; ``title``: default the job's name;
    ``jobs`` / ``scheduler``: where the per-rank work runs."""
    job = Job.of(root, topology, jobs=jobs, scheduler=scheduler)
    if job.is_op_timeline:  # per-op timers: their diagnosis over the steps
        diag = job.timeline_diagnosis()
        return Result(texts={os.fspath(output): timeline_page(
            title or f"traceviz: {job.path.resolve().name}", diag,
            slowdown_figure(diag).png(), heatmap_figure(diag).png())})
    folder = job.folder
    rep = job.report(**facts)
    # the diagnosis the report holds, typed (kept: not computed again)
    diagnosed = job.diagnose() if rep["diagnosis"] is not None else None
    found, lost = job.breakdown_run()
    tables = found.tables()
    brk = Result(tables=tables, figures=breakdown_figures(tables, []), failed=job.failed)
    try:
        pipe, why = views_result(job.pipeline_views()), ""
    except TraceVizError as exc:
        pipe, why = None, f"no pipeline view: {exc}"
    try:
        steps, clocks = job.step_windows()
        mb, no_timeline = steps.to_pylist(), ""
    except TraceVizError as exc:
        mb, clocks, no_timeline = [], "none", f"no timeline: {exc}"
    model, no_model = _op_model(job)
    lost += model.failed if model is not None else []
    mem = None
    if has_memory_tables(folder):  # an optional section: the page is made without it
        try:
            mem = memory_result(*job.memory_run())
        except TraceVizError:
            mem = None  # e.g. one trace whose tables' folder holds another's memory
    hung = None
    if dumps is not None:
        dumped, unread = read_dumps(dumps)
        hung = hang_result(analyze(dumped), [d.source for d in dumped], unread)
    return Result(texts={os.fspath(output): page_of(
        title or f"traceviz: {job.path.resolve().name}", rep, brk, pipe, why, mb,
        job.pipeline_places(), clocks, no_timeline, model, no_model, mem, hung,
        diagnosed)},
                  failed=list(dict.fromkeys(rep["failed"] + lost))  # each rank once
                  + (hung.failed if hung is not None else []))


def _op_model(job: Job) -> tuple[Result | None, str]:
    """The op model of one trace (from the trace itself), or of a job whose every rank
    has its CPU table (a ``traceviz ops`` or ``critical-path`` parsed them; the ranks
    it leaves out in its ``failed``), else why there is none."""
    if not job.path.is_file() and not has_cpu_tables(job.folder):
        return None, ("no op model: the ranks were parsed without their CPU tables; run "
                      "'traceviz ops JOB' (it parses them) and then 'traceviz html' again")
    try:
        model, failed = job.ops_run()
    except TraceVizError as exc:
        return None, f"no op model: {exc}"
    result = ops_result(model)
    result.failed += failed
    return result, ""
