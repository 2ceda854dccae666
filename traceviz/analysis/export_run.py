"""Run ``traceviz export``: one trace gets traceviz's tracks added to a copy of itself;
a folder of one profiled iteration's ranks becomes one clock-synced Chrome trace."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceVizError
from ..render.export import COLUMNS, rank_events, write_job
from .breakdown import input_files, load_table
from .calls import COLUMNS as CALL_COLUMNS
from .calls import rank_calls
from .clocks import offsets_from_calls
from .report_run import one_folder


def _rank_of(table, path: Path, k: int) -> int:
    from ..api import metadata
    from ..discover import rank_from_name

    rank = int(metadata(table).get("rank", -1))
    if rank < 0:
        named = rank_from_name(path.name)
        rank = named if named is not None else k
    return rank


def default_output(source: Path) -> Path:
    stem = source.name.split(".")[0] if source.is_file() else source.name
    return Path(f"{stem}_traceviz.json.gz")


def run(source: str | os.PathLike, output: str | os.PathLike | None = None,
        kernels: bool | None = None, clock_sync: bool = True) -> tuple[Path, int, list[str]]:
    """Write the export; (output path, events written, notes). ``kernels`` defaults to
    False for one trace (its own kernels are there) and True for a job."""
    source = Path(source)
    if not source.exists():
        raise TraceVizError(f"{source}: no such file or folder")
    out = Path(output) if output else default_output(source)
    notes: list[str] = []
    if source.is_file() and source.suffix != ".parquet":
        import traceviz

        from ..render.trace_inject import write_with_events

        table = traceviz.parse(source)
        events = rank_events(table, _rank_of(table, source, 0), 0, bool(kernels))
        if not str(out).endswith(".gz"):
            raise TraceVizError(f"{out}: a trace's annotated copy is written gzipped; "
                                "name it .json.gz")
        return out, write_with_events(source, out, events), notes
    files = one_folder(input_files([source]), source)
    ranks = {}
    calls = []
    for k, path in enumerate(files):
        table = load_table(path, CALL_COLUMNS)
        rank = _rank_of(table, path, k)
        ranks[rank] = path
        calls.append(rank_calls(table, rank))
    offsets = offsets_from_calls(calls, notes)[0] if clock_sync else {}

    def tables():
        for rank, path in sorted(ranks.items()):
            yield rank, load_table(path, COLUMNS)

    return out, write_job(tables(), offsets, out, kernels is not False), notes
