"""The files of the hang analysis (``traceviz hang``, and the HTML page's hang
section): the ``hang`` and ``hang_groups`` tables, ``hang.json``, the verdict."""
from __future__ import annotations

import json

from ..analysis.hang import Hang
from ..table.result import Result


def hang_result(hang: Hang, sources: list[str], failed: list[str]) -> Result:
    """``hang`` (from the dumps ``sources``) as files; ``failed``: the dumps that could
    not be read; ``value``: the hang."""
    return Result(tables={"hang": hang.rank_table(), "hang_groups": hang.group_table()},
                  texts={"hang.json": json.dumps(_json(hang, sources), indent=1) + "\n"},
                  lines=list(hang.verdict), notes=list(hang.notes),
                  value=hang, failed=failed)


def _json(hang: Hang, sources: list[str]) -> dict:
    """``hang.json``: the verdict, the causes, every rank's state and every group's
    progress, each process group's members (once), the collectives some members never
    entered, the mismatches."""
    return {"verdict": hang.verdict, "causes": list(hang.causes),
            "deadlock": list(hang.deadlock), "mismatches": list(hang.mismatches),
            "never_entered": [{"group": g, "seq": seq if seq >= 0 else None,
                               "entered": list(entered), "never_entered": list(absent)}
                              for g, seq, entered, absent in hang.missing],
            "ranks": hang.rank_table().to_pylist(), "groups": hang.group_table().to_pylist(),
            "process_groups": {g.group: {"desc": g.desc, "ranks": list(g.ranks)}
                               for g in hang.groups},
            "dumps": sources, "notes": list(hang.notes)}
