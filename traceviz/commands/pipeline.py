"""``traceviz pipeline``: the pipeline schedule of a job's PP groups, measured vs ideal
(:mod:`traceviz.analysis.pipeline`), from its traces or tables (parsed first when
needed), or from a folder of PP-Schedule-Visualization timer dumps."""
from __future__ import annotations

import os

from ..ingest import analyses
from ..render.pipeline_files import views_result
from ..table.result import Result

def run(root: str | os.PathLike, vpp: int | None = None, iteration: int | None = None,
        all_groups: bool = False, topology: str | os.PathLike | None = None) -> Result:
    """The pipeline views (:func:`traceviz.ingest.analyses.pipeline`) as files
    (:func:`views_result`)."""
    failed: list[str] = []
    res = views_result(analyses.pipeline(root, vpp, iteration, all_groups, topology, failed))
    res.failed = failed
    return res
