"""Where the analyses find their ranks: trace files, parsed tables (``.parquet``) or
folders of either; loading one rank's table with a one-line reason when it fails; the
rank a table belongs to."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ..errors import TraceVizError


def is_activity_table(path: Path) -> bool:
    """Whether ``path`` is a GPU activity table written by ``traceviz parse`` (not a CPU
    table, not an analysis output)."""
    import pyarrow.parquet as pq

    from ..parse.table import METADATA_KEY

    if path.name.endswith(".cpu.parquet"):
        return False
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid):
        return True  # let the loader report the unreadable file
    return METADATA_KEY in (schema.metadata or {}) and "kind" in schema.names


def input_files(paths: list[str | os.PathLike]) -> list[Path]:
    """Trace and parquet files named by ``paths`` (folders searched recursively; a folder
    with parsed tables gives those, else its traces)."""
    from ..discover import find_traces, no_traces_message

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            parquet = sorted(x for x in p.rglob("*.parquet") if is_activity_table(x))
            out += parquet or [t.path for t in find_traces(p)]
        elif p.exists():
            out.append(p)
        else:
            raise TraceVizError(f"{p}: no such file or folder")
    if not out:
        raise TraceVizError("; ".join(no_traces_message(p) for p in paths))
    return out


def one_folder(files: list[Path], root: Path) -> list[Path]:
    """``files`` when they sit in one folder (one profiled iteration), else an error
    naming the folders to choose from."""
    folders = sorted({f.parent for f in files})
    if len(folders) > 1:
        names = ", ".join(str(f.relative_to(root)) if f.is_relative_to(root) else str(f)
                          for f in folders[:6])
        raise TraceVizError(f"{root}: holds the ranks of several profiled iterations "
                            f"({names}{', ...' if len(folders) > 6 else ''}); pass one of "
                            "those folders")
    return files


def tables_folder(root: Path) -> Path:
    """The folder of parsed rank tables of ``root``'s one profiled iteration, parsing
    the traces with ``traceviz batch`` first when there are none."""
    from .. import runner

    files = input_files([root])
    if not all(f.suffix == ".parquet" for f in files):
        runner.run(root, jobs=min(2, os.cpu_count() or 1), quiet=True)
        files = input_files([runner.output_root(root, None)])
    return one_folder(files, root)[0].parent


def load_table(path: Path, columns: tuple[str, ...] | None = None) -> pa.Table:
    """A parsed table (only ``columns``, those there are; all when None), or a trace
    parsed now."""
    import traceviz

    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        if columns is None:
            return traceviz.load(path)
        try:
            present = set(pq.read_schema(path).names)
        except (OSError, pa.ArrowInvalid):
            present = set(columns)  # traceviz.load reports the unreadable file
        return traceviz.load(path, columns=[c for c in columns if c in present])
    return traceviz.parse(path)


def rank_of(table: pa.Table, path: Path, fallback: int) -> int:
    """The table's rank (``distributedInfo``), else the file name's, else ``fallback``."""
    from ..api import metadata
    from ..discover import rank_from_name

    rank = int(metadata(table).get("rank", -1))
    if rank >= 0:
        return rank
    named = rank_from_name(path.name)
    return named if named is not None else fallback


def rank_tables(files: list[Path], columns: tuple[str, ...] | None, failed: list[str],
                optional: tuple[str, ...] = ()) -> Iterator[tuple[int, Path, pa.Table]]:
    """(rank, path, table) of each file that loads, one at a time; the one-line reason of
    each file that does not, or that lacks one of ``columns`` not named ``optional``
    (tables parsed by older versions), goes to ``failed``."""
    for k, path in enumerate(files):
        try:
            table = load_table(path, columns)
        except TraceVizError as exc:
            failed.append(str(exc))
            continue
        missing = [c for c in columns or () if c not in table.column_names
                   and c not in optional]
        if missing:
            failed.append(f"{path}: not a traceviz activity table (no column "
                          f"{', '.join(missing)}); parse the trace again")
            continue
        yield rank_of(table, path, k), path, table
