"""``traceviz pipeline``: the pipeline schedule of a job's PP groups, measured vs ideal
(:mod:`traceviz.analysis.pipeline`), from its traces or tables (parsed first when
needed), or from a folder of PP-Schedule-Visualization timer dumps."""
from __future__ import annotations

import os

from ..job import Job
from ..render.pipeline_files import views_result
from ..table.result import Result

def run(root: Job | str | os.PathLike, vpp: int | None = None,
        iteration: int | None = None, all_groups: bool = False,
        topology: str | os.PathLike | None = None) -> Result:
    """The pipeline views (:meth:`Job.pipeline_views`) as files (:func:`views_result`)."""
    views, failed = Job.of(root, topology, vpp).pipeline_run(iteration, all_groups)
    res = views_result(views)
    res.failed = list(failed)
    return res
