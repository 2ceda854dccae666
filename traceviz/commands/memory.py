"""``traceviz memory``: where GPU memory goes (:mod:`traceviz.analysis.memory`): per
rank the allocator's timeline, what is live at the peak by phase and micro-batch of
allocation and by op, the job's ranks and stages, and a figure."""
from __future__ import annotations

import os

from ..job import Job
from ..render.memory_files import memory_result
from ..table.result import Result


def run(path: Job | str | os.PathLike, *, rank: int | None = None) -> Result:
    """The memory of ``path`` as tables, a figure and lines
    (:func:`traceviz.render.memory_files.memory_result`); ``value`` is the
    :class:`~traceviz.analysis.memory.JobMemory`. Notes: the ranks without allocator
    events, and those with events left out (unreadable Bytes or Addr)."""
    job, missing = Job.of(path).memory_run(rank=rank)
    return memory_result(job, missing + [r.note for r in job.ranks if r.note])
