"""``traceviz hang``: who hangs the job, from the ranks' NCCL Flight Recorder dumps
(:mod:`traceviz.analysis.hang`): the verdict first, then per rank what it waits in and
for whom (``hang`` table), per group and rank its last enqueued / started / completed
sequence number (``hang_groups``), and everything as ``hang.json``."""
from __future__ import annotations

import json
import os

from ..analysis.hang import Hang, analyze
from ..ingest.flight_recorder import read_dumps
from .result import Result


def run(folder: str | os.PathLike, world: int | None = None) -> Result:
    """The hang verdict of the dumps in ``folder`` (a file: that one); ``data["hang"]``
    is the :class:`~traceviz.analysis.hang.Hang`; ``failed`` names the files that could
    not be read (the others are analyzed)."""
    dumps, failed = read_dumps(folder)
    hang = analyze(dumps, world)
    return Result(tables={"hang": hang.rank_table(), "hang_groups": hang.group_table()},
                  texts={"hang.json": json.dumps(_json(hang, [d.source for d in dumps]),
                                                 indent=1) + "\n"},
                  lines=list(hang.verdict), notes=list(hang.notes),
                  data={"hang": hang}, failed=failed)


def _json(hang: Hang, sources: list[str]) -> dict:
    """``hang.json``: the verdict, the causes, every rank's state and every group's
    progress, the collectives some members never entered, the mismatches."""
    return {"verdict": hang.verdict, "causes": list(hang.causes),
            "deadlock": list(hang.deadlock), "mismatches": list(hang.mismatches),
            "never_entered": [{"group": g, "seq": seq if seq >= 0 else None,
                               "entered": list(entered), "never_entered": list(absent)}
                              for g, seq, entered, absent in hang.missing],
            "ranks": hang.rank_table().to_pylist(), "groups": hang.group_table().to_pylist(),
            "dumps": sources, "notes": list(hang.notes)}
