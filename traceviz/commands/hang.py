"""``traceviz hang``: who hangs the job, from the ranks' NCCL Flight Recorder dumps
(:mod:`traceviz.analysis.hang`): the verdict first, then per rank what it waits in and
for whom (``hang`` table), per group and rank its last enqueued / started / completed
sequence number (``hang_groups``), and everything as ``hang.json``."""
from __future__ import annotations

import os

from ..analysis.hang import analyze
from ..ingest.flight_recorder import read_dumps
from ..render.hang_files import hang_result
from ..table.result import Result


def run(folder: str | os.PathLike, world: int | None = None) -> Result:
    """The hang verdict of the dumps in ``folder`` (a file: that one) as files
    (:func:`traceviz.render.hang_files.hang_result`); ``value`` is the
    :class:`~traceviz.analysis.hang.Hang`; ``failed`` names the files that could not be
    read (the others are analyzed)."""
    dumps, failed = read_dumps(folder, world)
    return hang_result(analyze(dumps, world), [d.source for d in dumps], failed)
