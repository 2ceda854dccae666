"""``traceviz html``: run the report, the breakdown and the pipeline view on a job (its
traces are parsed first when needed) and put them on one self-contained page
(:mod:`traceviz.render.html_page`)."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceVizError
from ..ingest.tables import tables_folder
from ..render.html_page import PipelineSection, report_page
from . import breakdown, pipeline
from .report import make_report
from .result import Result


def page_of(title: str, rep: dict, brk: Result, pipe: Result | None, why: str) -> str:
    """The page from the report dict and the breakdown's and pipeline's results
    (``pipe`` None: ``why`` there is none)."""
    kernels = [(name[:-4].replace("_", " "), fig.png())
               for name, fig in sorted(brk.figures.items()) if name.startswith("top_kernels_")]
    overlap = brk.figures.get("temporal_breakdown.png")
    section = None
    if pipe is not None:
        first = next((n for n in sorted(pipe.figures) if n.startswith("pipeline_")), None)
        section = PipelineSection(pipe.tables["pipeline_stages"], pipe.tables["pipeline_gaps"],
                                  pipe.figures[first].png() if first else None)
    return report_page(title, rep, brk.tables, kernels, overlap.png() if overlap else None,
                       section, why)


def run(root: str | os.PathLike, output: str | os.PathLike, overrides: dict | None = None,
        topology: str | None = None) -> Result:
    """The page of the job under ``root``, as ``output``."""
    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    folder = tables_folder(root)
    rep = make_report(folder, overrides=overrides, topology=topology)
    brk = breakdown.run([folder])
    try:
        pipe, why = pipeline.run(folder, topology=topology), ""
    except TraceVizError as exc:
        pipe, why = None, f"no pipeline view: {exc}"
    return Result(texts={os.fspath(output): page_of(f"traceviz: {root.resolve().name}", rep,
                                                    brk, pipe, why)},
                  failed=rep["failed"])
