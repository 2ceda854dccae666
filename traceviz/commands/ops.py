"""``traceviz ops``: the op-level performance model (:mod:`traceviz.analysis.ops`) of
one trace or of every rank of a job: FLOPs / bytes per call, efficiency per op shape,
what was not modelled, GPU time per module, MFU from the modelled FLOPs; a roofline and
a module figure."""
from __future__ import annotations

import os

from ..job import Job
from ..render.ops_files import ops_result
from ..table.result import Result


def run(path: Job | str | os.PathLike, *, rank: int | None = None,
        peak_tflops: float | None = None, jobs: int = 1, scheduler: str | None = None
        ) -> Result:
    """The op model of ``path`` (:meth:`Job.ops`) as files
    (:func:`traceviz.render.ops_files.ops_result`), the ranks it leaves out named;
    ``jobs`` / ``scheduler``: where each rank's op model is made."""
    model, failed = Job.of(path, jobs=jobs, scheduler=scheduler).ops_run(
        rank=rank, peak_tflops=peak_tflops)
    result = ops_result(model)
    result.failed += failed
    return result
