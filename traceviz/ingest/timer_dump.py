"""PP-Schedule-Visualization's timer dumps as pipeline steps.

The Megatron "PP timer" patch writes, per rank, one JSON object of float milliseconds
since that rank's start event (recorded right after a world barrier):
``forward-{m}-start|end`` / ``backward-{m}-start|end`` (``forward-{c}-{m}-...`` per
model chunk under vpp) and ``total-execution-time``, in
``event_times_PP{pp}_VPP{vpp}_TPxCPxDP_rank_{r}_pp_rank_{p}_rank_{g}.json``.
One PP group is the files of one ``TPxCPxDP`` rank ``r`` (plot.py draws r = 0).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import TraceVizError
from ..table.inputs import note_input

NAME = re.compile(r"^event_times_PP(\d+)_VPP(\d+)_TPxCPxDP_rank_(\d+)_pp_rank_(\d+)"
                  r"_rank_(\d+)\.json$")
KEY = re.compile(r"^(forward|backward)-(?:(\d+)-)?(\d+)-(start|end)$")


@dataclass
class TimerGroup:
    """One PP group's steps as micro-batch rows (ns since each rank's start event)."""

    pp: int
    vpp: int
    ranks: list[int]                 # global rank per stage
    rows: list[dict]                 # rank, phase, microbatch, chunk, start_ns, wall_clock_ns
    total_ns: dict[int, int]         # rank -> total-execution-time


def find_dumps(folder: str | os.PathLike) -> list[Path]:
    """Timer dump files directly in ``folder`` (sorted)."""
    folder = Path(folder)
    return sorted(p for p in folder.glob("event_times_*.json") if NAME.match(p.name)) \
        if folder.is_dir() else []


def _ns(ms, path: Path, key: str) -> int:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        raise TraceVizError(f"{path}: {key} is {ms!r}, expected milliseconds (a number)")
    return int(round(ms * 1e6))


def read_group(folder: str | os.PathLike, group: int = 0) -> TimerGroup:
    """The PP group of TPxCPxDP rank ``group`` from the dumps in ``folder``."""
    files = [(p, m) for p in find_dumps(folder) if (m := NAME.match(p.name))]
    mine = [(p, m) for p, m in files if int(m.group(3)) == group]
    if not mine:
        have = sorted({int(m.group(3)) for _, m in files})
        raise TraceVizError(f"{folder}: no timer dumps of TPxCPxDP rank {group} "
                            f"(found ranks {have or 'none'})")
    pp, vpp = int(mine[0][1].group(1)), int(mine[0][1].group(2))
    by_stage: dict[int, tuple[int, Path]] = {}
    for p, m in mine:
        by_stage[int(m.group(4))] = (int(m.group(5)), p)
    if sorted(by_stage) != list(range(pp)):
        raise TraceVizError(f"{folder}: timer dumps of PP stages {sorted(by_stage)} for "
                            f"PP size {pp}; every stage's file is needed")
    rows, total = [], {}
    for stage in range(pp):
        rank, path = by_stage[stage]
        note_input(path)
        try:
            events = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise TraceVizError(f"{path}: not a timer dump ({exc})") from None
        if not isinstance(events, dict):
            raise TraceVizError(f"{path}: not a timer dump (expected one JSON object)")
        pairs: dict[tuple[str, int, int], dict[str, int]] = {}
        for key, value in events.items():
            m = KEY.match(key)
            if m is None:
                continue
            chunk = int(m.group(2)) if m.group(2) is not None else 0
            pairs.setdefault((m.group(1), chunk, int(m.group(3))), {})[m.group(4)] = \
                _ns(value, path, key)
        for (phase, chunk, mb), t in sorted(pairs.items()):
            if "start" in t and "end" in t:  # plot.py skips incomplete pairs too
                rows.append({"rank": rank, "phase": phase.capitalize(), "microbatch": mb,
                             "chunk": chunk, "start_ns": t["start"],
                             "wall_clock_ns": t["end"] - t["start"]})
        if "total-execution-time" in events:
            total[rank] = _ns(events["total-execution-time"], path, "total-execution-time")
    return TimerGroup(pp, vpp, [by_stage[s][0] for s in range(pp)], rows, total)
