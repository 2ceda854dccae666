"""HTA reference cases (../shared/reference/hta) and the traces they were computed on."""
from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
from helpers import REFERENCE, TRACES

import traceviz

HTA = TRACES / "hta"
# Cases whose quirk traceviz does not reproduce even with --hta-compat (see the README's
# "Deliberate differences"): HTA counts cuda_sync rows and CPU ops that carry a stream
# arg as GPU activities; traceviz's table holds only kernels, memcpy and memset.
HTA_ONLY_ROWS = {
    "critical_path_cuda_event_sync": "cuda_sync rows (Stream Sync) counted as GPU time",
    "critical_path_cuda_event_sync_multi_stream": "cuda_sync rows counted as GPU time",
    "triton_example": "a Triton cpu_op with a stream arg counted as a 94 µs kernel",
}


def reference(mode: str, name: str) -> list[dict]:
    with open(REFERENCE / "hta" / mode / name, newline="") as fh:
        return list(csv.DictReader(fh))


def case_files(case: str) -> list[Path]:
    """The trace files of a case: its folder under traces/hta ('/' -> '_'), or that folder
    plus the file's stem; cases from HTA's history carry a ``history_`` prefix."""
    found = []
    for path in sorted(HTA.rglob("*.json*")):
        folder = str(path.parent.relative_to(HTA)).replace("/", "_")
        stem = path.name.split(".json")[0]
        if case.removeprefix("history_") in (folder, f"{folder}_{stem}"):
            found.append(path)
    return found


@lru_cache(maxsize=None)
def case_table(case: str, rank: int) -> pa.Table | None:
    """The parsed table of a case's rank (None when the trace is not in ../shared)."""
    tables = [traceviz.parse_table(p) for p in case_files(case)]
    for t in tables:
        if traceviz.metadata(t)["rank"] == rank:
            return t
    return tables[0] if len(tables) == 1 else None
